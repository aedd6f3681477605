"""The generation pointer of the LTM indexes, so ``ltm reindex`` builds and swaps.

One row per logical index (its base collection / index name): the name that serves
searches, and while a reindex runs the one being built (``building``) or the one just
replaced (``retiring``), which every process also writes to.  No row means the base
name serves (every deployment before this revision).

Revision ID: ltm_0004
Revises: ltm_0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "ltm_0004"
down_revision = "ltm_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ltm_index_generations",
        sa.Column("base_name", sa.String(255), nullable=False),
        sa.Column("serving", sa.String(255), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("secondary", sa.String(255), nullable=True),
        sa.Column("phase", sa.String(16), nullable=True),
        sa.Column("changed_at", sa.Float(precision=53), nullable=False),
        sa.PrimaryKeyConstraint("base_name", name="pk_ltm_index_generations"),
        sa.CheckConstraint(
            "phase IS NULL OR phase IN ('building', 'retiring')",
            name="ck_ltm_index_generations_phase",
        ),
    )


def downgrade() -> None:
    op.drop_table("ltm_index_generations")
