"""Profile, constraints and runtime-metadata blocks (seed 六.4, 十.2, 十.4).

PG results do not join the candidate pool: they become three small typed blocks that the
prompt renders verbatim, in Chinese or English.  ``compact()`` is the seed's example
shape (``language``, ``answer_style``, ``permission``, ``project_default_env``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from memstrata.core.authority.domain import FactDomain, PermissionScope
from memstrata.core.authority.filters import filters_for
from memstrata.core.authority.snapshot import DEFAULT_AGENT, AuthoritySnapshot

Lang = Literal["zh", "en"]

_LABELS: dict[str, dict[Lang, str]] = {
    "title": {"zh": "用户/环境画像：", "en": "User / environment profile:"},
    "language": {"zh": "语言", "en": "Language"},
    "answer_style": {"zh": "回答风格", "en": "Answer style"},
    "timezone": {"zh": "时区", "en": "Time zone"},
    "permission": {"zh": "权限", "en": "Permission"},
    "role": {"zh": "角色", "en": "Role"},
    "project": {"zh": "项目", "en": "Project"},
    "workspace": {"zh": "工作区", "en": "Workspace"},
    "project_default_env": {"zh": "默认环境", "en": "Default environment"},
    "env_tags": {"zh": "环境标签", "en": "Environment tags"},
    "constraints": {"zh": "长期约束：", "en": "Standing constraints:"},
}
_VALUES: dict[str, dict[Lang, str]] = {
    "zh-CN": {"zh": "中文", "en": "Chinese"},
    "zh": {"zh": "中文", "en": "Chinese"},
    "en": {"zh": "英文", "en": "English"},
    "en-US": {"zh": "英文", "en": "English"},
    "brief_first": {"zh": "先结论后细节", "en": "conclusion first, then details"},
    "detailed": {"zh": "详细", "en": "detailed"},
    PermissionScope.READ_ONLY.value: {"zh": "只读", "en": "read-only"},
    PermissionScope.READ_WRITE.value: {"zh": "读写", "en": "read-write"},
    PermissionScope.ADMIN.value: {"zh": "管理员", "en": "admin"},
}
_SEP: dict[Lang, str] = {"zh": "：", "en": ": "}


def _label(name: str, lang: Lang) -> str:
    return _LABELS[name][lang]


def _show(value: str, lang: Lang) -> str:
    return _VALUES.get(value, {}).get(lang, value)


def _line(name: str, value: str | None, lang: Lang) -> list[str]:
    return [] if value is None else [f"- {_label(name, lang)}{_SEP[lang]}{_show(value, lang)}"]


class ProfileBlock(BaseModel):
    """Who the user is and how they want answers (``profile.*``)."""

    model_config = ConfigDict(frozen=True)

    language: str | None = None
    answer_style: str | None = None
    timezone: str | None = None
    display_name: str | None = None


class ConstraintsBlock(BaseModel):
    """What the user may do here, and the standing ``constraint.*`` facts."""

    model_config = ConfigDict(frozen=True)

    permission: PermissionScope | None = None
    role: str | None = None
    constraints: tuple[tuple[str, JsonValue], ...] = ()


class RuntimeMetadataBlock(BaseModel):
    """Where the agent runs: tenant, project, workspace, environment, agent config."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    project_id: str | None = None
    workspace_id: str | None = None
    project_default_env: str | None = None
    env_tags: tuple[str, ...] = ()
    agent_config: dict[str, JsonValue] = Field(default_factory=dict)


class AuthorityBlocks(BaseModel):
    model_config = ConfigDict(frozen=True)

    profile: ProfileBlock
    constraints: ConstraintsBlock
    runtime: RuntimeMetadataBlock

    def compact(self) -> dict[str, str]:
        """The seed's metadata block: only the keys that have a value."""
        raw = {
            "language": self.profile.language,
            "answer_style": self.profile.answer_style,
            "permission": self.constraints.permission.value
            if self.constraints.permission
            else None,
            "project_default_env": self.runtime.project_default_env,
        }
        return {k: v for k, v in raw.items() if v is not None}

    def render(self, lang: Lang = "zh") -> str:
        """Prompt text like seed 十.4's "用户/环境画像" section; empty when PG knows nothing."""
        lines = _line("language", self.profile.language, lang)
        lines += _line("answer_style", self.profile.answer_style, lang)
        lines += _line("timezone", self.profile.timezone, lang)
        perm = self.constraints.permission
        lines += _line("permission", perm.value if perm else None, lang)
        lines += _line("project", self.runtime.project_id, lang)
        lines += _line("project_default_env", self.runtime.project_default_env, lang)
        out = [_label("title", lang), *lines] if lines else []
        if self.constraints.constraints:
            out.append(_label("constraints", lang))
            out += [f"- {_constraint_text(k, v)}" for k, v in self.constraints.constraints]
        return "\n".join(out)


def _constraint_text(key: str, value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    return f"{key.removeprefix('constraint.')} = {value}"


def build_blocks(
    snapshot: AuthoritySnapshot,
    *,
    project_id: str | None = None,
    workspace_id: str | None = None,
    agent_id: str = DEFAULT_AGENT,
) -> AuthorityBlocks:
    """Assemble the three blocks for one query scope (same scope checks as the filters)."""
    scope = filters_for(snapshot, project_id=project_id, workspace_id=workspace_id)
    pid = scope.project_id
    env = snapshot.value(f"project_metadata.{pid}.default_env") if pid else None
    agent_config = dict(snapshot.agent_settings.get(agent_id, {}))
    for key, fact in snapshot.facts.items():
        if fact.domain is FactDomain.CONFIG:
            agent_config[key.removeprefix("config.")] = fact.value
    constraints = tuple(
        (key, fact.value)
        for key, fact in sorted(snapshot.facts.items())
        if fact.domain is FactDomain.CONSTRAINT
    )
    return AuthorityBlocks(
        profile=ProfileBlock(
            language=snapshot.profile_value("language"),
            answer_style=snapshot.profile_value("answer_style"),
            timezone=snapshot.profile_value("timezone"),
            display_name=snapshot.profile_value("display_name"),
        ),
        constraints=ConstraintsBlock(
            permission=scope.permission_scope, role=scope.role, constraints=constraints
        ),
        runtime=RuntimeMetadataBlock(
            tenant_id=snapshot.tenant_id,
            project_id=pid,
            workspace_id=scope.workspace_id,
            project_default_env=env if isinstance(env, str) else None,
            env_tags=scope.env_tags,
            agent_config=agent_config,
        ),
    )
