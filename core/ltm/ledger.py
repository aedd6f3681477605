"""The card ledger (outbox) in PostgreSQL: cards and their per-index projection state.

Writing a card and marking both of its projections ``pending`` happen in one
transaction, so a card can never exist without the work that puts it into the indexes.
Projection state follows the state machine of :mod:`core.ltm.projection`.

Marks carry the card version they were computed for, so a slow indexer never marks a
newer version as indexed.  :class:`Ledger` is the API; the module's private functions
are its SQL, each on a Core ``Connection``.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    String,
    Text,
    and_,
    any_,
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.errors import CorruptRecord, InvalidInput, NotFound, PayloadTooLarge
from memstrata.core.ids import validate_id
from memstrata.core.ltm.asof import HISTORY_SOURCE, history_prefix
from memstrata.core.ltm.card import LABEL_PATTERN, CardDraft, CardStatus, LtmCard
from memstrata.core.ltm.projection import ProjectionState
from memstrata.core.ltm.tables import INDEX_NAMES, cards, projections, stale_rows

RAW_HISTORY_SOURCE = "raw_history"  # a card of L0's raw text (core.ltm.history), not curated

_LABEL = re.compile(LABEL_PATTERN)  # a card's memory_type (core.ltm.card.Label)
MAX_LISTED = 1000  # cards one listing returns at most (as the REST route's limit)


@dataclass(frozen=True)
class Projection:
    memory_id: str
    index_name: str
    state: ProjectionState
    target_version: int
    indexed_version: int | None
    attempts: int
    last_error: str | None
    changed_at: float


@dataclass(frozen=True)
class StaleRow:
    """A row an index holds for a version of a card it no longer serves (core/ltm/rows.py)."""

    index_name: str
    row_key: str
    memory_id: str
    since: float = 0.0  # when it was (last) recorded, as read by the purge


@dataclass(frozen=True)
class WriteResult:
    memory_id: str
    version: int
    op: str  # inserted | updated | unchanged


def _row_values(card: LtmCard) -> dict[str, Any]:
    values = card.model_dump(mode="json")
    values["content_hash"] = card.content_hash()
    return values


def _write_card(
    conn: Connection, draft: CardDraft, *, now: float, max_content_chars: int
) -> WriteResult:
    """Insert or update a card and mark both projections pending, in ``conn``'s transaction.

    A re-promotion with identical indexed content changes nothing (``unchanged``): no
    version bump and no re-indexing.  Otherwise the version goes up by one.
    """
    if len(draft.content) > max_content_chars:
        raise PayloadTooLarge(
            f"card content of {len(draft.content)} chars over the {max_content_chars} limit"
        )
    card = LtmCard.from_draft(draft, now=now)
    values = _row_values(card)
    stmt = insert(cards).values(**values)
    changed = {
        k: stmt.excluded[k]
        for k in values
        if k not in {"memory_id", "created_at", "access_count", "version"}
    }
    upsert = stmt.on_conflict_do_update(
        index_elements=[cards.c.memory_id],
        set_={**changed, "version": cards.c.version + 1},
        where=or_(
            cards.c.content_hash != stmt.excluded.content_hash,
            cards.c.status != stmt.excluded.status,
        ),
    ).returning(cards.c.version)
    row = conn.execute(upsert).first()
    if row is None:
        current = conn.execute(
            select(cards.c.version).where(cards.c.memory_id == card.memory_id)
        ).scalar_one()
        return WriteResult(card.memory_id, int(current), "unchanged")
    version = int(row.version)
    _mark_pending(conn, card.memory_id, version, now)
    return WriteResult(card.memory_id, version, "inserted" if version == 1 else "updated")


def _mark_pending(conn: Connection, memory_id: str, version: int, now: float) -> None:
    stmt = insert(projections).values(
        [
            {
                "memory_id": memory_id,
                "index_name": name,
                "state": ProjectionState.PENDING.value,
                "target_version": version,
                "attempts": 0,
                "changed_at": now,
            }
            for name in INDEX_NAMES
        ]
    )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[projections.c.memory_id, projections.c.index_name],
            set_={
                "state": ProjectionState.PENDING.value,
                "target_version": version,
                "attempts": 0,
                "last_error": None,
                "changed_at": now,
            },
        )
    )


def _set_status(conn: Connection, memory_id: str, status: CardStatus, *, now: float) -> int:
    """Change a card's status (``deleted`` propagates a delete to both indexes)."""
    validate_id(memory_id, kind="memory_id")
    row = conn.execute(
        update(cards)
        .where(cards.c.memory_id == memory_id, cards.c.status != status.value)
        .values(status=status.value, version=cards.c.version + 1, updated_at=now)
        .returning(cards.c.version)
    ).first()
    if row is None:
        exists = conn.execute(
            select(cards.c.version).where(cards.c.memory_id == memory_id)
        ).scalar_one_or_none()
        if exists is None:
            raise NotFound(f"no LTM card {memory_id}")
        return int(exists)
    _mark_pending(conn, memory_id, int(row.version), now)
    return int(row.version)


# one array parameter, not one per id: the same statement text for any number of ids,
# which psycopg prepares once per connection (recall reads ~20 cards on every LTM search)
_CARDS_BY_ID = select(cards).where(
    cards.c.memory_id == any_(bindparam("ids", type_=ARRAY(String)))
)


def _curated_statement() -> Select[Any]:
    """Which active curated cards of the owner hold any of the message ids ``ids``: the
    message ids first, through ix_ltm_cards_sources (GIN), then the owner.  Left to the
    planner, a table without statistics (autovacuum off, or a bulk load not analysed yet)
    was read through the owner index instead, every card of the owner (7 ms at 10k cards
    against 0.04); ``MATERIALIZED`` fixes the order whatever the statistics (or a
    prepared statement's generic plan) say.  Bound parameters, not literals: one
    statement text, compiled once and prepared by psycopg (recall asks it every time)."""
    holding = (
        select(cards.c.source_message_ids, cards.c.tenant_id, cards.c.user_id,
               cards.c.status, cards.c.source_type)
        .where(cards.c.source_message_ids.has_any(bindparam("ids", type_=ARRAY(Text))))
        .cte("holding")
        .prefix_with("MATERIALIZED")
    )  # fmt: skip
    return select(holding.c.source_message_ids).where(
        holding.c.tenant_id == bindparam("tenant_id", type_=String),
        holding.c.user_id == bindparam("user_id", type_=String),
        holding.c.status == CardStatus.ACTIVE.value,
        holding.c.source_type.not_in((RAW_HISTORY_SOURCE, HISTORY_SOURCE)),
    )


CURATED = _curated_statement()
"""The statement of :meth:`Ledger.curated`; parameters ``ids``, ``tenant_id``, ``user_id``."""


def _load_cards(conn: Connection, memory_ids: Sequence[str]) -> dict[str, LtmCard]:
    """Cards by id (missing ids are simply absent)."""
    ids = [validate_id(m, kind="memory_id") for m in memory_ids]
    if not ids:
        return {}
    rows = conn.execute(_CARDS_BY_ID, {"ids": ids}).mappings().all()  # one fetch, not one a row
    return {row["memory_id"]: _card_of(row) for row in rows}


# a row's key in the cache: the hash of the indexed fields (LtmCard.content_hash, the
# card's id among them) and the fields that hash leaves out; together, every field
_CACHE_KEY = ("memory_id", "content_hash", "status", "version", "access_count", "created_at",
             "updated_at", "canonical_key", "fingerprint", "occurred_at")  # fmt: skip


class _ValidatedCards:
    """Cards validated from rows before, by every value of the row: the hash of the
    indexed fields (``content_hash``, computed when the row is written) and the fields
    it leaves out.  Recall reads the same cards again and again, and validating a row
    was half of its ledger read at 100 cards (docs/PERFORMANCE.md); a row that differs
    in any field has another key and is validated.  Bounded in cards and in characters
    of text (a card's content and BM25 text can be 80k characters; the least recently
    read go first, and a card over 1/64 of the text budget is not kept)."""

    def __init__(self, size: int = 4096, chars: int = 8_000_000) -> None:
        self.size = size
        self.chars = chars
        self._cards: OrderedDict[tuple[Any, ...], tuple[LtmCard, int]] = OrderedDict()
        self._held = 0  # characters of text the kept cards hold
        self._lock = threading.Lock()

    def card(self, row: Any) -> LtmCard:
        key = tuple(row[k] for k in _CACHE_KEY)
        with self._lock:
            kept = self._cards.get(key)
            if kept is not None:
                self._cards.move_to_end(key)
                return kept[0]
        card = _validated(row)
        weight = len(card.title) + len(card.summary) + len(card.content) + len(card.bm25_text)
        if weight > self.chars // 64:
            return card
        with self._lock:
            if key not in self._cards:
                self._cards[key] = (card, weight)
                self._held += weight
            while len(self._cards) > self.size or self._held > self.chars:
                self._held -= self._cards.popitem(last=False)[1][1]
        return card


def _validated(row: Any) -> LtmCard:
    data = {k: v for k, v in row.items() if k != "content_hash"}
    try:
        return LtmCard.model_validate(data)
    except ValueError as exc:
        raise CorruptRecord(f"unreadable LTM card {row['memory_id']}: {exc}") from exc


_validated_cards = _ValidatedCards()


def _card_of(row: Any) -> LtmCard:
    return _validated_cards.card(row)


def _load_projections(conn: Connection, memory_ids: Sequence[str]) -> list[Projection]:
    ids = [validate_id(m, kind="memory_id") for m in memory_ids]
    if not ids:
        return []
    rows = conn.execute(
        select(projections)
        .where(projections.c.memory_id.in_(ids))
        .order_by(projections.c.memory_id, projections.c.index_name)
    ).mappings()
    return [_projection(row) for row in rows]


def _projection(row: Any) -> Projection:
    return Projection(
        memory_id=row["memory_id"],
        index_name=row["index_name"],
        state=ProjectionState(row["state"]),
        target_version=int(row["target_version"]),
        indexed_version=row["indexed_version"],
        attempts=int(row["attempts"]),
        last_error=row["last_error"],
        changed_at=float(row["changed_at"]),
    )


def _mark_indexed(
    conn: Connection, memory_id: str, index_name: str, version: int, *, now: float
) -> bool:
    """Record that ``index_name`` holds ``version``; False if a newer version is pending."""
    row = conn.execute(
        update(projections)
        .where(
            projections.c.memory_id == memory_id,
            projections.c.index_name == index_name,
            projections.c.target_version == version,
        )
        .values(
            state=ProjectionState.INDEXED.value,
            indexed_version=version,
            attempts=0,
            last_error=None,
            changed_at=now,
        )
        .returning(projections.c.memory_id)
    ).first()
    return row is not None


def _mark_indexed_many(
    conn: Connection, marks: Sequence[tuple[str, str, int]], *, now: float
) -> None:
    """:func:`_mark_indexed` for many (memory_id, index, version) in one executemany."""
    if not marks:
        return
    stmt = (
        update(projections)
        .where(
            projections.c.memory_id == bindparam("m"),
            projections.c.index_name == bindparam("i"),
            projections.c.target_version == bindparam("v"),
        )
        .values(
            state=ProjectionState.INDEXED.value,
            indexed_version=bindparam("v"),
            attempts=0,
            last_error=None,
            changed_at=now,
        )
    )
    conn.execute(stmt, [{"m": m, "i": i, "v": v} for m, i, v in marks])


def _record_stale(
    conn: Connection,
    stale: Sequence[StaleRow],
    written: Sequence[tuple[StaleRow, int]],
    *,
    now: float,
) -> None:
    """Remember rows to purge, ``since`` = now (one recorded again gets the new time):
    ``stale``, and the rows of ``written`` whose version is no longer their card's target
    there.  One read of the cards' projections answers both that and which cards still
    exist (an erased card has none: its rows went with the owner's filter)."""
    if not (stale or written):
        return
    ids = {r.memory_id for r in stale} | {r.memory_id for r, _ in written}
    target = {
        (str(m), str(i)): int(v)
        for m, i, v in conn.execute(
            select(projections.c.memory_id, projections.c.index_name,
                   projections.c.target_version).where(projections.c.memory_id.in_(ids))
        )
    }  # fmt: skip
    alive = {m for m, _ in target}
    overtaken = [r for r, v in written if target.get((r.memory_id, r.index_name), v) != v]
    values = [{"index_name": r.index_name, "row_key": r.row_key, "memory_id": r.memory_id,
               "since": now} for r in (*stale, *overtaken) if r.memory_id in alive]  # fmt: skip
    if values:
        # recorded again (a late write of that version): a purge that read it before
        # must not forget it (Ledger.forget_stale compares ``since``)
        stmt = insert(stale_rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=[stale_rows.c.index_name, stale_rows.c.row_key],
            set_={"since": stmt.excluded.since},
        )
        conn.execute(stmt, values)


def _mark_error(
    conn: Connection,
    memory_id: str,
    index_name: str,
    version: int,
    *,
    error: str,
    permanent: bool,
    now: float,
) -> bool:
    """Record a failed attempt: stays ``pending`` if transient, becomes ``failed`` if not."""
    state = ProjectionState.FAILED if permanent else None
    values: dict[str, Any] = {
        "attempts": projections.c.attempts + 1,
        "last_error": error[:2000],
        "changed_at": now,
    }
    if state is not None:
        values["state"] = state.value
    row = conn.execute(
        update(projections)
        .where(
            projections.c.memory_id == memory_id,
            projections.c.index_name == index_name,
            projections.c.target_version == version,
            projections.c.state != ProjectionState.INDEXED.value,
        )
        .values(**values)
        .returning(projections.c.memory_id)
    ).first()
    return row is not None


def _due_for_reconcile(
    conn: Connection, *, now: float, grace_s: float, max_attempts: int, limit: int
) -> list[str]:
    """Card ids whose projection is pending for longer than ``grace_s`` seconds, or
    failed with fewer than ``max_attempts`` attempts; oldest first."""
    cutoff = now - grace_s
    rows = conn.execute(
        select(projections.c.memory_id, func.min(projections.c.changed_at).label("oldest"))
        .where(
            projections.c.changed_at <= cutoff,
            or_(
                projections.c.state == ProjectionState.PENDING.value,
                and_(
                    projections.c.state == ProjectionState.FAILED.value,
                    projections.c.attempts < max_attempts,
                ),
            ),
        )
        .group_by(projections.c.memory_id)
        .order_by("oldest")
        .limit(limit)
    )
    return [r.memory_id for r in rows]


def _requeue_failed(conn: Connection, *, now: float, memory_ids: Sequence[str] = ()) -> int:
    """Dead letters back to ``pending`` with attempts reset (all, or the given cards)."""
    stmt = update(projections).where(projections.c.state == ProjectionState.FAILED.value)
    if memory_ids:
        stmt = stmt.where(
            projections.c.memory_id.in_([validate_id(m, kind="memory_id") for m in memory_ids])
        )
    result = conn.execute(
        stmt.values(state=ProjectionState.PENDING.value, attempts=0, changed_at=now)
    )
    return int(result.rowcount or 0)


def _mark_all_pending(conn: Connection, *, now: float, index_name: str | None = None) -> int:
    """Rebuild: every projection (of one index, or both) back to ``pending``."""
    stmt = update(projections)
    if index_name is not None:
        stmt = stmt.where(projections.c.index_name == index_name)
    result = conn.execute(
        stmt.values(state=ProjectionState.PENDING.value, attempts=0, changed_at=now)
    )
    return int(result.rowcount or 0)


def _state_counts(conn: Connection) -> dict[str, dict[str, int]]:
    """``{index_name: {state: count}}`` for dashboards and tests."""
    rows = conn.execute(
        select(projections.c.index_name, projections.c.state, func.count()).group_by(
            projections.c.index_name, projections.c.state
        )
    )
    out: dict[str, dict[str, int]] = {name: {} for name in INDEX_NAMES}
    for name, state, count in rows:
        out[name][state] = int(count)
    return out


def _changed_since(conn: Connection, since: float) -> dict[str, int]:
    """Card id -> newest target version of the projections changed at or after ``since``
    (a write, a status change or a settle: every change of a card bumps one)."""
    rows = conn.execute(
        select(projections.c.memory_id, func.max(projections.c.target_version).label("v"))
        .where(projections.c.changed_at >= since)
        .group_by(projections.c.memory_id)
    )
    return {r.memory_id: int(r.v) for r in rows}


def _owners_present(conn: Connection, owners: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of ``owners`` (tenant, user) still hold at least one card."""
    found: set[tuple[str, str]] = set()
    pairs = sorted(set(owners))
    for start in range(0, len(pairs), 500):
        page = pairs[start : start + 500]
        rows = conn.execute(
            select(cards.c.tenant_id, cards.c.user_id)
            .where(tuple_(cards.c.tenant_id, cards.c.user_id).in_(page))
            .distinct()
        )
        found.update((r.tenant_id, r.user_id) for r in rows)
    return found


def _all_card_ids(conn: Connection, *, after: str = "", limit: int = 1000) -> list[str]:
    """Card ids in id order, for paging through a rebuild."""
    rows = conn.execute(
        select(cards.c.memory_id)
        .where(cards.c.memory_id > after)
        .order_by(cards.c.memory_id)
        .limit(limit)
    )
    return [r.memory_id for r in rows]


class Ledger:
    """The card ledger on ``engine``: each call in its own short transaction, or in the
    caller's when given ``conn`` (a lifecycle move writes its card and its audit row in
    one transaction; the caller then translates the database errors)."""

    def __init__(self, engine: Engine, *, max_content_chars: int = 16_000) -> None:
        self.engine = engine
        self.max_content_chars = max_content_chars
        # one-statement reads on the recall path: no BEGIN / ROLLBACK round trips around
        # them (a single SELECT is its own consistent snapshot; issue 17)
        self._reader = engine.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _begin(self, what: str, conn: Connection | None = None) -> Iterator[Connection]:
        """``conn`` as given, or a new transaction whose errors are translated as ``what``."""
        if conn is not None:
            yield conn
            return
        with pg_errors(what), self.engine.begin() as own:
            yield own

    @contextmanager
    def _read(self, what: str, conn: Connection | None = None) -> Iterator[Connection]:
        """``conn`` as given, or a new connection whose errors are translated as ``what``."""
        if conn is not None:
            yield conn
            return
        with pg_errors(what), self.engine.connect() as own:
            yield own

    def write(
        self, draft: CardDraft, *, now: float | None = None, conn: Connection | None = None
    ) -> WriteResult:
        """Insert or update a card and mark both projections pending (see
        :func:`_write_card`: identical indexed content is ``unchanged``)."""
        with self._begin("write card", conn) as c:
            return _write_card(
                c, draft, now=now or time.time(), max_content_chars=self.max_content_chars
            )

    def write_many(
        self, drafts: Sequence[CardDraft], *, now: float | None = None
    ) -> list[WriteResult]:
        """Several cards in one transaction (a promotion batch): one commit, not one each."""
        with self._begin("write cards") as c:
            return [
                _write_card(c, d, now=now or time.time(), max_content_chars=self.max_content_chars)
                for d in drafts
            ]

    def set_status(
        self, memory_id: str, status: CardStatus, *, now: float, conn: Connection | None = None
    ) -> int:
        """Change a card's status (``deleted`` propagates a delete to both indexes)."""
        with self._begin("set card status", conn) as c:
            return _set_status(c, memory_id, status, now=now)

    def delete(self, memory_id: str, *, now: float | None = None) -> int:
        with self._begin("delete card") as c:
            return _set_status(c, memory_id, CardStatus.DELETED, now=now or time.time())

    def cards(
        self, memory_ids: Sequence[str], *, conn: Connection | None = None
    ) -> dict[str, LtmCard]:
        """Cards by id (missing ids are simply absent); one statement, outside any
        transaction unless ``conn`` is the caller's."""
        if conn is not None:
            return _load_cards(conn, memory_ids)
        with pg_errors("load cards"), self._reader.connect() as own:
            return _load_cards(own, memory_ids)

    def replaced_versions(
        self, tenant_id: str, user_id: str, memory_ids: Sequence[str]
    ) -> dict[str, list[LtmCard]]:
        """The replaced versions of the owner's cards ``memory_ids`` (the old texts a newer
        statement superseded, ``core.ltm.asof``), by card id; cards never replaced are absent.
        One statement, scoped to the owner."""
        ids = [validate_id(m, kind="memory_id") for m in memory_ids]
        if not ids:
            return {}
        validate_id(tenant_id, kind="tenant_id")
        validate_id(user_id, kind="user_id")
        by_prefix = {history_prefix(m): m for m in ids}
        stmt = select(cards).where(
            cards.c.tenant_id == tenant_id,
            cards.c.user_id == user_id,
            cards.c.source_type == HISTORY_SOURCE,
            or_(*[cards.c.canonical_key.startswith(p, autoescape=True) for p in by_prefix]),
        )
        out: dict[str, list[LtmCard]] = {}
        with pg_errors("load replaced versions"), self._reader.connect() as conn:
            for row in conn.execute(stmt).mappings():
                card = _card_of(row)
                prefix = card.canonical_key[: card.canonical_key.rindex(":v") + 2]
                if prefix in by_prefix:
                    out.setdefault(by_prefix[prefix], []).append(card)
        return out

    def owned(
        self,
        tenant_id: str,
        user_id: str,
        *,
        memory_type: str | None = None,
        active_only: bool = True,
        limit: int = 50,
    ) -> list[LtmCard]:
        """The owner's cards, most recently changed first (``memory inspect --ltm``):
        active ones unless ``active_only`` is off (then also superseded, never deleted)."""
        validate_id(tenant_id, kind="tenant_id")
        validate_id(user_id, kind="user_id")
        if memory_type is not None and not _LABEL.fullmatch(memory_type):
            raise InvalidInput(f"memory_type {memory_type[:64]!r}: lower snake case, e.g. entity")
        if not 1 <= limit <= MAX_LISTED:
            raise InvalidInput(f"limit: between 1 and {MAX_LISTED}, got {limit}")
        stmt = select(cards).where(cards.c.tenant_id == tenant_id, cards.c.user_id == user_id)
        if memory_type is not None:
            stmt = stmt.where(cards.c.memory_type == memory_type)
        wanted = [CardStatus.ACTIVE] if active_only else [CardStatus.ACTIVE, CardStatus.SUPERSEDED]
        stmt = stmt.where(cards.c.status.in_([w.value for w in wanted]))
        stmt = stmt.order_by(cards.c.updated_at.desc(), cards.c.memory_id).limit(limit)
        with pg_errors("list cards"), self._reader.connect() as conn:
            return [_card_of(row) for row in conn.execute(stmt).mappings()]

    def curated(self, tenant_id: str, user_id: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` an active curated card of the owner holds (raw-history
        records and kept versions are not curated); one statement.

        Recall asks it of its raw-history hits: a message no card holds cannot be voted
        for by the long-term layer (``core.recall.pool.corroborate``)."""
        wanted = list(dict.fromkeys(m for m in message_ids if m))
        if not wanted:
            return set()
        validate_id(tenant_id, kind="tenant_id")
        validate_id(user_id, kind="user_id")
        asked = set(wanted)
        params = {"ids": wanted, "tenant_id": tenant_id, "user_id": user_id}
        with pg_errors("read curated messages"), self._reader.connect() as conn:
            return {str(m) for (ids,) in conn.execute(CURATED, params) for m in ids if m in asked}

    def stating(
        self,
        tenant_id: str,
        user_id: str,
        texts: Sequence[str],
        *,
        memory_type: str,
        conn: Connection | None = None,
    ) -> list[LtmCard]:
        """The owner's active cards of ``memory_type`` whose summary holds any of ``texts``
        (literally: ``%`` and ``_`` mean themselves); one statement."""
        wanted = [t for t in texts if t]
        if not wanted:
            return []
        validate_id(tenant_id, kind="tenant_id")
        validate_id(user_id, kind="user_id")
        stmt = select(cards).where(
            cards.c.tenant_id == tenant_id,
            cards.c.user_id == user_id,
            cards.c.memory_type == memory_type,
            cards.c.status == CardStatus.ACTIVE.value,
            or_(*[cards.c.summary.contains(t, autoescape=True) for t in wanted]),
        )
        with self._read("load cards stating a text", conn) as c:
            return [_card_of(row) for row in c.execute(stmt).mappings()]

    def work(self, memory_ids: Sequence[str]) -> tuple[dict[str, LtmCard], list[Projection]]:
        """Cards and their projections, read in one snapshot."""
        with self._begin("load work") as c:
            return _load_cards(c, memory_ids), _load_projections(c, memory_ids)

    def projections(self, memory_ids: Sequence[str]) -> list[Projection]:
        with self._read("load projections") as c:
            return _load_projections(c, memory_ids)

    def indexed(self, marks: Sequence[tuple[str, str, int]], *, now: float) -> None:
        with self._begin("mark indexed") as c:
            for memory_id, index_name, version in marks:
                _mark_indexed(c, memory_id, index_name, version, now=now)

    def errored(
        self, marks: Sequence[tuple[str, str, int]], *, error: str, permanent: bool, now: float
    ) -> None:
        with self._begin("mark error") as c:
            for memory_id, index_name, version in marks:
                _mark_error(
                    c, memory_id, index_name, version, error=error, permanent=permanent, now=now
                )

    def settle(
        self,
        *,
        indexed: Sequence[tuple[str, str, int]],
        transient: Sequence[tuple[tuple[str, str, int], str]],
        permanent: Sequence[tuple[tuple[str, str, int], str]],
        now: float,
        stale: Sequence[StaleRow] = (),
        written: Sequence[tuple[StaleRow, int]] = (),
    ) -> None:
        """Record one projection run's outcomes in a single transaction, with the rows
        its writes left behind (``stale``, for :meth:`stale_rows`) and, of the versioned
        rows it wrote (``written``, with their versions), those a newer version of the
        card overtook before this commit: a slower concurrent projection's row, which
        no later write would name, since its version was never recorded as indexed."""
        if not (indexed or transient or permanent or stale or written):
            return
        with self._begin("settle projections") as c:
            # a lost mark only means one idempotent re-projection (which records the same
            # stale rows again), so this commit need not wait for the WAL flush (saves a
            # disk sync per projection run)
            c.execute(text("SET LOCAL synchronous_commit = off"))
            _mark_indexed_many(c, indexed, now=now)
            _record_stale(c, stale, written, now=now)
            for failures, is_permanent in ((transient, False), (permanent, True)):
                for (memory_id, index_name, version), error in failures:
                    _mark_error(
                        c,
                        memory_id,
                        index_name,
                        version,
                        error=error,
                        permanent=is_permanent,
                        now=now,
                    )

    def stale_rows(self, limit: int) -> list[StaleRow]:
        """Up to ``limit`` rows the indexes hold for versions no longer served, oldest
        first (the reconciler deletes them, :meth:`Projector.purge_stale`)."""
        with self._read("select stale rows") as c:
            rows = c.execute(
                select(stale_rows.c.index_name, stale_rows.c.row_key, stale_rows.c.memory_id,
                       stale_rows.c.since)
                .order_by(stale_rows.c.since)
                .limit(max(0, limit))
            ).all()  # fmt: skip
        return [StaleRow(str(i), str(k), str(m), float(t)) for i, k, m, t in rows]

    def forget_stale(self, rows: Sequence[StaleRow]) -> None:
        """The indexes no longer hold these rows (deleted, or absent all along), unless a
        row was recorded again after it was read (``since`` moved: a late write of that
        version landed after the delete, and the next purge must delete it)."""
        if not rows:
            return
        with self._begin("forget stale rows") as c:
            c.execute(
                delete(stale_rows).where(
                    stale_rows.c.index_name == bindparam("i"),
                    stale_rows.c.row_key == bindparam("k"),
                    stale_rows.c.since <= bindparam("t"),
                ),
                [{"i": r.index_name, "k": r.row_key, "t": r.since} for r in rows],
            )

    def count_stale(self) -> int:
        """How many rows wait to be purged (``memstrata ltm status``, the benchmark)."""
        with self._read("count stale rows") as c:
            return int(c.execute(select(func.count()).select_from(stale_rows)).scalar_one())

    def due(self, *, now: float, grace_s: float, max_attempts: int, limit: int) -> list[str]:
        """Card ids whose projections the reconciler should re-drive, oldest first."""
        with self._read("select due") as c:
            return _due_for_reconcile(
                c, now=now, grace_s=grace_s, max_attempts=max_attempts, limit=limit
            )

    def reproject(
        self, memory_ids: Sequence[str], *, now: float, conn: Connection | None = None
    ) -> int:
        """Index these cards again as they are (what they are indexed with changed, not
        the cards: a view's statements): both projections ``pending``, ``updated_at`` =
        ``now``, no new version.  Returns the projections marked."""
        ids = [validate_id(m, kind="memory_id") for m in memory_ids]
        if not ids:
            return 0
        with self._begin("reproject cards", conn) as c:
            c.execute(update(cards).where(cards.c.memory_id.in_(ids)).values(updated_at=now))
            result = c.execute(
                update(projections)
                .where(projections.c.memory_id.in_(ids))
                .values(state=ProjectionState.PENDING.value, attempts=0, changed_at=now)
            )
            return int(result.rowcount or 0)

    def requeue(self, *, now: float, memory_ids: Sequence[str] = ()) -> int:
        """Dead letters back to ``pending`` with attempts reset (all, or the given cards)."""
        with self._begin("requeue") as c:
            return _requeue_failed(c, now=now, memory_ids=memory_ids)

    def reset_all(self, *, now: float) -> int:
        with self._begin("reset projections") as c:
            return _mark_all_pending(c, now=now)

    def ids(self, *, after: str = "", limit: int = 1000) -> list[str]:
        with self._read("page card ids") as c:
            return _all_card_ids(c, after=after, limit=limit)

    def changed_since(self, since: float) -> dict[str, int]:
        """Cards whose projections changed at or after ``since`` (epoch s), newest version."""
        with self._read("select changed") as c:
            return _changed_since(c, since)

    def owners_present(self, owners: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The (tenant, user) pairs of ``owners`` that still own a card (an erase removes
        an owner's rows)."""
        with self._read("select owners") as c:
            return _owners_present(c, owners)

    def counts(self) -> dict[str, dict[str, int]]:
        with self._read("count states") as c:
            return _state_counts(c)
