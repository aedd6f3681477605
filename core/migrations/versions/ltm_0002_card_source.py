"""LTM cards keep their provenance: the source message ids of what was promoted.

Recall shows where a memory came from (seed 1 七.2 ``source``), the harness charges a card
its source turns, and retraction can find cards by message.  Existing cards get ``[]``.

Revision ID: ltm_0002
Revises: ltm_0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "ltm_0002"
down_revision = "ltm_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ltm_cards",
        sa.Column(
            "source_message_ids", JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
    )


def downgrade() -> None:
    op.drop_column("ltm_cards", "source_message_ids")
