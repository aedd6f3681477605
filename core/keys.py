"""Every Redis key shape of memstrata, in one module (docs/KEYS.md lists the same families).

No other module formats a key string: the stores ask these builders, and the Lua scripts
of ``core/stm/lua/`` only append the suffixes below to the user prefix they are given.
:data:`FAMILIES` declares every shape once, as docs/KEYS.md writes it; a unit test keeps
the doc's tables and this list equal, and an integration test checks that the write paths
create no key outside them.

``<ns>`` is the key namespace (one isolated deployment).  All keys of one owner carry the
cluster hash tag ``{<tenant>/<user>}`` (:func:`user_scope`), so a Lua script can touch an
item and all its indexes atomically, also on Redis Cluster.  Ids are validated
(:mod:`core.ids`) before they reach these builders, so no id holds ``:``, a brace, a glob
character or whitespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

from memstrata.core.ids import DEFAULT_TENANT, entity_key_part, owner_tenant, validate_id

# ---------------------------------------------------------------------------- owners


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


def scope_member(scope: str, part: str) -> str:
    """``<scope>|<part>``: a member naming an owner's session or item in a global key
    (``compress:active``, ``lifecycle:batch``, ``lifecycle:finalised``).  ``|`` occurs
    in neither part, so it splits back with ``rpartition("|")``."""
    return f"{scope}|{part}"


# ---------------------------------------------------------------------------- per owner


@dataclass(frozen=True)
class UserKeys:
    """One owner's keys under ``<ns>:user:{<scope>}:``: STM (DESIGN §3), write decisions,
    lifecycle records and recall bookkeeping."""

    namespace: str
    user_id: str
    tenant_id: str | None = None

    # computed (and the user id validated) once per instance: a recall builds a dozen keys
    @cached_property
    def scope(self) -> str:
        return user_scope(self.user_id, self.tenant_id)

    @cached_property
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

    def evict(self, session_id: str) -> str:
        """ZSET of the per-session cap (written by the upsert script as ``evict:<s>``)."""
        return f"{self.prefix}evict:{session_id}"

    @property
    def canon(self) -> str:
        return f"{self.prefix}canon"

    @property
    def fp(self) -> str:
        return f"{self.prefix}fp"

    def decisions(self, session_id: str) -> str:
        """HASH decision_id → JSON write decision, kept ``decision_ttl_s`` for "why?" questions."""
        return f"{self.prefix}decisions:{session_id}"

    @property
    def lifecycle(self) -> str:
        """HASH memory_id → JSON :class:`core.lifecycle.states.Record`."""
        return f"{self.prefix}lifecycle"

    @property
    def card_access(self) -> str:
        """HASH card id → "<access count>|<epoch s when the count last grew>"."""
        return f"{self.prefix}card_access"

    @property
    def access(self) -> str:
        """ZSET ``<source>:<id>`` → recall hits, written by recall's bookkeeping."""
        return f"{self.prefix}access"

    def last_recall(self, session_id: str) -> str:
        """STRING ``ok`` / ``insufficient``: the sufficiency of the session's last recall."""
        return f"{self.prefix}lastrecall:{session_id}"

    def suffix(self, key: str) -> str:
        """``key`` relative to :attr:`prefix` (what the Lua scripts take as an argument)."""
        p = self.prefix
        if not key.startswith(p):
            raise ValueError(f"{key!r} is not a key of {self.scope}")
        return key[len(p) :]


def index_suffixes(
    *, session_id: str, task_id: str | None, entities: list[str]
) -> list[str]:
    """The updated_at-scored index keys (relative to the user prefix) an item belongs to.

    Stored with the item (``_idx``) so the delete and sweep scripts remove exactly the
    entries that were written, even if the entity normalisation changes later.  There is
    no index by memory type: ``StmStore.by_type`` filters ``recent`` instead, which saves
    an index entry per item (docs/KEYS.md).
    """
    out = ["recent", f"session:{session_id}"]
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
class AuthorityKeys:
    """One owner's cached authority snapshot (``core.authority.cache``), beside their STM."""

    namespace: str
    tenant_id: str
    user_id: str

    def __post_init__(self) -> None:
        validate_id(self.namespace, kind="key namespace")
        validate_id(self.tenant_id, kind="tenant_id")
        validate_id(self.user_id, kind="user_id")

    @cached_property  # read for each of the two keys of a lookup
    def prefix(self) -> str:
        return UserKeys(self.namespace, self.user_id, self.tenant_id).prefix + "authority:"

    @property
    def snapshot(self) -> str:
        return f"{self.prefix}snapshot"

    @property
    def version(self) -> str:
        return f"{self.prefix}version"


# One key object per owner, reused: a recall reads five of an owner's keys and each object
# works out its scope and prefix once (issue 17: the STM-only recall's hot path)
@lru_cache(maxsize=4096)
def user_keys(namespace: str, user_id: str, tenant_id: str | None = None) -> UserKeys:
    """:class:`UserKeys` of an owner, cached (the objects are immutable); the ids are
    validated first, so an invalid one raises every time and never takes a slot."""
    keys = UserKeys(namespace, user_id, tenant_id)
    _ = keys.prefix  # validates the user and tenant ids (an exception is not cached)
    return keys


@lru_cache(maxsize=4096)
def authority_keys(namespace: str, tenant_id: str, user_id: str) -> AuthorityKeys:
    """:class:`AuthorityKeys` of an owner, cached; an invalid id raises every time."""
    return AuthorityKeys(namespace, tenant_id, user_id)


@dataclass(frozen=True)
class CompressKeys:
    """One owner's compression state, under its own prefix (``<ns>:compress:{<scope>}:``):
    derived, with its own lifetime, so the STM sweep and redelivery logic never see it."""

    namespace: str
    user_id: str
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        validate_id(self.namespace, kind="key namespace")

    @property
    def scope(self) -> str:
        return user_scope(self.user_id, self.tenant_id)

    @property
    def prefix(self) -> str:
        return f"{self.namespace}:compress:{{{self.scope}}}:"

    def view(self, session_id: str, last_message_id: str, budget: int | None) -> str:
        validate_id(session_id, kind="session_id")
        validate_id(last_message_id, kind="message_id")
        return f"{self.prefix}view:{session_id}:{last_message_id}:{budget or 0}"

    def ctx(self, session_id: str) -> str:
        return f"{self.prefix}ctx:{validate_id(session_id, kind='session_id')}"

    def ctok(self, session_id: str) -> str:
        return f"{self.prefix}ctok:{validate_id(session_id, kind='session_id')}"


@dataclass(frozen=True)
class TenantKeys:
    """One tenant's STM accounting for the per-tenant cap (``core.stm.store``), under the
    tenant's own hash tag ``{<tenant>}`` (users of one tenant live in other slots)."""

    namespace: str
    tenant_id: str

    def __post_init__(self) -> None:
        validate_id(self.namespace, kind="key namespace")
        validate_id(self.tenant_id, kind="tenant_id")

    @property
    def prefix(self) -> str:
        return f"{self.namespace}:tenant:{{{self.tenant_id}}}:"

    @property
    def users(self) -> str:
        """ZSET user_id → STM items the user held after its last write, sweep or delete."""
        return f"{self.prefix}users"

    @property
    def items(self) -> str:
        """STRING: the sum of :attr:`users`' scores (the tenant's STM items)."""
        return f"{self.prefix}items"


# ---------------------------------------------------------------------------- global


@dataclass(frozen=True)
class GlobalKeys:
    """Keys that are not per owner: ingest shards, the sweep hint, compression activity,
    job locks and Celery's broker prefix."""

    namespace: str

    def ingest_stream(self, shard: int) -> str:
        return f"{self.namespace}:ingest:{{s{shard}}}:stream"

    def ingest_kick(self, shard: int) -> str:
        """Set while a drain task for the shard is queued or running."""
        return f"{self.namespace}:ingest:{{s{shard}}}:kick"

    def ingest_attempts(self, shard: int) -> str:
        """HASH entry id → times a turn was processed alone without completing, and
        ``<entry id>:error`` → its last error (``core.ingest.deadletters``)."""
        return f"{self.namespace}:ingest:{{s{shard}}}:attempts"
    def ingest_queued(self, shard: int, scope: str, session_id: str, generation: str) -> str:
        """STRING: the end offset in a session's L0 file up to which every turn is queued.

        The reconciler's watermark (docs/RELIABILITY.md), per file generation (a file
        written anew gets fresh watermarks), in the stream's hash slot so the enqueue
        script moves it in the same atomic step as the ``XADD``.
        """
        return f"{self.namespace}:ingest:{{s{shard}}}:queued:{scope}/{session_id}:{generation}"

    @property
    def dead_letters(self) -> str:
        """STREAM of turns that failed permanently, with the reason."""
        return f"{self.namespace}:ingest:dead"

    @property
    def sweep_users(self) -> str:
        """ZSET user scope → earliest expires_at among its items, rounded up to the second
        as ``expire`` files it (a hint for the sweep)."""
        return f"{self.namespace}:sweep:users"

    @property
    def compress_active(self) -> str:
        """ZSET ``<scope>|<session>`` → last activity, for Beat's idle-session jobs."""
        return f"{self.namespace}:compress:active"

    def job_run(self, job: str) -> str:
        """HASH of a periodic job's last run (``core.maintenance.record_run``): started,
        finished, outcome, duration_s, error; read by ``memstrata status`` and /metrics."""
        return f"{self.namespace}:job:{validate_id(job, kind='job')}"

    @property
    def jobs(self) -> str:
        """SET of the job names that have a :meth:`job_run` hash (for /metrics)."""
        return f"{self.namespace}:jobs"

    def lock(self, job: str) -> str:
        """STRING lock of a periodic job (``core.maintenance.run_locked``)."""
        return f"{self.namespace}:lock:{job}"

    @property
    def user_glob(self) -> str:
        """SCAN pattern of every owner's ``<ns>:user:…`` keys (not a key itself)."""
        return f"{self.namespace}:user:*"

    @property
    def celery_prefix(self) -> str:
        """Celery's broker ``global_keyprefix``: each namespace has its own queues."""
        return f"{self.namespace}:celery:"


@dataclass(frozen=True)
class LifecycleKeys:
    """The lifecycle layer's keys: per-owner ones (same hash tag as the owner's STM) and
    the global batch queue, finalised-session map and round-robin cursors."""

    namespace: str

    def state(self, user_id: str, tenant_id: str | None = None) -> str:
        """HASH memory_id → JSON :class:`core.lifecycle.states.Record`."""
        return UserKeys(self.namespace, user_id, tenant_id).lifecycle

    def card_access(self, user_id: str, tenant_id: str | None = None) -> str:
        return UserKeys(self.namespace, user_id, tenant_id).card_access

    def access(self, user_id: str, tenant_id: str | None = None) -> str:
        return UserKeys(self.namespace, user_id, tenant_id).access

    @property
    def batch(self) -> str:
        """HASH ``<scope>|<memory_id>`` → JSON BatchEntry (seed 2 ``mem:batch:queue``)."""
        return f"{self.namespace}:lifecycle:batch"

    @property
    def finalised(self) -> str:
        """HASH ``<scope>|<session_id>`` → last activity (epoch s) the session was finalised at."""
        return f"{self.namespace}:lifecycle:finalised"

    @property
    def access_cursor(self) -> str:
        """STRING: the "<tenant>/<user>" card owner the access sync resumes after."""
        return f"{self.namespace}:lifecycle:access_cursor"

    @property
    def scan_cursor(self) -> str:
        """STRING: the user scope the promotion scan resumes after (round robin)."""
        return f"{self.namespace}:lifecycle:scan_cursor"


# ---------------------------------------------------------------------------- families

_PLACEHOLDER = re.compile(r"<([a-z_]+)>|\*")
# what a placeholder of a shape may stand for; anything else is one id-like key part
_PARTS = {
    "u": r"[^\s:{}/|]+/[^\s:{}/|]+",  # <tenant>/<user>
    "n": r"[0-9]+",
    "budget": r"[0-9]+",
    "gen": r"[0-9a-f]*",  # a file's generation hash; empty for a file not (yet) in L0
}
_PART = r"[^\s:{}]+"


@dataclass(frozen=True)
class Family:
    """One key shape, written as docs/KEYS.md writes it, and its Redis type."""

    shape: str  # e.g. "<ns>:user:{<u>}:item:<memory_id>"; "*" = any rest
    type: str  # HASH | ZSET | STRING | STREAM | various

    def pattern(self, namespace: str) -> re.Pattern[str]:
        """The regex a key of this family in ``namespace`` matches in full."""
        out, pos = [], 0
        for m in _PLACEHOLDER.finditer(self.shape):
            out.append(re.escape(self.shape[pos : m.start()]))
            name = m.group(1)
            if name is None:
                out.append(r".+")
            elif name == "ns":
                out.append(re.escape(namespace))
            else:
                out.append(_PARTS.get(name, _PART))
            pos = m.end()
        out.append(re.escape(self.shape[pos:]))
        return re.compile("".join(out))

    def matches(self, key: str, namespace: str) -> bool:
        return self.pattern(namespace).fullmatch(key) is not None


FAMILIES: tuple[Family, ...] = (
    # per owner: short-term memory and write decisions (UserKeys)
    Family("<ns>:user:{<u>}:item:<memory_id>", "HASH"),
    Family("<ns>:user:{<u>}:recent", "ZSET"),
    Family("<ns>:user:{<u>}:session:<session_id>", "ZSET"),
    Family("<ns>:user:{<u>}:task:<task_id>", "ZSET"),
    Family("<ns>:user:{<u>}:entity:<entity>", "ZSET"),
    Family("<ns>:user:{<u>}:expire", "ZSET"),
    Family("<ns>:user:{<u>}:evict:<session_id>", "ZSET"),
    Family("<ns>:user:{<u>}:canon", "HASH"),
    Family("<ns>:user:{<u>}:fp", "HASH"),
    Family("<ns>:user:{<u>}:decisions:<session_id>", "HASH"),
    # per tenant: STM accounting of the per-tenant cap (TenantKeys)
    Family("<ns>:tenant:{<tenant>}:users", "ZSET"),
    Family("<ns>:tenant:{<tenant>}:items", "STRING"),
    # global (GlobalKeys)
    Family("<ns>:ingest:{s<n>}:stream", "STREAM"),
    Family("<ns>:ingest:{s<n>}:kick", "STRING"),
    Family("<ns>:ingest:{s<n>}:attempts", "HASH"),
    Family("<ns>:ingest:{s<n>}:queued:<u>/<session>:<gen>", "STRING"),
    Family("<ns>:ingest:dead", "STREAM"),
    Family("<ns>:sweep:users", "ZSET"),
    Family("<ns>:lock:<job>", "STRING"),
    Family("<ns>:job:<job>", "HASH"),
    Family("<ns>:jobs", "SET"),
    Family("<ns>:celery:*", "various"),
    # per owner: profile cache, lifecycle and recall bookkeeping (AuthorityKeys, UserKeys)
    Family("<ns>:user:{<u>}:authority:snapshot", "STRING"),
    Family("<ns>:user:{<u>}:authority:version", "STRING"),
    Family("<ns>:user:{<u>}:lifecycle", "HASH"),
    Family("<ns>:user:{<u>}:card_access", "HASH"),
    Family("<ns>:user:{<u>}:access", "ZSET"),
    Family("<ns>:user:{<u>}:lastrecall:<session_id>", "STRING"),
    # lifecycle, global (LifecycleKeys)
    Family("<ns>:lifecycle:batch", "HASH"),
    Family("<ns>:lifecycle:finalised", "HASH"),
    Family("<ns>:lifecycle:access_cursor", "STRING"),
    Family("<ns>:lifecycle:scan_cursor", "STRING"),
    # compression (CompressKeys, GlobalKeys.compress_active)
    Family("<ns>:compress:{<u>}:view:<session>:<last_message_id>:<budget>", "STRING"),
    Family("<ns>:compress:{<u>}:ctx:<session>", "HASH"),
    Family("<ns>:compress:{<u>}:ctok:<session>", "HASH"),
    Family("<ns>:compress:active", "ZSET"),
)


def families_of(key: str, namespace: str) -> list[Family]:
    """The declared families ``key`` belongs to (exactly one for every key memstrata writes)."""
    return [f for f in FAMILIES if f.matches(key, namespace)]
