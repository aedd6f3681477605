"""Blocks and retrieval filters derived from a snapshot (no database needed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstrata.core.authority.blocks import build_blocks
from memstrata.core.authority.domain import PermissionScope
from memstrata.core.authority.errors import ScopeDenied
from memstrata.core.authority.filters import RetrievalFilters, filters_for
from memstrata.core.errors import InvalidId
from tests.unit.authority_snapshots import snapshot


def test_compact_block_is_the_seed_example() -> None:
    snap = snapshot(profile__language="zh-CN", profile__answer_style="brief_first")
    blocks = build_blocks(snap, project_id="shop")
    assert blocks.compact() == {
        "language": "zh-CN",
        "answer_style": "brief_first",
        "permission": "read_only",
        "project_default_env": "prod-cn",
    }


def test_render_in_chinese_and_english() -> None:
    snap = snapshot(
        profile__language="zh-CN",
        profile__answer_style="brief_first",
        constraint__tests="every change needs a test",
    )
    blocks = build_blocks(snap, project_id="shop")
    assert blocks.render("zh").splitlines() == [
        "用户/环境画像：",
        "- 语言：中文",
        "- 回答风格：先结论后细节",
        "- 权限：只读",
        "- 项目：shop",
        "- 默认环境：prod-cn",
        "长期约束：",
        "- every change needs a test",
    ]
    assert blocks.render("en").splitlines()[:4] == [
        "User / environment profile:",
        "- Language: Chinese",
        "- Answer style: conclusion first, then details",
        "- Permission: read-only",
    ]


def test_blocks_of_an_empty_profile_render_nothing() -> None:
    blocks = build_blocks(snapshot())
    assert blocks.render("zh") == "" and blocks.compact() == {}


def test_unknown_values_are_shown_as_they_are() -> None:
    blocks = build_blocks(snapshot(profile__answer_style="socratic"))
    assert "- 回答风格：socratic" in blocks.render("zh")


def test_runtime_block_merges_agent_settings_and_user_config() -> None:
    blocks = build_blocks(snapshot(config__max_tokens=2000), project_id="shop")
    assert blocks.runtime.agent_config == {"max_tokens": 2000, "default_env": "staging"}
    assert blocks.runtime.env_tags == ("k8s", "prod-cn")


def test_default_project_comes_from_the_users_config() -> None:
    blocks = build_blocks(snapshot(config__default_project="shop"))
    assert blocks.runtime.project_id == "shop" and blocks.constraints.permission is not None
    gone = build_blocks(snapshot(config__default_project="blog"))  # no role on blog any more
    assert gone.runtime.project_id is None


def test_filters_scope_one_project_and_workspace() -> None:
    f = filters_for(snapshot(profile__language="zh-CN"), workspace_id="ws1")
    assert f.project_id == "shop" and f.permission_scope is PermissionScope.READ_ONLY
    assert f.language == "en"  # the workspace's language wins over the profile's
    assert f.env_tags == ("k8s", "prod-cn", "oncall")
    assert f.allows(tenant_id="acme", project_id="shop")
    assert not f.allows(tenant_id="acme", project_id="docs")
    assert not f.allows(tenant_id="other", project_id="shop")
    assert f.milvus_expr() == 'tenant_id == "acme" and project_id == "shop"'


def test_filters_without_a_project_cover_every_granted_project() -> None:
    f = filters_for(snapshot())
    assert f.project_ids == ("shop", "docs") and f.project_id is None
    assert f.allows(tenant_id="acme", project_id="docs")
    assert f.allows(tenant_id="acme")
    assert not f.allows(tenant_id="acme", project_id="secret")
    assert f.milvus_expr() == (
        'tenant_id == "acme" and (project_id in ["shop", "docs"] or project_id == "")'
    )


def test_write_permission_follows_the_scope() -> None:
    assert not filters_for(snapshot(), project_id="shop").can_write()
    assert filters_for(snapshot(), project_id="docs").can_write()


@pytest.mark.parametrize(
    ("project", "workspace"), [("blog", None), (None, "ws-other"), ("docs", "ws1")]
)
def test_ungranted_scopes_are_denied(project: str | None, workspace: str | None) -> None:
    with pytest.raises(ScopeDenied):
        filters_for(snapshot(), project_id=project, workspace_id=workspace)


def test_ids_are_validated_before_use() -> None:
    with pytest.raises(InvalidId):
        filters_for(snapshot(), project_id='shop" or 1==1')


def test_filters_model_refuses_inconsistent_scopes() -> None:
    base = {"tenant_id": "acme", "user_id": "alice", "project_ids": ("shop",)}
    with pytest.raises(ValidationError):
        RetrievalFilters.model_validate(
            {**base, "project_id": "docs", "permission_scope": "read_only"}
        )
    with pytest.raises(ValidationError):
        RetrievalFilters.model_validate({**base, "workspace_id": "ws1"})
    with pytest.raises(ValidationError):
        RetrievalFilters.model_validate({**base, "tenant_id": "a:b"})
    f = RetrievalFilters.model_validate(base)
    with pytest.raises(ValidationError):
        f.tenant_id = "other"  # type: ignore[misc]
