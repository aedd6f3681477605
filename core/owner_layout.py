"""Adopt data written before one owner identity: no-tenant STM keys and L0 folders.

Until 2026-12-01 a turn recorded without a tenant lived under the scope ``{<user>}`` in
Redis and ``<root>/u/<user>/`` in L0, while PostgreSQL and LTM filed it under the
tenant ``default``.  Now every layer files it under ``default`` (``core.ids``), so the
old keys and folders are moved once, by ``memstrata migrate``:

* Redis: every ``<ns>:user:{<user>}:…`` key is renamed to ``<ns>:user:{default/<user>}:…``,
  and the global hashes and sorted sets whose members name a scope (sweep hint,
  lifecycle batch queue and finalised sessions, compression activity) are rewritten;
* L0: ``<root>/u/<user>/<session>.jsonl`` moves to ``<root>/t/default/u/<user>/``.

A target that already exists (the same owner also wrote under tenant ``default``) is
never overwritten: the source is left where it is and counted in ``conflicts``, for an
operator to look at.  Running it again is a no-op.  The old records' ``tenant_id`` field
stays empty, which every reader already treats as the default tenant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import redis

from memstrata.core.adapters.redis import redis_errors
from memstrata.core.ids import DEFAULT_TENANT

_LEGACY_USER_KEY = re.compile(r"^(?P<ns>[^:]+):user:\{(?P<scope>[^{}/]+)\}:(?P<rest>.+)$")
# global sorted sets whose members (or member prefixes) are user scopes, and which score
# wins when both layouts hold the owner: the sweep hint keeps the earliest expiry, the
# compression activity the latest turn
_SCOPED_MEMBER_SETS = (("sweep:users", "lt"), ("compress:active", "gt"))
_SCOPED_FIELD_HASHES = ("lifecycle:batch", "lifecycle:finalised")


@dataclass
class Adopted:
    """What one adoption moved (counts) and what it left alone (conflicts)."""

    keys: int = 0
    members: int = 0
    files: int = 0
    conflicts: list[str] = field(default_factory=list)


def _new_scope(scope: str) -> str:
    return scope if "/" in scope else f"{DEFAULT_TENANT}/{scope}"


def _member_scope(member: str) -> str:
    """``<scope>`` or ``<scope>|<rest>`` with the scope moved into the default tenant."""
    scope, sep, rest = member.partition("|")
    return _new_scope(scope) + sep + rest


def adopt_redis(client: redis.Redis, namespace: str, *, batch: int = 1000) -> Adopted:
    """Rename the namespace's no-tenant STM keys into the default tenant's scope."""
    out = Adopted()
    with redis_errors():
        for key in client.scan_iter(match=f"{namespace}:user:*", count=batch):
            m = _LEGACY_USER_KEY.match(str(key))
            if m is None:
                continue
            target = f"{namespace}:user:{{{_new_scope(m['scope'])}}}:{m['rest']}"
            if client.renamenx(key, target):
                out.keys += 1
            else:
                out.conflicts.append(str(key))
        for suffix, keep in _SCOPED_MEMBER_SETS:
            out.members += _rewrite_zset(client, f"{namespace}:{suffix}", keep=keep)
        for suffix in _SCOPED_FIELD_HASHES:
            out.members += _rewrite_hash(client, f"{namespace}:{suffix}")
    return out


def _rewrite_zset(client: redis.Redis, key: str, *, keep: str) -> int:
    moved = 0
    for member, score in list(client.zscan_iter(key)):
        new = _member_scope(str(member))
        if new != member:
            pipe = client.pipeline(transaction=True)
            pipe.zadd(key, {new: score}, lt=keep == "lt", gt=keep == "gt")
            pipe.zrem(key, member)
            pipe.execute()
            moved += 1
    return moved


def _rewrite_hash(client: redis.Redis, key: str) -> int:
    moved = 0
    for name, value in list(client.hscan_iter(key)):
        new = _member_scope(str(name))
        if new != name:
            pipe = client.pipeline(transaction=True)
            pipe.hsetnx(key, new, value)
            pipe.hdel(key, name)
            pipe.execute()
            moved += 1
    return moved


def adopt_transcripts(root: Path) -> Adopted:
    """Move ``<root>/u/<user>/<session>.jsonl`` into ``<root>/t/default/u/<user>/``."""
    out = Adopted()
    legacy = root / "u"
    if not legacy.is_dir():
        return out
    for path in sorted(legacy.glob("*/*.jsonl")):
        target = root / "t" / DEFAULT_TENANT / "u" / path.parent.name / path.name
        if target.exists():
            out.conflicts.append(str(path))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
        out.files += 1
    for folder in sorted(legacy.iterdir(), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if not any(legacy.iterdir()):
        legacy.rmdir()
    return out
