"""Authority schema: tenants, users, profiles, preferences, projects, workspaces, roles,
agent settings and the stable fact ledger.

The root of branch ``authority``.

Revision ID: 0001_authority
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001_authority"
down_revision = None
branch_labels = ("authority",)
depends_on = None

_TS = sa.DateTime(timezone=True)


def _id(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.String(128), nullable=False)


def _stamp(name: str) -> sa.Column[object]:
    return sa.Column(name, _TS, server_default=sa.func.now(), nullable=False)


def _user_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "user_id"],
        ["users.tenant_id", "users.id"],
        name=f"fk_{table}_tenant_id_user_id_users",
        ondelete="CASCADE",
    )


def _project_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id", "project_id"],
        ["projects.tenant_id", "projects.id"],
        name=f"fk_{table}_tenant_id_project_id_projects",
        ondelete="CASCADE",
    )


def _tenant_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id"], ["tenants.id"], name=f"fk_{table}_tenant_id_tenants", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.execute(sa.schema.CreateSequence(sa.Sequence("authority_version_seq")))
    op.create_table(
        "tenants",
        _id("id"),
        sa.Column("name", sa.String(256), nullable=False),
        _stamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
    )
    op.create_table(
        "users",
        _id("tenant_id"),
        _id("id"),
        sa.Column("display_name", sa.String(256), nullable=True),
        sa.Column(
            "authority_version",
            sa.BigInteger(),
            nullable=False,
            server_default=sa.text("nextval('authority_version_seq')"),
        ),
        _stamp("created_at"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_users"),
        _tenant_fk("users"),
    )
    op.create_table(
        "user_profiles",
        _id("tenant_id"),
        _id("user_id"),
        sa.Column("language", sa.String(128), nullable=True),
        sa.Column("answer_style", sa.String(128), nullable=True),
        sa.Column("timezone", sa.String(128), nullable=True),
        sa.Column("display_name", sa.String(128), nullable=True),
        _stamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", name="pk_user_profiles"),
        _user_fk("user_profiles"),
    )
    op.create_table(
        "user_preferences",
        _id("tenant_id"),
        _id("user_id"),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("value", JSONB(), nullable=False),
        _stamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", "name", name="pk_user_preferences"),
        _user_fk("user_preferences"),
    )
    op.create_table(
        "projects",
        _id("tenant_id"),
        _id("id"),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("default_env", sa.String(128), nullable=True),
        sa.Column("env_tags", JSONB(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("attributes", JSONB(), server_default=sa.text("'{}'"), nullable=False),
        _stamp("created_at"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_projects"),
        _tenant_fk("projects"),
    )
    op.create_table(
        "workspaces",
        _id("tenant_id"),
        _id("id"),
        _id("project_id"),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("language", sa.String(128), nullable=True),
        sa.Column("env_tags", JSONB(), server_default=sa.text("'[]'"), nullable=False),
        _stamp("created_at"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_workspaces"),
        _project_fk("workspaces"),
    )
    op.create_index("ix_workspaces_tenant_id_project_id", "workspaces", ["tenant_id", "project_id"])
    op.create_table(
        "user_project_roles",
        _id("tenant_id"),
        _id("user_id"),
        _id("project_id"),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("permission_scope", sa.String(32), nullable=False),
        _stamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", "project_id", name="pk_user_project_roles"),
        _user_fk("user_project_roles"),
        _project_fk("user_project_roles"),
        sa.CheckConstraint(
            "permission_scope IN ('read_only', 'read_write', 'admin')",
            name=op.f("ck_user_project_roles_scope"),
        ),
    )
    op.create_table(
        "agent_settings",
        _id("tenant_id"),
        _id("agent_id"),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("value", JSONB(), nullable=False),
        _stamp("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "agent_id", "name", name="pk_agent_settings"),
        _tenant_fk("agent_settings"),
    )
    op.create_table(
        "stable_memory_facts",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        _id("tenant_id"),
        _id("user_id"),
        sa.Column("canonical_fact_key", sa.String(256), nullable=False),
        sa.Column("domain", sa.String(32), nullable=False),
        sa.Column("value", JSONB(), nullable=False),
        sa.Column("value_hash", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("source_memory_ids", JSONB(), nullable=False),
        sa.Column("source_message_ids", JSONB(), nullable=False),
        sa.Column("promotion", JSONB(), nullable=True),
        _stamp("valid_from"),
        sa.Column("superseded_at", _TS, nullable=True),
        sa.Column("superseded_by", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_stable_memory_facts"),
        _user_fk("stable_memory_facts"),
        sa.ForeignKeyConstraint(
            ["superseded_by"],
            ["stable_memory_facts.id"],
            name="fk_stable_memory_facts_superseded_by_stable_memory_facts",
            ondelete="SET NULL",
            deferrable=True,
            initially="DEFERRED",
        ),
        sa.CheckConstraint(
            "domain IN ('profile', 'permission', 'config', 'project_metadata', 'preference', "
            "'constraint')",
            name=op.f("ck_stable_memory_facts_domain"),
        ),
        sa.CheckConstraint(
            "origin IN ('admin', 'explicit', 'promotion')",
            name=op.f("ck_stable_memory_facts_origin"),
        ),
        sa.CheckConstraint(
            "superseded_at IS NULL OR superseded_at >= valid_from",
            name=op.f("ck_stable_memory_facts_interval"),
        ),
        sa.CheckConstraint(
            "split_part(canonical_fact_key, '.', 1) = domain",
            name=op.f("ck_stable_memory_facts_key_in_domain"),
        ),
    )
    op.create_index(
        "uq_stable_memory_facts_current",
        "stable_memory_facts",
        ["tenant_id", "user_id", "canonical_fact_key"],
        unique=True,
        postgresql_where=sa.text("superseded_at IS NULL"),
    )
    op.create_index(
        "ix_stable_memory_facts_history",
        "stable_memory_facts",
        ["tenant_id", "user_id", "canonical_fact_key", "valid_from"],
    )


def downgrade() -> None:
    op.drop_index("ix_stable_memory_facts_history", table_name="stable_memory_facts")
    op.drop_index("uq_stable_memory_facts_current", table_name="stable_memory_facts")
    for table in (
        "stable_memory_facts",
        "agent_settings",
        "user_project_roles",
        "workspaces",
        "projects",
        "user_preferences",
        "user_profiles",
        "users",
        "tenants",
    ):
        op.drop_table(table)
    op.execute(sa.schema.DropSequence(sa.Sequence("authority_version_seq")))
