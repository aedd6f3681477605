"""Lifecycle audit trail: lifecycle_audit (append-only).

The root of branch ``lifecycle`` (no parent: it migrates, and downgrades, apart from the
authority and LTM branches in the same database and version table).

Revision ID: lifecycle_0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "lifecycle_0001"
down_revision = None
branch_labels = ("lifecycle",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lifecycle_audit",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Float(precision=53), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("memory_ids", JSONB(), nullable=False),
        sa.Column("inputs", JSONB(), nullable=False),
        sa.Column("breakdown", JSONB(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_lifecycle_audit"),
    )
    op.create_index("ix_lifecycle_audit_owner", "lifecycle_audit", ["tenant_id", "user_id", "at"])
    op.create_index("ix_lifecycle_audit_target", "lifecycle_audit", ["target"])


def downgrade() -> None:
    op.drop_index("ix_lifecycle_audit_target", table_name="lifecycle_audit")
    op.drop_index("ix_lifecycle_audit_owner", table_name="lifecycle_audit")
    op.drop_table("lifecycle_audit")
