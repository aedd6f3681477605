"""Entity cards (issue 13.3): what is known about one person, pet, place or thing,
gathered from the owner's cards across sessions.

Rule-based, per owner scope as consolidation is (tenant + user, then project), inside
the consolidation run and its transaction (:func:`gather`):

* **names** of a card (:func:`names_of`): the extractor's entities, without the speaker
  it puts first on a conversation statement (every statement of a speaker is about
  them), and, in Latin script, the capitalised words that do not start a sentence ("my
  sister Anna", "our beagle Biscuit", "a trip to Alentejo"), without weekdays, months and
  words capitalised by habit.
* a name stated on at least ``entity_min`` cards of at least ``entity_sessions``
  sessions, and on no more than ``max_df`` of the scope's cards (the owner's own name, or
  the other speaker's, says nothing particular; a small scope keeps up to
  ``summarise_over`` + 1), gets one **entity card**: the name, the ids of the cards that
  state it in the order they were written (``source_card_ids``: a view, not a copy; the
  indexes read the statements from those cards, and recall puts the ones a query is
  about in the view's place, ``core.ltm.views``), every source message id, the name as
  its entity.  At most ``entity_max_cards`` per owner, the most stated first.  A copy of
  the statements held 44% more curated tokens on LoCoMo (memory ratio 1.03 → 0.71) for
  no recall (docs/QUALITY.md, "Sixth wave").

An entity card is a view, not a merge: its sources stay as they are (nothing is hidden),
so retracting it takes nothing away, and a retracted entity card is not built again.
A run rebuilds a card whose statements changed and hides one whose name no longer
qualifies.  Each change is audited (``Action.GATHER``, ``inputs.sources``), which
``explain_card`` reads.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, select

from memstrata.core.lifecycle.audit import Action, AuditEvent, latest_sources
from memstrata.core.lifecycle.config import ConsolidatePolicy
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.ltm.card import ENTITY, CardDraft, CardStatus, card_id
from memstrata.core.ltm.tables import cards
from memstrata.core.models.identity import text_fingerprint

MAX_NAME = 64
MAX_SOURCE_IDS = 512
MAX_SOURCE_CARDS = 512

# a word (an apostrophe or hyphen inside: O'Neill, Jean-Luc); a sentence breaks at these
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_BREAK = re.compile(r"[.!?…:;\"“”()\[\]\n]")
# fmt: off
_HABITUAL = frozenset({
    "i", "i'm", "i've", "i'll", "i'd", "im", "ive", "ok", "okay", "yes", "yeah", "no", "hey",
    "hi", "hello", "thanks", "thank", "wow", "oh", "omg", "lol", "haha", "mr", "mrs", "ms",
    "dr", "sir", "mom", "mum", "dad", "monday", "tuesday", "wednesday", "thursday", "friday",
    "saturday", "sunday", "mon", "tue", "tues", "wed", "thu", "thurs", "fri", "sat", "sun",
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec", "the", "a", "an", "and", "but", "or", "so", "if",
    "when", "what", "who", "where", "why", "how", "this", "that", "these", "those", "it",
    "its", "my", "your", "our", "their", "his", "her", "we", "you", "they", "he", "she",
    "me", "us", "them", "god", "christmas", "easter",
})
# fmt: on
"""Capitalised by habit, not names: greetings, pronouns, weekdays, months, holidays."""


def _proper_nouns(text: str) -> list[str]:
    """Capitalised words that do not start a sentence (Latin script; possessive cut)."""
    out: list[str] = []
    prev_end = 0
    for m in _WORD.finditer(text):
        first = prev_end == 0 or _BREAK.search(text, prev_end, m.start()) is not None
        prev_end = m.end()
        word = m.group(0).rstrip("'’-").removesuffix("'s").removesuffix("’s")
        capitalised = len(word) >= 3 and word[0].isupper() and not word.isupper()
        if capitalised and not first and word.casefold() not in _HABITUAL:
            out.append(word)
    return out


def names_of(summary: str, entities: Sequence[str], *, speaker_first: bool) -> list[str]:
    """The names a card states, de-duplicated case-insensitively, in order: the
    extractor's ``entities`` (without the leading speaker of a conversation statement,
    ``speaker_first``) and the proper nouns of ``summary``."""
    given = list(entities[1:] if speaker_first and entities else entities)
    out: list[str] = []
    seen: set[str] = set()
    for name in (*given, *_proper_nouns(summary)):
        key = name.casefold()
        if key and key not in seen and len(name) <= MAX_NAME and key not in _HABITUAL:
            seen.add(key)
            out.append(name)
    return out


@dataclass(frozen=True)
class Statement:
    """What gathering reads of one card."""

    memory_id: str
    summary: str
    names: tuple[str, ...]
    message_ids: tuple[str, ...]
    session: str  # the card's session tag; "" when it has none (then it is its own)
    created_at: float
    importance: float
    confidence: float
    project_id: str | None = None
    updated_at: float = 0.0  # its text's last change: a view indexed before is stale


@dataclass(frozen=True)
class Gathered:
    """One entity's statements, in the order they were written."""

    name: str
    members: tuple[Statement, ...]

    @property
    def sessions(self) -> int:
        return len({m.session or m.memory_id for m in self.members})


def gathered(statements: Sequence[Statement], pol: ConsolidatePolicy) -> list[Gathered]:
    """The entities of one scope's ``statements`` that get a card, the most stated first
    (ties by name), at most ``entity_max_cards``."""
    by_key: dict[str, list[Statement]] = {}
    surface: dict[str, Counter[str]] = {}
    for s in statements:
        for name in s.names:
            key = name.casefold()
            by_key.setdefault(key, []).append(s)
            surface.setdefault(key, Counter())[name] += 1
    cap = pol.df_cap(len(statements))
    out = []
    for key, members in by_key.items():
        ordered = tuple(sorted(members, key=lambda m: (m.created_at, m.memory_id)))
        g = Gathered(surface[key].most_common(1)[0][0], ordered)
        if pol.entity_min <= len(ordered) <= cap and g.sessions >= pol.entity_sessions:
            out.append(g)
    out.sort(key=lambda g: (-len(g.members), g.name.casefold()))
    return out[: pol.entity_max_cards]


def entity_key(name: str) -> str:
    return f"{ENTITY}:{' '.join(name.casefold().split())[:200]}"


def entity_draft(g: Gathered, *, tenant: str, user: str) -> CardDraft:
    """The entity card of ``g``: the name, how often it is stated, and the ids of the cards
    that state it (``source_card_ids``, in the order they were written) with every source
    message id; no copy of a statement (``core.ltm.views`` reads them from those cards)."""
    mids = list(dict.fromkeys(i for m in g.members for i in m.message_ids))[:MAX_SOURCE_IDS]
    summary = f"{g.name}: stated on {len(g.members)} cards of {g.sessions} sessions"
    return CardDraft(
        tenant_id=tenant,
        user_id=user,
        project_id=g.members[0].project_id,  # a scope's: never across projects
        canonical_key=entity_key(g.name),
        memory_type=ENTITY,
        title=f"{g.name}: {len(g.members)} memories"[:256],
        summary=summary[:2000],
        entities=[g.name[:128]],
        tags=[ENTITY],
        source_type=ENTITY,
        source_message_ids=[m[:128] for m in mids],
        source_card_ids=[m.memory_id for m in g.members][:MAX_SOURCE_CARDS],
        fingerprint=text_fingerprint(user, summary),
        importance=max(m.importance for m in g.members),
        confidence=max(m.confidence for m in g.members),
    )


def reason(g: Gathered, pol: ConsolidatePolicy) -> str:
    return (
        f"{g.name!r} is stated on {len(g.members)} cards (>= {pol.entity_min}) of "
        f"{g.sessions} sessions (>= {pol.entity_sessions})"
    )


# ------------------------------------------------------------------ ledger and audit
def gathered_state(conn: Connection, tenant: str, user: str) -> dict[str, list[str]]:
    """Entity card id → its sources, from each entity card's latest gather row."""
    return latest_sources(conn, tenant, user, Action.GATHER)


@dataclass(frozen=True)
class GatherReport:
    made: tuple[str, ...]  # entity cards written or rebuilt
    hidden: tuple[str, ...]  # entity cards whose name no longer qualifies
    events: tuple[AuditEvent, ...]
    reindexed: tuple[str, ...] = ()  # unchanged, but a card they name was rewritten


def gather(
    lc: Lifecycle,
    conn: Connection,
    statements: Sequence[Statement],
    *,
    tenant: str,
    user: str,
    blocked: set[str],
    now: float,
) -> GatherReport:
    """The owner's entity cards from ``statements`` (every card a consolidation may read,
    hidden ones included), in the caller's transaction; ``blocked`` are retracted card
    ids (never built again).  The caller records the events."""
    pol = lc.settings.consolidate
    state = gathered_state(conn, tenant, user)
    live = {
        str(i): float(at)
        for i, at in conn.execute(
            select(cards.c.memory_id, cards.c.updated_at).where(
                cards.c.memory_id.in_(list(state)), cards.c.status == CardStatus.ACTIVE.value
            )
        )
    } if state else {}  # fmt: skip
    scopes: dict[str | None, list[Statement]] = {}
    for s in statements:
        scopes.setdefault(s.project_id, []).append(s)
    made: list[str] = []
    stale: list[str] = []
    wanted: set[str] = set()
    events: list[AuditEvent] = []
    for _project, group in sorted(scopes.items(), key=lambda kv: (kv[0] is not None, kv[0])):
        for g in gathered(group, pol):
            draft = entity_draft(g, tenant=tenant, user=user)
            mid = card_id(draft.tenant_id, draft.user_id, draft.canonical_key)
            if mid in blocked or mid in wanted:
                continue
            wanted.add(mid)
            sources = draft.source_card_ids
            res = lc.ledger.write(draft, now=now, conn=conn)
            # the same cards, but one's text changed since the view was indexed (a newer
            # statement replaced it): index it again with what they say now
            rewritten = mid in live and max(m.updated_at for m in g.members) > live[mid]
            if res.op == "unchanged" and rewritten:
                lc.ledger.reproject([mid], now=now, conn=conn)
                stale.append(mid)
            if res.op != "unchanged" or state.get(mid) != sources or mid not in live:
                made.append(mid)
                events.append(AuditEvent(
                    Action.GATHER, tenant, user, mid, reason(g, pol), now, (),
                    {"kind": "entity", "name": g.name, "sources": sources, "op": res.op},
                    {"cards": float(len(sources)), "sessions": float(g.sessions)},
                ))  # fmt: skip
    hidden = sorted(m for m in live if m not in wanted)
    for mid in hidden:
        lc.ledger.set_status(mid, CardStatus.SUPERSEDED, now=now, conn=conn)
        events.append(AuditEvent(
            Action.GATHER, tenant, user, mid, "the name no longer qualifies: card hidden",
            now, (), {"kind": "dissolved", "sources": []},
        ))  # fmt: skip
    return GatherReport(tuple(made), tuple(hidden), tuple(events), tuple(stale))
