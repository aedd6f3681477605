"""Ledger tables of long-term memory (SQLAlchemy Core, own metadata; DESIGN §2).

``ltm_cards`` is the source of truth for cards.  ``ltm_projections`` is the outbox: one
row per (card, index) saying whether that index holds the card's current version
(``pending`` / ``indexed`` / ``failed``), with attempts and the last error.  Both are
written in one transaction, so an index can always be rebuilt from PostgreSQL.  Times
are epoch seconds (DOUBLE PRECISION), like the seed's card and the STM items.

The schema itself is created by the Alembic revisions ``core/migrations/versions/ltm_*``
(branch ``ltm``); this module mirrors it for queries and for autogenerate checks.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

ltm_metadata = MetaData()

INDEX_NAMES = ("lexical", "vector")
STATES = ("pending", "indexed", "failed")

cards = Table(
    "ltm_cards",
    ltm_metadata,
    Column("memory_id", String(64), nullable=False),
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("project_id", String(128), nullable=True),
    Column("canonical_key", String(256), nullable=False),
    Column("memory_type", String(64), nullable=False),
    Column("title", String(256), nullable=False),
    Column("summary", Text, nullable=False),
    Column("content", Text, nullable=False),
    Column("entities", JSONB, nullable=False),
    Column("tags", JSONB, nullable=False),
    Column("source_type", String(64), nullable=False),
    Column("source_message_ids", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("fingerprint", String(64), nullable=True),
    Column("occurred_at", Float(precision=53), nullable=True),
    Column("source_card_ids", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("bm25_text", Text, nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
    Column("updated_at", Float(precision=53), nullable=False),
    Column("importance", Float(precision=53), nullable=False),
    Column("confidence", Float(precision=53), nullable=False),
    Column("access_count", Integer, nullable=False, server_default="0"),
    Column("status", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("content_hash", String(64), nullable=False),
    PrimaryKeyConstraint("memory_id", name="pk_ltm_cards"),
    CheckConstraint("status IN ('active', 'superseded', 'deleted')", name="ck_ltm_cards_status"),
    Index("ix_ltm_cards_owner", "tenant_id", "user_id", "status"),
    # which cards hold a message (Ledger.curated, asked on every raw-history recall); no
    # pending list: a read after a bulk write would scan it linearly (12 ms, not 1.3)
    Index("ix_ltm_cards_sources", "source_message_ids", postgresql_using="gin",
          postgresql_with={"fastupdate": "off"}),
)

projections = Table(
    "ltm_projections",
    ltm_metadata,
    Column("memory_id", String(64), nullable=False),
    Column("index_name", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("target_version", Integer, nullable=False),
    Column("indexed_version", Integer, nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text, nullable=True),
    Column("changed_at", Float(precision=53), nullable=False),
    PrimaryKeyConstraint("memory_id", "index_name", name="pk_ltm_projections"),
    ForeignKeyConstraint(
        ["memory_id"],
        ["ltm_cards.memory_id"],
        name="fk_ltm_projections_memory_id_ltm_cards",
        ondelete="CASCADE",
    ),
    CheckConstraint("index_name IN ('lexical', 'vector')", name="ck_ltm_projections_index_name"),
    CheckConstraint("state IN ('pending', 'indexed', 'failed')", name="ck_ltm_projections_state"),
    Index("ix_ltm_projections_state", "state", "changed_at"),
)

# rows an index still holds for versions of a card it no longer serves (an update inserts
# the new version's row, core/ltm/rows.py): the reconciler deletes them in batches; they
# go with their card (an erase deletes the owner's rows from the indexes by filter)
stale_rows = Table(
    "ltm_stale_rows",
    ltm_metadata,
    Column("index_name", String(16), nullable=False),
    Column("row_key", String(96), nullable=False),
    Column("memory_id", String(64), nullable=False),
    Column("since", Float(precision=53), nullable=False),
    PrimaryKeyConstraint("index_name", "row_key", name="pk_ltm_stale_rows"),
    ForeignKeyConstraint(
        ["memory_id"],
        ["ltm_cards.memory_id"],
        name="fk_ltm_stale_rows_memory_id_ltm_cards",
        ondelete="CASCADE",
    ),
    CheckConstraint("index_name IN ('lexical', 'vector')", name="ck_ltm_stale_rows_index_name"),
    Index("ix_ltm_stale_rows_since", "since"),
    Index("ix_ltm_stale_rows_memory_id", "memory_id"),
)

# which collection (Milvus) or index (Elasticsearch) serves each logical index, keyed by
# its base name (the settings' name, unique per deployment): ``ltm reindex`` builds a
# new generation beside the serving one and swaps this pointer (core/ltm/generations.py)
index_generations = Table(
    "ltm_index_generations",
    ltm_metadata,
    Column("base_name", String(255), nullable=False),
    Column("serving", String(255), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("secondary", String(255), nullable=True),
    Column("phase", String(16), nullable=True),
    Column("changed_at", Float(precision=53), nullable=False),
    PrimaryKeyConstraint("base_name", name="pk_ltm_index_generations"),
    CheckConstraint(
        "phase IS NULL OR phase IN ('building', 'retiring')", name="ck_ltm_index_generations_phase"
    ),
)
