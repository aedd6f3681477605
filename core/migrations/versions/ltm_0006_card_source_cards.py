"""A view card names the cards it is a view of: ``ltm_cards.source_card_ids``.

An entity card (``core.lifecycle.entity_cards``) gathers what is known about one name
from the owner's other cards; it keeps their ids instead of copies of their statements
(a copy held 44% more curated tokens on LoCoMo for no recall), and the indexes and
recall read the statements from those cards.  Every other card has none.

Revision ID: ltm_0006
Revises: ltm_0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "ltm_0006"
down_revision = "ltm_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ltm_cards",
        sa.Column("source_card_ids", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    )


def downgrade() -> None:
    op.drop_column("ltm_cards", "source_card_ids")
