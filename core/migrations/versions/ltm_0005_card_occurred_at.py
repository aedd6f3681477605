"""LTM cards keep when what they say happened: the time their statement was said.

An episode card is written when its session ends, a session summary after it; recall
dates their lines with the time the statement was said (seed 2: dated events), which is
what a question about "when" needs.  Existing cards get NULL and are shown undated.

Revision ID: ltm_0005
Revises: ltm_0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "ltm_0005"
down_revision = "ltm_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ltm_cards", sa.Column("occurred_at", sa.Float(precision=53), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("ltm_cards", "occurred_at")
