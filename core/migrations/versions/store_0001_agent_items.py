"""Agent store: agent_store_items, JSON documents by (namespace, key) (core.agent_store).

Revision ID: store_0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "store_0001"
down_revision = None
branch_labels = ("store",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_store_items",
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("namespace", ARRAY(sa.Text()), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", JSONB(), nullable=False),
        sa.Column("created_at", sa.Float(precision=53), nullable=False),
        sa.Column("updated_at", sa.Float(precision=53), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "namespace", "key", name=op.f("pk_agent_store_items")),
    )
    op.create_index(
        op.f("ix_agent_store_items_owner"), "agent_store_items", ["tenant_id", "user_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_agent_store_items_owner"), table_name="agent_store_items")
    op.drop_table("agent_store_items")
