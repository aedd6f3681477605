"""Snapshots, blocks and filters built from real PostgreSQL rows; tenant isolation."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select

from memstrata.core.authority.admin import delete_user, set_agent_setting, update_project
from memstrata.core.authority.blocks import build_blocks
from memstrata.core.authority.domain import PermissionScope
from memstrata.core.authority.errors import ScopeDenied, UnknownTenant, UnknownUser
from memstrata.core.authority.facts import save_explicit, upsert_fact
from memstrata.core.authority.filters import filters_for
from memstrata.core.authority.read import read_snapshot
from memstrata.core.authority.snapshot import AuthoritySnapshot
from memstrata.core.authority.tables import FACTS, PROFILES, ROLES, USERS
from tests.integration import authority_db
from tests.integration.authority_db import World, seed_world

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world


def _snap(engine: Engine, w: World, user: str | None = None) -> AuthoritySnapshot:
    with engine.connect() as conn:
        return read_snapshot(db=conn, tenant_id=w.tenant_id, user_id=user or w.alice)


def test_snapshot_reads_facts_roles_workspaces_and_settings(engine: Engine, world: World) -> None:
    with engine.begin() as conn:
        set_agent_setting(
            db=conn, tenant_id=world.tenant_id, agent_id="default", name="max_tokens", value=800
        )
    snap = _snap(engine, world)
    assert snap.tenant_id == world.tenant_id and snap.user_id == world.alice
    assert snap.profile_value("language") == "zh-CN"
    assert [p.project_id for p in snap.projects] == ["shop"]
    assert snap.scope_on("shop") is PermissionScope.READ_ONLY
    assert [w.id for w in snap.workspaces] == [world.workspace]
    assert snap.value("config.max_tokens") == 800
    assert snap.value("project_metadata.shop.default_env") == "prod-cn"
    assert snap.value("project_metadata.shop.owner_team") == "payments"
    assert snap.value("permission.project.shop") == {"role": "developer", "scope": "read_only"}
    assert snap.value("permission.project.blog") is None  # bob's project, not alice's


def test_blocks_render_the_seed_example_from_real_rows(engine: Engine, world: World) -> None:
    # Given alice said "remember shop as my default project"
    with engine.begin() as conn:
        save_explicit(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="config.default_project",
            domain="config",
            value="shop",
            message_ids=["msg_7"],
        )
        upsert_fact(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="constraint.no_prod_restart",
            domain="constraint",
            value="不要在工作时间重启生产环境",
        )
    blocks = build_blocks(_snap(engine, world))
    # Then the compact block is exactly the seed's example
    assert blocks.compact() == {
        "language": "zh-CN",
        "answer_style": "brief_first",
        "permission": "read_only",
        "project_default_env": "prod-cn",
    }
    zh = blocks.render("zh")
    assert zh.splitlines()[:5] == [
        "用户/环境画像：",
        "- 语言：中文",
        "- 回答风格：先结论后细节",
        "- 权限：只读",
        "- 项目：shop",
    ]
    assert "- 默认环境：prod-cn" in zh and "不要在工作时间重启生产环境" in zh
    en = blocks.render("en")
    assert "- Language: Chinese" in en and "- Permission: read-only" in en
    assert "- Default environment: prod-cn" in en


def test_a_user_specific_fact_overrides_the_project_default(engine: Engine, world: World) -> None:
    with engine.begin() as conn:
        upsert_fact(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="project_metadata.shop.default_env",
            domain="project_metadata",
            value="staging-cn",
        )
    blocks = build_blocks(_snap(engine, world), project_id="shop")
    assert blocks.runtime.project_default_env == "staging-cn"


def test_project_change_reaches_its_users_snapshots(engine: Engine, world: World) -> None:
    before = _snap(engine, world)
    with engine.begin() as conn:
        result = update_project(
            db=conn,
            tenant_id=world.tenant_id,
            project_id="shop",
            changes={"default_env": "prod-eu"},
        )
    after = _snap(engine, world)
    assert [b.user_id for b in result.bumped] == [world.alice]  # bob has no role on shop
    assert after.version > before.version
    assert after.value("project_metadata.shop.default_env") == "prod-eu"


def test_filters_come_from_pg_and_refuse_ungranted_scopes(engine: Engine, world: World) -> None:
    snap = _snap(engine, world)
    f = filters_for(snap, workspace_id=world.workspace)
    assert (f.tenant_id, f.project_id, f.workspace_id) == (world.tenant_id, "shop", world.workspace)
    assert f.permission_scope is PermissionScope.READ_ONLY and not f.can_write()
    assert f.language == "zh-CN"
    assert f.env_tags == ("k8s", "cn", "prod-cn", "oncall")
    with pytest.raises(ScopeDenied):
        filters_for(snap, project_id="blog")


def test_tenants_are_isolated_even_with_the_same_ids(engine: Engine, world: World) -> None:
    # Given a second tenant with the very same user and project ids
    other = seed_world(engine)
    with engine.begin() as conn:
        upsert_fact(
            db=conn,
            tenant_id=other.tenant_id,
            user_id="alice",
            canonical_fact_key="profile.language",
            domain="profile",
            value="en",
        )
    mine, theirs = _snap(engine, world), _snap(engine, other)
    # Then each tenant sees only its own values
    assert mine.profile_value("language") == "zh-CN"
    assert theirs.profile_value("language") == "en"
    assert {f.id for f in mine.facts.values()}.isdisjoint({f.id for f in theirs.facts.values()})
    # And filters built for one tenant refuse records of the other
    f = filters_for(mine, project_id="shop")
    assert f.allows(tenant_id=world.tenant_id, project_id="shop")
    assert not f.allows(tenant_id=other.tenant_id, project_id="shop")
    # And deleting alice in one tenant leaves the other tenant's alice untouched
    with engine.begin() as conn:
        gone = delete_user(db=conn, tenant_id=world.tenant_id, user_id="alice")
    assert gone.version > mine.version
    with engine.connect() as conn:
        for table in (FACTS, PROFILES, ROLES):
            left = conn.execute(
                select(func.count())
                .select_from(table)
                .where(table.c.tenant_id == world.tenant_id, table.c.user_id == "alice")
            ).scalar()
            assert left == 0, table.name
        assert (
            conn.execute(
                select(func.count())
                .select_from(USERS)
                .where(USERS.c.tenant_id == other.tenant_id, USERS.c.id == "alice")
            ).scalar()
            == 1
        )
    assert _snap(engine, other).profile_value("language") == "en"
    with pytest.raises(UnknownUser):
        _snap(engine, world)


def test_unknown_ids_on_read_are_typed(engine: Engine, world: World) -> None:
    with pytest.raises(UnknownTenant):
        _snap(engine, World("no_such_tenant"))
    with pytest.raises(UnknownUser):
        _snap(engine, world, user="nobody")
    with engine.begin() as conn, pytest.raises(UnknownUser):
        delete_user(db=conn, tenant_id=world.tenant_id, user_id="nobody")
