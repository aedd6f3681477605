"""Redis cache of authority snapshots, stamped with the PG version (seed 八.2).

Keys (``core.keys.AuthorityKeys``; same hash tag as the user's STM keys, so both scripts
below touch one slot)::

    <ns>:user:{<tenant_id>/<user_id>}:authority:snapshot  STRING snapshot JSON (PX entry TTL)
    <ns>:user:{<tenant_id>/<user_id>}:authority:version    STRING newest version (PX version TTL)

Every authoritative write bumps ``users.authority_version`` in PG; after commit the
writer calls :meth:`ProfileCache.invalidate`, which raises the version key (and deletes
the entry when the user was deleted).  A lookup reads both keys in one ``MGET`` and
reports ``missing`` (no entry) or ``stale`` (entry older than the version key): the
``profile_cache_missing`` / ``profile_cache_stale`` signals of the query profile.  A
fill is refused when a newer version is already known, so a slow reader can never put
back a snapshot older than an invalidation it raced with.  The entry TTL bounds how
long a lost invalidation (Redis down right after a commit) can go unnoticed;
:meth:`verify` compares with PG's version exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import redis
from pydantic import ValidationError

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.authority.db import Db
from memstrata.core.authority.read import read_snapshot, read_version
from memstrata.core.authority.schemas import UserVersion
from memstrata.core.authority.snapshot import AuthoritySnapshot
from memstrata.core.ids import validate_id
from memstrata.core.keys import AuthorityKeys, authority_keys

_FILL = """
local known = tonumber(redis.call('GET', KEYS[2]) or '0')
local v = tonumber(ARGV[1])
if v < known then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if v > known then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return 1
"""

_INVALIDATE = """
local known = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[3] == '1' then redis.call('DEL', KEYS[1]) end
if tonumber(ARGV[1]) > known then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
"""


class CacheStatus(StrEnum):
    HIT = "hit"
    MISSING = "missing"
    STALE = "stale"


@dataclass(frozen=True)
class CacheLookup:
    """A cache answer; a stale lookup still carries the old snapshot for callers that accept it."""

    status: CacheStatus
    snapshot: AuthoritySnapshot | None = None

    @property
    def profile_cache_missing(self) -> bool:
        return self.status is CacheStatus.MISSING

    @property
    def profile_cache_stale(self) -> bool:
        return self.status is CacheStatus.STALE


def lookup_of(raw: str | bytes | None, known: str | bytes | None) -> CacheLookup:
    """The cache's answer from the values of its two keys (entry, newest version), however
    they were read: :meth:`ProfileCache.get`, or recall's single STM round trip."""
    if raw is None:
        return CacheLookup(CacheStatus.MISSING)
    snap = _parsed(raw)
    if snap is None:
        return CacheLookup(CacheStatus.MISSING)  # unreadable entry: refill from PG
    if known is not None and int(known) > snap.version:
        return CacheLookup(CacheStatus.STALE, snap)
    return CacheLookup(CacheStatus.HIT, snap)


@lru_cache(maxsize=512)
def _parsed(raw: str | bytes) -> AuthoritySnapshot | None:
    """The snapshot of one cache entry's JSON, None when unreadable.

    Cached by the entry's text: every recall of a user reads the same entry until its
    next invalidation, and validating it was a tenth of an STM-only recall's Python
    time (issue 17).  A snapshot is frozen, so one instance serves every reader; a new
    version is a new text, hence a new key."""
    try:
        return AuthoritySnapshot.model_validate_json(raw)
    except ValidationError:
        return None


class ProfileCache:
    """Versioned snapshot cache over an injected Redis client.

    ``entry_ttl_s`` (seconds) bounds the life of an entry; ``version_ttl_s`` (seconds)
    must outlive it so an entry can never survive the version that judges it.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        entry_ttl_s: int = 600,
        version_ttl_s: int = 7 * 24 * 3600,
    ) -> None:
        if not 1 <= entry_ttl_s < version_ttl_s:
            raise ValueError("need 1 <= entry_ttl_s < version_ttl_s")
        self._r = client
        self._ns = validate_id(namespace, kind="key namespace")
        self._entry_ms = entry_ttl_s * 1000
        self._version_ms = version_ttl_s * 1000
        self._fill = client.register_script(_FILL)
        self._invalidate = client.register_script(_INVALIDATE)

    def keys(self, tenant_id: str, user_id: str) -> AuthorityKeys:
        return authority_keys(self._ns, tenant_id, user_id)

    def get(self, tenant_id: str, user_id: str) -> CacheLookup:
        """One ``MGET``: the entry and the newest version known for the user."""
        k = self.keys(tenant_id, user_id)
        with redis_errors("profile cache"):
            raw, known = self._r.mget([k.snapshot, k.version])
        return lookup_of(raw, known)

    def put(self, snapshot: AuthoritySnapshot) -> bool:
        """Store a snapshot read from PG; False when a newer version was already announced."""
        k = self.keys(snapshot.tenant_id, snapshot.user_id)
        with redis_errors("profile cache"):
            done = self._fill(
                keys=[k.snapshot, k.version],
                args=[
                    snapshot.version,
                    snapshot.model_dump_json(),
                    self._entry_ms,
                    self._version_ms,
                ],
            )
        return bool(done)

    def invalidate(self, change: UserVersion, *, drop: bool = False) -> None:
        """Call after the commit of any authoritative write of this user.

        Raises the version key, so the entry now reads as ``stale`` (still there for a
        caller that tolerates it); ``drop=True`` also deletes it (the user was deleted).
        """
        k = self.keys(change.tenant_id, change.user_id)
        with redis_errors("profile cache"):
            self._invalidate(
                keys=[k.snapshot, k.version],
                args=[change.version, self._version_ms, "1" if drop else "0"],
            )

    def invalidate_all(self, changes: Iterable[UserVersion]) -> None:
        for change in changes:
            self.invalidate(change)

    def load(
        self, *, db: Db, tenant_id: str, user_id: str
    ) -> tuple[AuthoritySnapshot, CacheLookup]:
        """Read-through: the cached snapshot when fresh, else PG (and refill).

        Returns the snapshot and the lookup that preceded it, so the caller can report
        ``profile_cache_missing`` / ``profile_cache_stale`` for this query.
        """
        lookup = self.get(tenant_id, user_id)
        if lookup.status is CacheStatus.HIT and lookup.snapshot is not None:
            return lookup.snapshot, lookup
        snap = read_snapshot(db=db, tenant_id=tenant_id, user_id=user_id)
        self.put(snap)
        return snap, lookup

    def verify(self, *, db: Db, tenant_id: str, user_id: str) -> CacheLookup:
        """Exact check against PG's version, for reads that need exact metadata."""
        lookup = self.get(tenant_id, user_id)
        if lookup.snapshot is None:
            return lookup
        current = read_version(db=db, tenant_id=tenant_id, user_id=user_id)
        if current > lookup.snapshot.version:
            return CacheLookup(CacheStatus.STALE, lookup.snapshot)
        return lookup
