"""Every Redis key shape of memstrata, in one place.

All keys of one user carry the cluster hash tag ``{<user_id>}`` so a Lua script can
touch an item and all its indexes atomically, also on Redis Cluster.  Ids are validated
(:mod:`core.ids`) before they reach these functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.ids import DEFAULT_TENANT, entity_key_part, owner_tenant, validate_id


def user_scope(user_id: str, tenant_id: str | None = None) -> str:
    """The hash-tag part of an owner's keys: ``<tenant>/<user>``.

    The owner is always ``(tenant, user)``; no tenant is :data:`core.ids.DEFAULT_TENANT`,
    so a user written without a tenant and the same user in tenant ``default`` share one
    scope, as they share one owner in PostgreSQL and LTM.  ``/`` never occurs in a valid
    id, so two tenants' users can never share keys and the scope parses back
    unambiguously (:func:`parse_user_scope`).
    """
    validate_id(user_id, kind="user_id")
    return f"{owner_tenant(tenant_id)}/{user_id}"


def parse_user_scope(scope: str) -> tuple[str, str]:
    """``(user_id, tenant_id)`` of a scope built by :func:`user_scope`."""
    tenant, _, user = scope.rpartition("/")
    return user, (tenant or DEFAULT_TENANT)


@dataclass(frozen=True)
class UserKeys:
    """Key builder for one user's STM (DESIGN §3), scoped by tenant when there is one."""

    namespace: str
    user_id: str
    tenant_id: str | None = None

    @property
    def scope(self) -> str:
        return user_scope(self.user_id, self.tenant_id)

    @property
    def prefix(self) -> str:
        return f"{self.namespace}:user:{{{self.scope}}}:"

    def item(self, memory_id: str) -> str:
        return f"{self.prefix}item:{memory_id}"

    @property
    def recent(self) -> str:
        return f"{self.prefix}recent"

    def session(self, session_id: str) -> str:
        return f"{self.prefix}session:{session_id}"

    def task(self, task_id: str) -> str:
        return f"{self.prefix}task:{task_id}"

    @property
    def expire(self) -> str:
        return f"{self.prefix}expire"

    def entity(self, entity: str) -> str:
        return f"{self.prefix}entity:{entity_key_part(entity)}"

    def type(self, memory_type: str) -> str:
        return f"{self.prefix}type:{memory_type}"

    @property
    def canon(self) -> str:
        return f"{self.prefix}canon"

    @property
    def fp(self) -> str:
        return f"{self.prefix}fp"

    def decisions(self, session_id: str) -> str:
        """HASH decision_id → JSON write decision, kept ``decision_ttl_s`` for "why?" questions."""
        return f"{self.prefix}decisions:{session_id}"


def index_suffixes(
    *, session_id: str, task_id: str | None, entities: list[str], memory_type: str
) -> list[str]:
    """The updated_at-scored index keys (relative to the user prefix) an item belongs to.

    Stored with the item (``_idx``) so the delete and sweep scripts remove exactly the
    entries that were written, even if the entity normalisation changes later.
    """
    out = ["recent", f"session:{session_id}", f"type:{memory_type}"]
    if task_id:
        out.append(f"task:{task_id}")
    seen: set[str] = set()
    for entity in entities:
        part = entity_key_part(entity)
        if part not in seen:
            seen.add(part)
            out.append(f"entity:{part}")
    return out


@dataclass(frozen=True)
class GlobalKeys:
    """Keys that are not per user: the ingest queue shards and the sweep schedule."""

    namespace: str

    def ingest_stream(self, shard: int) -> str:
        return f"{self.namespace}:ingest:{{s{shard}}}:stream"

    def ingest_kick(self, shard: int) -> str:
        """Set while a drain task for the shard is queued or running."""
        return f"{self.namespace}:ingest:{{s{shard}}}:kick"

    def ingest_queued(self, shard: int, scope: str, session_id: str, generation: str) -> str:
        """STRING: the end offset in a session's L0 file up to which every turn is queued.

        The reconciler's watermark (docs/RELIABILITY.md), per file generation (a file
        written anew gets fresh watermarks), in the stream's hash slot so the enqueue
        script moves it in the same atomic step as the ``XADD``.
        """
        return f"{self.namespace}:ingest:{{s{shard}}}:queued:{scope}/{session_id}:{generation}"

    @property
    def sweep_users(self) -> str:
        """ZSET user scope → earliest expires_at among its items (a hint for the sweep)."""
        return f"{self.namespace}:sweep:users"

    @property
    def dead_letters(self) -> str:
        """STREAM of turns that failed permanently, with the reason."""
        return f"{self.namespace}:ingest:dead"
