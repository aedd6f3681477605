"""The long-term memory card (seed 1 七.2) and its vector record (七.3).

One card, one ``memory_id``, two index projections.  The id is derived from the card's
canonical key (tenant, user, ``canonical_key``), so promoting the same knowledge again
updates the card instead of adding a duplicate - the most common complaint about peer
memory stores.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memstrata.core.ids import SafeId, external_user_id
from memstrata.core.ltm.text import cut_tokens, normalise

BM25_TEXT_MAX_BYTES = 60_000
"""Milvus VARCHAR fields hold at most 65,535 bytes; the rest is cut at a token boundary."""

LABEL_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
Label = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]
"""memory_type / source_type: lower snake case, so it is safe inside a filter."""


class CardStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    DELETED = "deleted"


def card_id(tenant_id: str, user_id: str, canonical_key: str) -> str:
    """Deterministic id from the canonical key: the same knowledge maps to the same card."""
    raw = "\x1f".join((tenant_id, user_id, canonical_key.strip().casefold()))
    return "ltm_" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


class CardDraft(BaseModel):
    """What a promotion hands over; id, bm25_text and version are derived from it."""

    model_config = ConfigDict(frozen=True)

    tenant_id: SafeId = "default"
    user_id: SafeId
    project_id: SafeId | None = None
    canonical_key: str = Field(min_length=1, max_length=256)
    memory_type: Label = "semantic_fact"
    title: str = Field(min_length=1, max_length=256)
    summary: str = Field(min_length=1, max_length=2000)
    content: str = ""
    entities: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=64
    )
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=32
    )
    source_type: Label = "promoted_from_stm"
    source_message_ids: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = (
        Field(default_factory=list, max_length=512)
    )
    """Provenance: the transcript messages the card was promoted from (seed 1 七.2 source)."""
    fingerprint: str | None = Field(None, min_length=1, max_length=64)
    """The fingerprint of the STM item the card was promoted from (``core.models.identity``)."""
    occurred_at: float | None = Field(None, allow_inf_nan=False)
    """When what the card says was said (an episode: its statement's latest mention):
    recall dates the card's line with it.  None: undated (a card written before this
    field, or one that is not about one moment, such as a merged card)."""
    source_card_ids: list[SafeId] = Field(default_factory=list, max_length=512)
    """A view card's (``ENTITY``) cards: their statements are read from them, not copied."""
    importance: float = Field(0.5, ge=0.0, le=1.0)
    confidence: float = Field(0.8, ge=0.0, le=1.0)
    status: CardStatus = CardStatus.ACTIVE


class LtmCard(BaseModel):
    """One long-term memory card with every field of seed 七.2, plus ledger bookkeeping."""

    model_config = ConfigDict(frozen=True)

    memory_id: SafeId
    user_id: SafeId
    tenant_id: SafeId
    project_id: SafeId | None = None
    memory_type: Label
    title: str
    summary: str
    content: str = ""
    entities: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    source_type: Label
    source_message_ids: list[str] = Field(default_factory=list)
    fingerprint: str | None = None
    occurred_at: float | None = None
    source_card_ids: list[str] = Field(default_factory=list)
    bm25_text: str
    created_at: float
    updated_at: float
    importance: float = Field(ge=0.0, le=1.0)
    confidence: float = Field(ge=0.0, le=1.0)
    access_count: int = Field(0, ge=0)
    status: CardStatus = CardStatus.ACTIVE
    # ledger bookkeeping, not part of the seed's document
    canonical_key: str
    version: int = Field(1, ge=1)

    @classmethod
    def from_draft(cls, draft: CardDraft, *, now: float) -> LtmCard:
        return cls(
            memory_id=card_id(draft.tenant_id, draft.user_id, draft.canonical_key),
            bm25_text=build_bm25_text(draft),
            created_at=now,
            updated_at=now,
            **draft.model_dump(),
        )

    def content_hash(self) -> str:
        """Hash of everything an index holds: equal hashes mean no re-projection is needed."""
        # status is compared on its own (the ledger changes it without rehashing)
        indexed = self.model_dump(
            exclude={
                "access_count", "created_at", "updated_at", "version", "canonical_key", "status",
                "fingerprint", "occurred_at",
            }
        )  # fmt: skip
        raw = json.dumps(indexed, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def embedding_text(self, max_chars: int, context: str = "") -> str:
        """The text that is embedded: title, summary, the head of the content, then the
        index-time ``context`` (``ports.IndexContext``).

        Sentence models read a few hundred tokens at most; the summary carries the
        card's meaning, so long content is cut (documented behaviour, not an error).
        """
        text = "\n".join(t for t in (self.title, self.summary, self.content, context) if t)
        return text.strip()[:max_chars]

    def with_context(self, context: str) -> LtmCard:
        """The card as the lexical index holds it: ``context`` appended to its
        ``bm25_text`` (the ledger's copy stays the card's own text)."""
        if not context:
            return self
        text = " ".join(t for t in (self.bm25_text, normalise(context)) if t)
        return self.model_copy(update={"bm25_text": cut_tokens(text, BM25_TEXT_MAX_BYTES)})

    def vector_record(self, vector: list[float]) -> dict[str, Any]:
        """The Milvus row of seed 七.3 (plus status and updated_at for filters and rerank)."""
        return {
            "id": self.memory_id,
            "vector": vector,
            "user_id": self.user_id,
            "tenant_id": self.tenant_id,
            "project_id": self.project_id or "",
            "memory_type": self.memory_type,
            "status": self.status.value,
            "importance": self.importance,
            "updated_at": self.updated_at,
        }


class CardView(BaseModel):
    """An LTM card as the public surfaces show it (client, REST, CLI ``--json``): no index
    text or hash, and ``user_id`` the caller's external id, not the stored key part."""

    memory_id: str
    tenant_id: str
    user_id: str
    project_id: str | None = None
    memory_type: str
    status: CardStatus
    title: str
    summary: str
    content: str = ""
    entities: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    source_type: str
    source_message_ids: list[str] = Field(default_factory=list)
    source_card_ids: list[str] = Field(default_factory=list)
    occurred_at: float | None = None
    created_at: float
    updated_at: float
    importance: float
    confidence: float
    access_count: int = 0
    version: int = 1

    @classmethod
    def of(cls, card: LtmCard) -> CardView:
        values = card.model_dump(include=set(cls.model_fields))
        return cls.model_validate(values | {"user_id": external_user_id(card.user_id)})


def build_bm25_text(draft: CardDraft | LtmCard) -> str:
    """Normalised lexical text of a card: title, summary, content, entities and tags."""
    raw = " ".join(
        [draft.title, draft.summary, draft.content, " ".join(draft.entities), " ".join(draft.tags)]
    )
    return normalise(raw, max_bytes=BM25_TEXT_MAX_BYTES)


CONSOLIDATED = "consolidated"
"""memory_type and source_type of a merged card (``core.lifecycle.consolidate``)."""
ENTITY = "entity"
"""memory_type and source_type of an entity card (``core.lifecycle.entity_cards``): a view
over the cards that state one name (``source_card_ids``); their statements are read from
them when the card is indexed and recalled (``core.ltm.views``)."""
MEMBER_SEP = "\t"
"""A merged card's content: one line per member statement, ``<id>,<id>\\t<statement>``."""


def member_line(message_ids: list[str] | tuple[str, ...], statement: str) -> str:
    """One member of a merged card (``core.lifecycle.consolidate``) as a content line."""
    return ",".join(message_ids) + MEMBER_SEP + " ".join(statement.split())


def member_lines(content: str) -> list[tuple[tuple[str, ...], str]]:
    """The (message ids, statement) members of a merged card's content."""
    out = []
    for line in content.splitlines():
        ids, sep, text = line.partition(MEMBER_SEP)
        if sep and text:
            out.append((tuple(i for i in ids.split(",") if i), text))
    return out


def focus(content: str, query: str, *, keep: int = 2) -> tuple[str, tuple[str, ...]] | None:
    """The statements of a merged card that a query is about, and their message ids.

    A merged card stands for many statements; recall injects the ``keep`` members that
    share the most terms with the query (the first, most central one when none does),
    so the block carries what was asked for and names the turns it came from.  ``None``
    when the content holds no member lines (not a merged card)."""
    members = member_lines(content)
    if not members:
        return None
    from memstrata.core.ltm.text import tokens

    q = set(tokens(query))
    scored = sorted(range(len(members)), key=lambda n: (-len(q & set(tokens(members[n][1]))), n))
    best = [n for n in scored[:keep] if q & set(tokens(members[n][1]))] or [0]
    chosen = [members[n] for n in sorted(best)]
    ids = tuple(dict.fromkeys(i for mids, _ in chosen for i in mids))
    return " | ".join(t for _, t in chosen), ids
