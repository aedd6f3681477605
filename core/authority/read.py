"""Read a user's authority snapshot in one round trip, and their current version.

The snapshot query builds the whole snapshot as one JSON document inside PostgreSQL
(current facts, projects with roles, workspaces, agent settings), so a cold read costs
one round trip and one ``model_validate_json`` (target: ≤ 3 ms p50, see BENCHMARKS.md).
"""

from __future__ import annotations

from typing import NoReturn

from pydantic import ValidationError
from sqlalchemy import Connection, select, text

from memstrata.core.authority.db import Db, connection_of, translated
from memstrata.core.authority.errors import UnknownTenant, UnknownUser
from memstrata.core.authority.snapshot import AuthoritySnapshot
from memstrata.core.authority.tables import TENANTS, USERS
from memstrata.core.errors import CorruptRecord
from memstrata.core.ids import validate_id

_SNAPSHOT_TEMPLATE = """
SELECT json_build_object(
  'tenant_id', u.tenant_id,
  'user_id', u.id,
  'version', u.authority_version,
  'display_name', u.display_name,
  'facts', COALESCE((
    SELECT json_object_agg(f.canonical_fact_key, json_build_object(
      'id', f.id, 'canonical_fact_key', f.canonical_fact_key, 'domain', f.domain,
      'value', f.value, 'origin', f.origin, 'source_memory_ids', f.source_memory_ids,
      'source_message_ids', f.source_message_ids, 'promotion', f.promotion,
      'valid_from', f.valid_from))
    FROM stable_memory_facts f
    WHERE f.tenant_id = u.tenant_id AND f.user_id = u.id AND {facts_valid}
  ), '{{}}'::json),
  'projects', COALESCE((
    SELECT json_agg(json_build_object(
      'project_id', p.id, 'name', p.name, 'role', r.role, 'scope', r.permission_scope,
      'default_env', p.default_env, 'env_tags', p.env_tags, 'attributes', p.attributes)
      ORDER BY p.id)
    FROM user_project_roles r
    JOIN projects p ON p.tenant_id = r.tenant_id AND p.id = r.project_id
    WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id
  ), '[]'::json),
  'workspaces', COALESCE((
    SELECT json_agg(json_build_object(
      'id', w.id, 'project_id', w.project_id, 'name', w.name, 'language', w.language,
      'env_tags', w.env_tags) ORDER BY w.id)
    FROM user_project_roles r
    JOIN workspaces w ON w.tenant_id = r.tenant_id AND w.project_id = r.project_id
    WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id
  ), '[]'::json),
  'agent_settings', COALESCE((
    SELECT json_object_agg(a.agent_id, a.settings) FROM (
      SELECT s.agent_id, json_object_agg(s.name, s.value) AS settings
      FROM agent_settings s WHERE s.tenant_id = u.tenant_id GROUP BY s.agent_id
    ) a
  ), '{{}}'::json)
)::text
FROM users u
WHERE u.tenant_id = :tenant_id AND u.id = :user_id
"""
_SNAPSHOT_SQL = text(_SNAPSHOT_TEMPLATE.format(facts_valid="f.superseded_at IS NULL"))
# the facts valid at :as_of (a version is valid from valid_from until superseded_at)
_SNAPSHOT_AS_OF_SQL = text(
    _SNAPSHOT_TEMPLATE.format(
        facts_valid="f.valid_from <= to_timestamp(:as_of) "
        "AND (f.superseded_at IS NULL OR f.superseded_at > to_timestamp(:as_of))"
    )
)


def read_snapshot(
    *, db: Db, tenant_id: str, user_id: str, as_of: float | None = None
) -> AuthoritySnapshot:
    """The user's current authority snapshot; :class:`UnknownUser` if there is no such user.

    ``as_of`` (seconds since the epoch): the facts that were valid at that moment instead
    of the current ones (a fact's versions are kept with their validity); projects, roles,
    workspaces and agent settings have no history and are the current ones."""
    validate_id(tenant_id, kind="tenant_id")
    validate_id(user_id, kind="user_id")
    conn = connection_of(db)
    params: dict[str, object] = {"tenant_id": tenant_id, "user_id": user_id}
    sql = _SNAPSHOT_SQL
    if as_of is not None:
        sql, params["as_of"] = _SNAPSHOT_AS_OF_SQL, float(as_of)
    with translated("read snapshot"):
        doc = conn.execute(sql, params).scalar()
        if doc is None:
            raise_unknown_user(conn, tenant_id, user_id)
    try:
        return AuthoritySnapshot.model_validate_json(str(doc))
    except ValidationError as exc:
        raise CorruptRecord(f"authority snapshot of {user_id!r} does not parse: {exc}") from exc


def read_version(*, db: Db, tenant_id: str, user_id: str) -> int:
    """The user's current authority version (one primary-key lookup)."""
    validate_id(tenant_id, kind="tenant_id")
    validate_id(user_id, kind="user_id")
    conn = connection_of(db)
    with translated("read version"):
        version = conn.execute(
            select(USERS.c.authority_version).where(
                USERS.c.tenant_id == tenant_id, USERS.c.id == user_id
            )
        ).scalar()
    if version is None:
        with translated("read version"):
            raise_unknown_user(conn, tenant_id, user_id)
    return int(version)


def raise_unknown_user(conn: Connection, tenant_id: str, user_id: str) -> NoReturn:
    """Explain a missing user row: the tenant is unknown, or only the user is."""
    if conn.execute(select(TENANTS.c.id).where(TENANTS.c.id == tenant_id)).first() is None:
        raise UnknownTenant(f"no tenant {tenant_id!r}")
    raise UnknownUser(f"no user {user_id!r} in tenant {tenant_id!r}")
