"""Consolidation of an owner's LTM cards (issue 13.3; seed 2 "同主题 ≥ 3 合并, > 10 摘要化").

Rule-based and measurable, per owner (tenant + user; cards of two owners are never read
together) and within the owner per project: a cluster, and the term statistics it is
judged by, hold cards of one (tenant, user, project) scope only (cards without a project
are a scope of their own), and its merged card carries that ``project_id``:

* **topic**: cards are clustered by the Jaccard similarity of their *topical* terms (the
  stemmed terms of title and summary, minus the terms that occur on more than
  ``max_df`` of the scope's cards - a speaker's name, "I", "really" - so what is left says
  what a card is about).  Clustering is leader-based in creation order: a card joins the
  cluster whose first card it resembles most, if at least ``topic_min`` with
  ``min_shared`` terms in common; a cluster's first card names it, so a cluster that grows
  keeps its merged card.  ``merge_min`` (3) or more agreeing cards become one merged card
  listing every member's statement; over ``summarise_over`` (10) the merged card holds an
  extractive summary (the most central statements, up to ``summary_chars``).
* **duplicate**: two cards at Jaccard ≥ ``duplicate_min`` are one memory said twice
  (across sessions): merged even as a pair.
* **entity**: in the same run, the names stated across sessions get entity cards, views
  that hide nothing (:mod:`core.lifecycle.entity_cards`).

The merged card keeps every source message id; its source card ids are recorded in the
audit row (``Action.CONSOLIDATE``, ``inputs.sources``) that :func:`explain_card` reads.
Sources are superseded (hidden from the indexes, kept in the ledger); retracting the
merged card brings them back (``core.lifecycle.retract``) and the cluster is not merged
again.  A second run over unchanged cards changes nothing (no write, no audit row).

One owner's run holds the owner's lock (:mod:`core.lifecycle.owner_lock`) for its whole
transaction, so a retraction or a session's end for the same owner never interleaves
with it; the Beat run skips a busy owner (``OwnerReport.skipped``) and takes it later.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.errors import NotFound
from memstrata.core.ids import validate_id
from memstrata.core.lifecycle.audit import (
    Action,
    AuditEvent,
    audit_table,
    latest_sources,
    record,
)
from memstrata.core.lifecycle.config import ConsolidatePolicy
from memstrata.core.lifecycle.entity_cards import Statement, gather, gathered_state, names_of
from memstrata.core.lifecycle.owner_lock import OwnerBusy, owner_lock
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import (
    CONSOLIDATED,
    ENTITY,
    CardDraft,
    CardStatus,
    card_id,
    member_line,
)
from memstrata.core.ltm.tables import cards
from memstrata.core.ltm.text import tokens
from memstrata.core.models.identity import EPISODE, SESSION_TAG, text_fingerprint

KIND_TOPIC = "topic"
KIND_DUPLICATE = "duplicate"
NOT_MERGED = frozenset({CONSOLIDATED, ENTITY, "topic_summary", "session_summary", "raw_history"})
"""Cards that are digests or views already (or raw history): never a member of a cluster."""
MAX_SOURCE_IDS = 512


# ------------------------------------------------------------------ pure rules
@dataclass(frozen=True)
class Member:
    """What clustering reads of one card."""

    memory_id: str
    title: str
    summary: str
    entities: tuple[str, ...]
    message_ids: tuple[str, ...]
    importance: float
    confidence: float
    created_at: float
    terms: frozenset[str] = frozenset()
    project_id: str | None = None
    session: str = ""  # the card's session tag, "" when none
    speaker_first: bool = False  # a conversation statement: its first entity is the speaker
    updated_at: float = 0.0


def statement_of(m: Member) -> Statement:
    """What entity gathering reads of a member (``core.lifecycle.entity_cards``)."""
    names = names_of(m.summary, m.entities, speaker_first=m.speaker_first)
    return Statement(
        m.memory_id, m.summary, tuple(names), m.message_ids, m.session, m.created_at,
        m.importance, m.confidence, m.project_id, m.updated_at,
    )  # fmt: skip


def card_terms(text: str) -> frozenset[str]:
    """Stemmed terms of a text, without one- and two-letter Latin words (CJK kept)."""
    return frozenset(t for t in tokens(text) if len(t) > 2 or not t.isascii())


def topical(members: Sequence[Member], pol: ConsolidatePolicy) -> list[Member]:
    """Each member with only its topical terms: a term on more than ``max_df`` of the
    scope's cards (``members``: one owner's project) says nothing about what one card is
    about (a speaker's name, "the"), unless it is on no more cards than one summarised
    topic holds (``summarise_over`` + 1), so a small scope's topic keeps its words."""
    df = Counter(t for m in members for t in m.terms)
    cap = pol.df_cap(len(members))
    return [
        Member(**{**m.__dict__, "terms": frozenset(t for t in m.terms if df[t] <= cap)})
        for m in members
    ]


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def related(a: Member, b: Member, pol: ConsolidatePolicy) -> float:
    """The similarity of two cards if it makes them one topic (else 0)."""
    sim = jaccard(a.terms, b.terms)
    if sim >= pol.duplicate_min:
        return sim
    if sim >= pol.topic_min and len(a.terms & b.terms) >= pol.min_shared:
        return sim
    return 0.0


@dataclass
class Cluster:
    leader: Member
    members: list[Member] = field(default_factory=list)
    sims: list[float] = field(default_factory=list)  # each member's similarity to the leader

    @property
    def kind(self) -> str:
        return KIND_TOPIC if len(self.members) > 2 else KIND_DUPLICATE


def cluster(members: Sequence[Member], pol: ConsolidatePolicy) -> list[Cluster]:
    """Leader clustering in creation order (deterministic: ties by card id)."""
    out: list[Cluster] = []
    for m in sorted(members, key=lambda m: (m.created_at, m.memory_id)):
        best, best_sim = None, 0.0
        for c in out:
            s = related(c.leader, m, pol)
            if s > best_sim:
                best, best_sim = c, s
        if best is None:
            out.append(Cluster(m, [m], [1.0]))
        else:
            best.members.append(m)
            best.sims.append(best_sim)
    return out


def scoped_clusters(members: Sequence[Member], pol: ConsolidatePolicy) -> list[Cluster]:
    """The clusters of each project scope apart (no project is a scope too): a project's
    cards are judged by that project's term statistics and never merged with another's."""
    scopes: dict[str | None, list[Member]] = {}
    for m in members:
        scopes.setdefault(m.project_id, []).append(m)
    out: list[Cluster] = []
    for _project, group in sorted(scopes.items(), key=lambda kv: (kv[0] is not None, kv[0])):
        out += cluster(topical(group, pol), pol)
    return out


def mergeable(c: Cluster, pol: ConsolidatePolicy) -> bool:
    """≥ ``merge_min`` agreeing cards, or a pair of near-duplicates."""
    if len(c.members) >= pol.merge_min:
        return True
    return len(c.members) == 2 and c.sims[1] >= pol.duplicate_min


def central_order(c: Cluster) -> list[Member]:
    """Members by centrality (summed similarity to the others), most central first."""
    score = {
        m.memory_id: sum(jaccard(m.terms, o.terms) for o in c.members if o is not m)
        for m in c.members
    }
    return sorted(c.members, key=lambda m: (-score[m.memory_id], m.created_at, m.memory_id))


def statements(ordered: Sequence[Member], pol: ConsolidatePolicy, *, limit: int) -> list[str]:
    """The members' statements, near-duplicates said once, at most ``limit`` characters."""
    out: list[str] = []
    kept: list[frozenset[str]] = []
    used = 0
    for m in ordered:
        if any(jaccard(m.terms, k) >= pol.duplicate_min for k in kept):
            continue
        line = " ".join(m.summary.split())
        if used + len(line) > limit and out:
            break
        out.append(line[:limit])
        kept.append(m.terms)
        used += len(line) + 3
    return out


def merged_key(leader_id: str) -> str:
    return f"{CONSOLIDATED}:{leader_id}"


def merged_draft(
    c: Cluster, pol: ConsolidatePolicy, *, tenant: str, user: str, max_content: int
) -> CardDraft:
    """The merged card of one cluster: an extractive summary (the most central
    statements, up to ``summary_chars``), one content line per distinct member statement
    with its message ids (what recall focuses on), every source message id, the
    members' entities.  The members' indexed context is not carried over."""
    ordered = central_order(c)
    summarised = len(c.members) > pol.summarise_over
    lines = statements(ordered, pol, limit=pol.summary_chars if summarised else 2000)
    terms = Counter(t for m in c.members for t in m.terms)
    topic = " ".join(t for t, _ in sorted(terms.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
    mids = list(dict.fromkeys(mid for m in ordered for mid in m.message_ids))[:MAX_SOURCE_IDS]
    entities = list(dict.fromkeys(e for m in ordered for e in m.entities))[:64]
    summary = " | ".join(lines)[:2000]
    body: list[str] = []
    used = 0
    for m in sorted(c.members, key=lambda m: (m.created_at, m.memory_id)):
        line = member_line(m.message_ids, m.summary)
        if used + len(line) + 1 > max_content:
            break
        body.append(line)
        used += len(line) + 1
    return CardDraft(
        tenant_id=tenant,
        user_id=user,
        project_id=c.leader.project_id,  # every member's: clusters never cross projects
        canonical_key=merged_key(c.leader.memory_id),
        memory_type=CONSOLIDATED,
        title=f"{topic or c.leader.title}: {len(c.members)} memories"[:256],
        summary=summary,
        content="\n".join(body),
        entities=[e[:128] for e in entities],
        tags=[CONSOLIDATED, f"kind:{c.kind}", *(["summarised"] if summarised else [])],
        source_type=CONSOLIDATED,
        source_message_ids=[m[:128] for m in mids],
        fingerprint=text_fingerprint(user, summary),
        importance=max(m.importance for m in c.members),
        confidence=max(m.confidence for m in c.members),
    )


def reason(c: Cluster, pol: ConsolidatePolicy) -> str:
    low = min(c.sims[1:], default=1.0)
    if c.kind == KIND_DUPLICATE:
        return f"near-duplicates: term similarity {low:.2f} >= {pol.duplicate_min}"
    how = "summarised" if len(c.members) > pol.summarise_over else "merged"
    return (
        f"{len(c.members)} cards on one topic (>= {pol.merge_min}) {how}: each shares >= "
        f"{pol.min_shared} topical terms with the first, similarity >= {low:.2f}"
    )


# ------------------------------------------------------------------ ledger and audit
def _members(conn: Connection, tenant: str, user: str, ids: Iterable[str] | None) -> list[Member]:
    stmt = select(
        cards.c.memory_id, cards.c.title, cards.c.summary, cards.c.entities,
        cards.c.source_message_ids, cards.c.importance, cards.c.confidence, cards.c.created_at,
        cards.c.memory_type, cards.c.source_type, cards.c.status, cards.c.project_id,
        cards.c.tags, cards.c.updated_at,
    ).where(cards.c.tenant_id == tenant, cards.c.user_id == user)  # fmt: skip
    if ids is None:
        stmt = stmt.where(cards.c.status == CardStatus.ACTIVE.value)
    else:
        stmt = stmt.where(cards.c.memory_id.in_(list(ids)))
    out = []
    for r in conn.execute(stmt):
        if r.memory_type in NOT_MERGED or r.source_type in NOT_MERGED:
            continue
        if r.status == CardStatus.DELETED.value:
            continue
        out.append(Member(
            r.memory_id, r.title, r.summary, tuple(r.entities or ()),
            tuple(r.source_message_ids or ()), float(r.importance), float(r.confidence),
            float(r.created_at), card_terms(f"{r.title} {r.summary}"), r.project_id,
            next((t for t in (r.tags or ()) if t.startswith(SESSION_TAG)), ""),
            r.memory_type == EPISODE, float(r.updated_at),
        ))  # fmt: skip
    return out


def _merged_state(conn: Connection, tenant: str, user: str) -> dict[str, list[str]]:
    """Merged card id → its sources, from each merged card's latest consolidate row."""
    return latest_sources(conn, tenant, user, Action.CONSOLIDATE)


def sources_of(
    conn: Connection, tenant: str, user: str, merged_ids: Sequence[str]
) -> dict[str, list[str]]:
    """Each of the owner's merged cards ``merged_ids`` → its source card ids at its latest
    merge, without the sources the user retracted (recall's as-of read of a merged card
    rewritten since, ``core.recall.ltm_adapter``)."""
    state = _merged_state(conn, tenant, user)
    gone = _retracted(conn, tenant, user)
    return {m: [s for s in state[m] if s not in gone] for m in merged_ids if m in state}


def _retracted(conn: Connection, tenant: str, user: str) -> set[str]:
    stmt = select(audit_table.c.target).where(
        audit_table.c.tenant_id == tenant, audit_table.c.user_id == user,
        audit_table.c.action == Action.RETRACT.value,
    )  # fmt: skip
    return {str(t) for (t,) in conn.execute(stmt)}


def _status(conn: Connection, ids: Sequence[str]) -> dict[str, str]:
    if not ids:
        return {}
    rows = conn.execute(
        select(cards.c.memory_id, cards.c.status).where(cards.c.memory_id.in_(list(ids)))
    )
    return {str(i): str(s) for i, s in rows}


def absorbed(lc: Lifecycle, *, tenant_id: str, user_id: str) -> dict[str, str]:
    """Source card id → the active merged card that holds it (what a merge hid)."""
    with pg_errors("read consolidation"), lc.engine.connect() as conn:
        return absorbed_in(conn, tenant_id, user_id)


def absorbed_in(conn: Connection, tenant_id: str, user_id: str) -> dict[str, str]:
    """:func:`absorbed` inside the caller's transaction."""
    state = _merged_state(conn, tenant_id, user_id)
    live = _status(conn, list(state))
    return {
        s: merged
        for merged, sources in state.items()
        if live.get(merged) == CardStatus.ACTIVE.value
        for s in sources
    }


@dataclass(frozen=True)
class OwnerReport:
    tenant_id: str
    user_id: str
    cards: int
    merged: tuple[str, ...]
    hidden: int
    restored: int
    skipped: bool = False  # another lifecycle job held the owner: nothing read or written
    entities: tuple[str, ...] = ()  # entity cards written or rebuilt
    entities_hidden: tuple[str, ...] = ()  # entity cards whose name no longer qualifies

    @property
    def changed(self) -> bool:
        return bool(
            self.merged or self.hidden or self.restored or self.entities or self.entities_hidden
        )


def consolidate_owner(
    lc: Lifecycle, *, tenant_id: str | None, user_id: str, now: float,
    wait_s: float | None = None,
) -> OwnerReport:
    """One owner's consolidation in one transaction that holds the owner's lock; the
    changed card ids go to ``lc.on_cards`` (the indexer projects the merged cards and
    removes the hidden).  The lock is waited for ``wait_s`` seconds (default
    ``owner_lock_wait_s``; 0: tried once), then :class:`OwnerBusy`."""
    tenant = lc.tenant(tenant_id)
    validate_id(user_id, kind="user_id")
    pol = lc.settings.consolidate
    wait = lc.settings.owner_lock_wait_s if wait_s is None else wait_s
    touched: list[str] = []
    made: list[str] = []
    hidden = restored = 0
    with owner_lock(lc.engine, tenant, user_id, wait_s=wait) as conn, pg_errors("consolidate"):
        state = _merged_state(conn, tenant, user_id)
        live = _status(conn, list(state))
        current = {m: s for m, s in state.items() if live.get(m) == CardStatus.ACTIVE.value}
        held = {s for sources in current.values() for s in sources}
        active = _members(conn, tenant, user_id, None)
        known = {m.memory_id for m in active}
        blocked = _retracted(conn, tenant, user_id)
        universe = active + _members(conn, tenant, user_id, sorted(held - known - blocked))
        status = _status(conn, [m.memory_id for m in universe])
        wanted: dict[str, list[str]] = {}
        events: list[AuditEvent] = []
        for c in scoped_clusters(universe, pol):
            if not mergeable(c, pol):
                continue
            draft = merged_draft(
                c, pol, tenant=tenant, user=user_id, max_content=lc.ledger.max_content_chars
            )
            mid = _card_id(draft)
            if mid in blocked:  # retracted once: its sources stay as they are
                continue
            sources = [m.memory_id for m in c.members]
            wanted[mid] = sources
            res = lc.ledger.write(draft, now=now, conn=conn)
            for s in sources:
                if status.get(s) == CardStatus.ACTIVE.value:
                    lc.ledger.set_status(s, CardStatus.SUPERSEDED, now=now, conn=conn)
                    touched.append(s)
                    hidden += 1
            if res.op != "unchanged" or current.get(mid) != sources:
                made.append(mid)
                touched.append(mid)
                events.append(AuditEvent(
                    Action.CONSOLIDATE, tenant, user_id, mid, reason(c, pol), now, (),
                    {"kind": c.kind, "sources": sources, "op": res.op,
                     "summarised": len(c.members) > pol.summarise_over,
                     "rule": pol.model_dump(mode="json")},
                    {"cards": float(len(sources)), "min_similarity": min(c.sims[1:], default=1.0)},
                ))  # fmt: skip
        keep = {s for v in wanted.values() for s in v}
        # a source that drifted out of a cluster that is still merged (the owner's term
        # counts moved): back to active, or it would stay hidden with no card holding it
        for mid in wanted:
            drifted = [s for s in current.get(mid, []) if s not in keep]
            if drifted:
                restored += _restore(lc, conn, drifted, now)
                touched += drifted
                events.append(AuditEvent(
                    Action.CONSOLIDATE, tenant, user_id, mid,
                    "sources no longer on the topic: restored", now, (),
                    {"kind": "drifted", "sources": wanted[mid], "restored": drifted},
                ))  # fmt: skip
        # merged cards no cluster asks for any more: hidden, their sources back
        for mid, sources in current.items():
            if mid in wanted:
                continue
            lc.ledger.set_status(mid, CardStatus.SUPERSEDED, now=now, conn=conn)
            touched.append(mid)
            back = [s for s in sources if s not in keep]
            restored += _restore(lc, conn, back, now)
            touched += back
            events.append(AuditEvent(
                Action.CONSOLIDATE, tenant, user_id, mid,
                "no longer a cluster: merged card hidden, its sources restored", now, (),
                {"kind": "dissolved", "sources": [], "restored": back},
            ))  # fmt: skip
        # entity cards: views over every statement (hidden behind a merge or not)
        gathered = gather(
            lc, conn, [statement_of(m) for m in universe] if pol.entities else [],
            tenant=tenant, user=user_id, blocked=blocked, now=now,
        )  # fmt: skip
        touched += [*gathered.made, *gathered.hidden, *gathered.reindexed]
        record(conn, [*events, *gathered.events])
    if touched:
        lc.on_cards(sorted(set(touched)))
    return OwnerReport(
        tenant, user_id, len(universe), tuple(made), hidden, restored,
        entities=gathered.made, entities_hidden=gathered.hidden,
    )  # fmt: skip


def _card_id(draft: CardDraft) -> str:
    return card_id(draft.tenant_id, draft.user_id, draft.canonical_key)


def _restore(lc: Lifecycle, conn: Connection, ids: Sequence[str], now: float) -> int:
    """Sources of a merged card back to active (those a merge had superseded), except a
    source retracted while it was hidden: the user's retraction stands."""
    status = _status(conn, ids)
    retracted = _retracted_among(conn, ids)
    back = [i for i in ids if status.get(i) == CardStatus.SUPERSEDED.value and i not in retracted]
    for i in back:
        lc.ledger.set_status(i, CardStatus.ACTIVE, now=now, conn=conn)
    return len(back)


def _retracted_among(conn: Connection, ids: Sequence[str]) -> set[str]:
    if not ids:
        return set()
    stmt = select(audit_table.c.target).where(
        audit_table.c.action == Action.RETRACT.value, audit_table.c.target.in_(list(ids))
    )
    return {str(t) for (t,) in conn.execute(stmt)}


def restore_sources(lc: Lifecycle, conn: Connection, merged_id: str, now: float) -> list[str]:
    """Called by a retraction of a merged card: its sources come back."""
    row = conn.execute(
        select(audit_table.c.inputs)
        .where(audit_table.c.target == merged_id,
               audit_table.c.action == Action.CONSOLIDATE.value)
        .order_by(audit_table.c.id.desc())
        .limit(1)
    ).first()  # fmt: skip
    sources = [str(s) for s in ((row.inputs or {}).get("sources", []) if row else [])]
    _restore(lc, conn, sources, now)
    return sources


def changed_owners(lc: Lifecycle, *, since: float, limit: int) -> list[tuple[str, str]]:
    """Owners with a card changed since ``since`` (newest change first)."""
    from sqlalchemy import func

    stmt = (
        select(cards.c.tenant_id, cards.c.user_id)
        .where(cards.c.updated_at >= since)
        .group_by(cards.c.tenant_id, cards.c.user_id)
        .order_by(func.max(cards.c.updated_at).desc(), cards.c.tenant_id, cards.c.user_id)
        .limit(limit)
    )
    with pg_errors("list changed owners"), lc.engine.connect() as conn:
        return [(str(t), str(u)) for t, u in conn.execute(stmt)]


def consolidate(
    lc: Lifecycle,
    *,
    now: float,
    since: float | None = None,
    limit: int | None = None,
    max_s: float | None = None,
) -> list[OwnerReport]:
    """The Beat job: every owner with a card changed since ``since`` (default: two
    intervals ago), at most ``limit`` owners (``max_owners``), newest change first, and
    no new owner after ``max_s`` seconds (the rest are still "changed" next run).  An
    owner another lifecycle job holds is skipped (a ``skipped`` report), not waited for:
    it is still "changed" at the next run."""
    pol = lc.settings.consolidate
    start = now - 2 * pol.interval_s if since is None else since
    owners = changed_owners(lc, since=start, limit=limit or pol.max_owners)
    deadline = time.monotonic() + (max_s if max_s is not None else float("inf"))
    out = []
    for t, u in owners:
        if time.monotonic() > deadline:
            break
        try:
            out.append(consolidate_owner(lc, tenant_id=t, user_id=u, now=now, wait_s=0))
        except OwnerBusy:
            out.append(OwnerReport(t, u, 0, (), 0, 0, skipped=True))
    return out


# ------------------------------------------------------------------ explain
@dataclass(frozen=True)
class CardExplanation:
    """What a consolidation did with one card, in words and ids."""

    memory_id: str
    status: str
    memory_type: str
    merged_into: str | None
    sources: tuple[dict[str, Any], ...]
    history: tuple[dict[str, Any], ...]
    entity_cards: tuple[str, ...] = ()  # the live entity cards that gather this card

    def lines(self) -> list[str]:
        out = [f"card {self.memory_id}: {self.memory_type}, {self.status}"]
        if self.merged_into:
            out.append(f"  merged into {self.merged_into} (hidden, not deleted)")
        for e in self.entity_cards:
            out.append(f"  gathered into entity card {e} (a view: this card stays)")
        for s in self.sources:
            out.append(f"  source {s['memory_id']} [{s['status']}]: {s['summary'][:100]}")
        for h in self.history:
            out.append(f"  {h['action']} -> {h['target']}: {h['reason']}")
        return out


def explain_card(lc: Lifecycle, card_id: str) -> CardExplanation:
    """What was merged (or gathered) into ``card_id`` and why, or what ``card_id`` was
    merged or gathered into."""
    validate_id(card_id, kind="memory_id")
    with pg_errors("explain card"), lc.engine.connect() as conn:
        card = lc.ledger.cards([card_id], conn=conn).get(card_id)
        if card is None:
            raise NotFound(f"no LTM card {card_id}")
        state = _merged_state(conn, card.tenant_id, card.user_id)
        views = gathered_state(conn, card.tenant_id, card.user_id)
        live = _status(conn, [*state, *views])
        into = next((m for m, s in state.items()
                     if card_id in s and live.get(m) == CardStatus.ACTIVE.value), None)  # fmt: skip
        entities = tuple(m for m, s in views.items()
                         if card_id in s and live.get(m) == CardStatus.ACTIVE.value)  # fmt: skip
        sources = state.get(card_id) or views.get(card_id, [])
        src = lc.ledger.cards(sources, conn=conn) if sources else {}
        rows = conn.execute(
            select(audit_table.c.action, audit_table.c.target, audit_table.c.reason,
                   audit_table.c.at, audit_table.c.inputs)
            .where(audit_table.c.target.in_([card_id, *([into] if into else []), *entities]))
            .order_by(audit_table.c.id)
        ).all()  # fmt: skip
    return CardExplanation(
        card_id, card.status.value, card.memory_type, into,
        tuple({"memory_id": s, "status": src[s].status.value if s in src else "missing",
               "summary": src[s].summary if s in src else ""} for s in sources),
        tuple({"action": r.action, "target": r.target, "reason": r.reason, "at": r.at,
               "kind": (r.inputs or {}).get("kind")} for r in rows),
        entities,
    )  # fmt: skip
