"""Rows an index holds for versions of a card it no longer serves: ``ltm_stale_rows``.

An index with versioned rows (core/ltm/rows.py) takes a card's update as an insert of the
new version's row: milvus-lite looks an id up before an upsert or a delete, ~100 ms a
call at 100k cards, and an insert does not.  The rows the update replaced are recorded
here, in the transaction that marks the projection, and the reconciler deletes them many
per call.

Revision ID: ltm_0008
Revises: ltm_0007
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "ltm_0008"
down_revision = "ltm_0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ltm_stale_rows",
        sa.Column("index_name", sa.String(16), nullable=False),
        sa.Column("row_key", sa.String(96), nullable=False),
        sa.Column("memory_id", sa.String(64), nullable=False),
        sa.Column("since", sa.Float(precision=53), nullable=False),
        sa.PrimaryKeyConstraint("index_name", "row_key", name="pk_ltm_stale_rows"),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["ltm_cards.memory_id"],
            name="fk_ltm_stale_rows_memory_id_ltm_cards",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "index_name IN ('lexical', 'vector')", name="ck_ltm_stale_rows_index_name"
        ),
    )
    op.create_index("ix_ltm_stale_rows_since", "ltm_stale_rows", ["since"])
    op.create_index("ix_ltm_stale_rows_memory_id", "ltm_stale_rows", ["memory_id"])


def downgrade() -> None:
    op.drop_index("ix_ltm_stale_rows_memory_id", table_name="ltm_stale_rows")
    op.drop_index("ix_ltm_stale_rows_since", table_name="ltm_stale_rows")
    op.drop_table("ltm_stale_rows")
