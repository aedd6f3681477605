"""LTM cards keep the fingerprint of the STM item they were promoted from.

One memory, one identity (``core.models.identity``): recall's pool dedups an STM item
and its own card by fingerprint as well as by canonical key.  Existing cards get NULL,
and recall falls back to the text fingerprint for them.

Revision ID: ltm_0003
Revises: ltm_0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "ltm_0003"
down_revision = "ltm_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ltm_cards", sa.Column("fingerprint", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("ltm_cards", "fingerprint")
