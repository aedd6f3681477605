"""LTM card ledger: ltm_cards and the per-index outbox ltm_projections.

Its own branch (``ltm``, no parent), so the authority schema and the LTM ledger can be
migrated together (``upgrade heads``) or apart (``upgrade ltm@head``).

Revision ID: ltm_0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

# op.f(): names are final, whatever naming convention the env's target metadata carries

revision = "ltm_0001"
down_revision = None
branch_labels = ("ltm",)
depends_on = None

_F = sa.Float(precision=53)


def upgrade() -> None:
    op.create_table(
        "ltm_cards",
        sa.Column("memory_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("project_id", sa.String(128), nullable=True),
        sa.Column("canonical_key", sa.String(256), nullable=False),
        sa.Column("memory_type", sa.String(64), nullable=False),
        sa.Column("title", sa.String(256), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("entities", JSONB(), nullable=False),
        sa.Column("tags", JSONB(), nullable=False),
        sa.Column("source_type", sa.String(64), nullable=False),
        sa.Column("bm25_text", sa.Text(), nullable=False),
        sa.Column("created_at", _F, nullable=False),
        sa.Column("updated_at", _F, nullable=False),
        sa.Column("importance", _F, nullable=False),
        sa.Column("confidence", _F, nullable=False),
        sa.Column("access_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("memory_id", name=op.f("pk_ltm_cards")),
        sa.CheckConstraint(
            "status IN ('active', 'superseded', 'deleted')", name=op.f("ck_ltm_cards_status")
        ),
    )
    op.create_index("ix_ltm_cards_owner", "ltm_cards", ["tenant_id", "user_id", "status"])
    op.create_table(
        "ltm_projections",
        sa.Column("memory_id", sa.String(64), nullable=False),
        sa.Column("index_name", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("target_version", sa.Integer(), nullable=False),
        sa.Column("indexed_version", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("changed_at", _F, nullable=False),
        sa.PrimaryKeyConstraint("memory_id", "index_name", name=op.f("pk_ltm_projections")),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["ltm_cards.memory_id"],
            name=op.f("fk_ltm_projections_memory_id_ltm_cards"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "index_name IN ('lexical', 'vector')", name=op.f("ck_ltm_projections_index_name")
        ),
        sa.CheckConstraint(
            "state IN ('pending', 'indexed', 'failed')", name=op.f("ck_ltm_projections_state")
        ),
    )
    op.create_index("ix_ltm_projections_state", "ltm_projections", ["state", "changed_at"])


def downgrade() -> None:
    op.drop_index("ix_ltm_projections_state", table_name="ltm_projections")
    op.drop_table("ltm_projections")
    op.drop_index("ix_ltm_cards_owner", table_name="ltm_cards")
    op.drop_table("ltm_cards")
