"""Scoped erase: owner_erasures, the durable "erase in progress" marker (core.erase).

Revision ID: lifecycle_0002
Revises: lifecycle_0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "lifecycle_0002"
down_revision = "lifecycle_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "owner_erasures",
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("started_at", sa.Float(precision=53), nullable=False),
        sa.Column("finished_at", sa.Float(precision=53), nullable=True),
        sa.Column("runs", sa.Integer(), server_default="1", nullable=False),
        sa.Column("steps", JSONB(), server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", name=op.f("pk_owner_erasures")),
    )


def downgrade() -> None:
    op.drop_table("owner_erasures")
