"""Which cards hold a message: a GIN index on ``ltm_cards.source_message_ids``.

Recall asks, for the raw-history messages it found, which of them an active curated card
holds (``Ledger.curated``): a message no card holds cannot be voted for by the long-term
layer, and the pool's fusion must not count that silence against it.  Without the index
the question reads every card of the owner; with it, only the cards holding one of the
asked messages.

Revision ID: ltm_0007
Revises: ltm_0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "ltm_0007"
down_revision = "ltm_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # fastupdate off: no pending list, which a read after a bulk write scans linearly
    op.create_index(
        "ix_ltm_cards_sources", "ltm_cards", ["source_message_ids"], postgresql_using="gin",
        postgresql_with={"fastupdate": "off"},
    )  # fmt: skip


def downgrade() -> None:
    op.drop_index("ix_ltm_cards_sources", table_name="ltm_cards")
