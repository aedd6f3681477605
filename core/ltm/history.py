"""The raw-history index: L0 messages searchable as the lowest-priority recall source.

Seed 1 十五.4 ranks sources "Redis STM > LTM > raw history fallback" and 第0层 names L0
the low-frequency fallback.  The curated layers carry the answers; this index is the
floor under them: when they hold nothing for a question, the words that were said still
come back, one message each, with the message id as provenance.

* A projection of L0, never a store of its own: each user / assistant message becomes one
  record in two collections of their own (``<prefix>_raw_lexical``, ``<prefix>_raw_vectors``;
  both store the text, so a hit of either list comes back with it),
  keyed by a hash of (tenant, user, message id), so projecting again is an upsert and the
  whole index can be dropped and rebuilt from L0 (``memstrata ltm reindex-history``).
* A window is one message (its text clipped to ``max_chars``): recall charges a memory
  for every source turn it stands for, so one turn per record costs the least.
* Searched like raw turns are by the baselines: BM25 and vectors fused by reciprocal rank
  with equal weights, no importance, no recency: the curated layers rank by those.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memstrata.core.errors import NotFound
from memstrata.core.ids import owner_tenant
from memstrata.core.ltm.card import CardStatus, LtmCard
from memstrata.core.ltm.embedding import CachedEmbedder
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.ledger import RAW_HISTORY_SOURCE
from memstrata.core.ltm.policy import Fusion, SearchMode, SearchPolicy
from memstrata.core.ltm.ports import LexicalIndex, VectorIndex
from memstrata.core.ltm.search import LtmSearch
from memstrata.core.ltm.text import normalise
from memstrata.core.models.transcript import Role, TranscriptRecord, TurnPointer
from memstrata.core.transcript.store import TranscriptStore

HISTORY_TYPE = "raw_turn"
INDEXED_ROLES = frozenset({Role.USER, Role.ASSISTANT})

# the baselines' fusion: both lists count alike, flat RRF, nothing but similarity
HISTORY_POLICY = SearchPolicy(
    candidates=50, top_k=20, fusion=Fusion.RRF, rrf_k=60, lexical_weight=1.0,
    vector_weight=1.0, exact_lexical_weight=1.0, short_lexical_weight=1.0, short_rrf_k=60,
    similarity_weight=1.0, importance_weight=0.0, recency_weight=0.0,
)  # fmt: skip


def history_id(tenant_id: str | None, user_id: str, message_id: str) -> str:
    """The record id of one message: stable, so a re-projection overwrites it."""
    raw = "\x1f".join((owner_tenant(tenant_id), user_id, message_id))
    return "raw_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def message_text(rec: TranscriptRecord, max_chars: int) -> str:
    """What is indexed of a message: ``<speaker>: <content>``, clipped to ``max_chars``."""
    text = " ".join(rec.content.split())
    if rec.name and not text.startswith(f"{rec.name}:"):
        text = f"{rec.name}: {text}"
    return text[:max_chars]


def history_record(rec: TranscriptRecord, *, max_chars: int) -> LtmCard | None:
    """One message as an index record, or None for what is not indexed (tools, system)."""
    if rec.role not in INDEXED_ROLES:
        return None
    text = message_text(rec, max_chars)
    if not text.strip():
        return None
    return LtmCard(
        memory_id=history_id(rec.tenant_id, rec.user_id, rec.message_id),
        user_id=rec.user_id,
        tenant_id=owner_tenant(rec.tenant_id),
        memory_type=HISTORY_TYPE,
        title=rec.message_id,  # provenance: stored and returned, never embedded
        summary=text,
        source_type=RAW_HISTORY_SOURCE,
        source_message_ids=[rec.message_id],
        bm25_text=normalise(text),
        created_at=rec.at,
        updated_at=rec.at,
        importance=0.0,
        confidence=1.0,
        status=CardStatus.ACTIVE,
        canonical_key=f"raw:{rec.message_id}"[:256],
    )


@dataclass(frozen=True)
class HistoryHit:
    """One raw message that matched, with its fused similarity in [0, 1]."""

    record_id: str
    message_id: str
    text: str
    at: float
    similarity: float


class HistoryIndex:
    """Both raw-history collections, the embedder and their search."""

    def __init__(
        self,
        *,
        lexical: LexicalIndex,
        vector: VectorIndex,
        embedder: CachedEmbedder,
        max_chars: int = 2000,
    ) -> None:
        self.lexical = lexical
        self.vector = vector
        self.embedder = embedder
        self.max_chars = max_chars
        self._search = LtmSearch(
            lexical=lexical, vector=vector, embedder=embedder, policy=HISTORY_POLICY
        )

    def ensure_schema(self) -> None:
        self.vector.ensure_schema()
        self.lexical.ensure_schema()

    def project(self, records: Iterable[TranscriptRecord]) -> int:
        """Index the user and assistant messages among ``records``; returns how many."""
        rows: dict[str, LtmCard] = {}
        for rec in records:
            row = history_record(rec, max_chars=self.max_chars)
            if row is not None:
                rows[row.memory_id] = row  # a turn read twice is indexed once
        if not rows:
            return 0
        cards = list(rows.values())
        vectors = self.embedder.embed_documents([c.summary for c in cards])
        self.vector.upsert(cards, vectors)
        self.lexical.upsert(cards)
        return len(cards)

    def search(
        self, query: str, *, tenant_id: str | None, user_id: str, k: int, now: float,
        as_of: float | None = None,
    ) -> list[HistoryHit]:  # fmt: skip
        """The owner's ``k`` best-matching messages (the filter is the owner, never the
        query); with ``as_of``, among the messages said by then."""
        flt = CardFilter(tenant_id=owner_tenant(tenant_id), user_id=user_id, updated_before=as_of)
        policy = HISTORY_POLICY.model_copy(
            update={"top_k": k, "candidates": max(HISTORY_POLICY.candidates, k)}
        )
        ranked = self._search.search(query, flt, mode=SearchMode.HYBRID, policy=policy, now=now)
        # the vector collection returns each message's text with its hit; one made by an
        # earlier version stores none: those hits are read from the lexical side
        missing = [r.memory_id for r in ranked if not r.title]
        stored = {h.memory_id: h for h in self.lexical.get(missing)} if missing else {}
        out = []
        for r in ranked:
            title, text = r.title, r.summary
            if not title and r.memory_id in stored:
                title, text = stored[r.memory_id].title, stored[r.memory_id].summary
            if title:  # else projected to one index only: skip until a reindex
                out.append(HistoryHit(r.memory_id, title, text, r.updated_at,
                                      max(0.0, min(1.0, r.similarity))))  # fmt: skip
        return out

    def delete_owner(self, record_ids: Sequence[str]) -> None:
        self.vector.delete(record_ids)
        self.lexical.delete(record_ids)

    def drop(self) -> None:
        self.vector.drop()
        self.lexical.drop()

    def close(self) -> None:
        self._search.close()


def project_turns(
    index: HistoryIndex, transcript: TranscriptStore, pointers: Iterable[TurnPointer]
) -> int:
    """Read the turns back from L0 and index their messages (the ``ltm`` task's work).

    A turn whose file is gone (erased since it was queued) has nothing left to index."""
    records: list[TranscriptRecord] = []
    for pointer in pointers:
        try:
            records.extend(transcript.read_turn(pointer))
        except NotFound:
            continue
    return index.project(records)


def project_transcripts(
    index: HistoryIndex, transcript: TranscriptStore, *, batch: int = 256
) -> int:
    """Rebuild the index from every L0 file (``memstrata ltm reindex-history``)."""
    done = 0
    pending: list[TranscriptRecord] = []
    for rec in transcript.iter_all():
        pending.append(rec)
        if len(pending) >= batch:
            done += index.project(pending)
            pending = []
    return done + index.project(pending)
