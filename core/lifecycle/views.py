"""Bulk reads of STM for the lifecycle jobs: users, their items as light views, hits.

The promotion scan reads every live item, so it reads only the fields the policy needs
into :class:`ItemView`, not the full pydantic :class:`MemoryItem`.  One read-only script
per user returns the user's live undecided items, lifecycle records and recall hits as
ONE JSON string (many users per pipelined round trip): parsing one bulk reply per user
instead of 17 RESP strings per item, and filtering never-promoted kinds and settled
items in Redis, made the scan ~4x faster with redis-py's pure-Python parser
(``memstrata bench sweep``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from core.adapters.redis import redis_errors
from core.lifecycle.keys import LifecycleKeys
from core.lifecycle.policy import ItemView
from core.lifecycle.states import Record
from core.stm.keys import parse_user_scope
from core.stm.store import StmStore

FIELDS = (
    "id", "user_id", "tenant_id", "session_id", "memory_type", "subtype", "summary",
    "canonical_fact_key", "fingerprint", "importance", "created_at", "updated_at",
    "mention_count", "seen_sessions", "entities", "detail", "source",
)  # fmt: skip

# Two filters run in Redis, so most items never cross the wire: items whose kind the
# policy never promotes (counted, not sent) and items already settled for their current
# fingerprint (queued, promoted, merged, dropped, retracted).
_READ_USER = """
-- KEYS: user prefix, lifecycle state hash, access zset
-- ARGV: now, JSON {types = [...], subtypes = [...]} never promoted, fields...
local ids = redis.call('ZRANGEBYSCORE', KEYS[1] .. 'expire', '(' .. ARGV[1], '+inf')
local never = cjson.decode(ARGV[2])
local skip_type, skip_sub = {}, {}
for _, t in ipairs(never.types) do skip_type[t] = true end
for _, t in ipairs(never.subtypes) do skip_sub[t] = true end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local flat = redis.call('HGETALL', KEYS[2])
local settled = {}
for i = 1, #flat, 2 do
  local ok, rec = pcall(cjson.decode, flat[i + 1])
  if ok and rec[1] ~= 'new' then settled[flat[i]] = rec[2] end
end
local rows, n_never, n_settled = {}, 0, 0
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', KEYS[1] .. 'item:' .. id, unpack(fields))
  if r[1] then
    if skip_type[r[5]] or skip_sub[r[6]] then
      n_never = n_never + 1
    elseif settled[id] and settled[id] == r[9] then
      n_settled = n_settled + 1
    else
      rows[#rows + 1] = r
    end
  end
end
local hits = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
return cjson.encode({rows, flat, hits, n_never, n_settled})
"""


@dataclass
class UserBatch:
    """One user's live items, lifecycle records and recall hits, read together."""

    user_id: str
    tenant_id: str | None
    items: list[ItemView]
    records: dict[str, Record]
    hits: dict[str, int]
    never: int = 0  # items of a kind the policy never promotes (filtered in Redis)
    settled: int = 0  # items already settled for their fingerprint (filtered in Redis)


def _list(raw: object) -> tuple[str, ...]:
    if not raw or not isinstance(raw, str):
        return ()
    value = json.loads(raw)
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def parse_view(row: Sequence[object]) -> ItemView:
    """An :class:`ItemView` from an HMGET row in :data:`FIELDS` order (false = missing)."""
    (mid, user, tenant, session, mtype, subtype, summary, canon, fp, imp, created, updated,
     mentions, seen, entities, detail_raw, source_raw) = row  # fmt: skip
    detail = json.loads(detail_raw) if isinstance(detail_raw, str) else {}
    detail = detail if isinstance(detail, dict) else {}
    source = json.loads(source_raw) if isinstance(source_raw, str) else {}
    msgs = source.get("message_ids") if isinstance(source, dict) else None
    return ItemView(
        memory_id=str(mid),
        user_id=str(user),
        tenant_id=str(tenant) if tenant else None,
        session_id=str(session),
        memory_type=str(mtype),
        subtype=str(subtype or "general"),
        summary=str(summary or ""),
        canonical_fact_key=str(canon),
        fingerprint=str(fp),
        importance=float(imp or 0.0),  # type: ignore[arg-type]
        created_at=float(created or 0.0),  # type: ignore[arg-type]
        updated_at=float(updated or 0.0),  # type: ignore[arg-type]
        mention_count=int(mentions or 1),  # type: ignore[call-overload]
        seen_sessions=_list(seen),
        entities=_list(entities),
        topic=str(detail["topic"]) if detail.get("topic") else None,
        value=detail.get("value"),
        message_ids=tuple(str(m) for m in msgs) if isinstance(msgs, list) else (),
    )


def user_scopes(store: StmStore, *, after: str = "", page: int = 1000) -> Iterator[str]:
    """Every user scope that holds STM items (the sweep's ``sweep:users`` set), sorted."""
    with redis_errors():
        scopes = sorted(str(s) for s in store.r.zrange(store.gkeys.sweep_users, 0, -1))
    start = 0
    if after:
        start = next((i for i, s in enumerate(scopes) if s > after), len(scopes))
    for i in range(start, len(scopes), page):
        yield from scopes[i : i + page]


def fetch_users(
    store: StmStore,
    scopes: Sequence[str],
    *,
    now: float,
    never_types: Iterable[str] = (),
    never_subtypes: Iterable[str] = (),
) -> list[str]:
    """The raw replies of the read script for each user: I/O only, so a prefetch thread
    can run it while the caller parses and decides the previous users (GIL released in
    the socket wait)."""
    never = json.dumps({"types": sorted(never_types) or [""],
                        "subtypes": sorted(never_subtypes) or [""]})  # fmt: skip
    lk = LifecycleKeys(store.namespace)
    script = store.r.register_script(_READ_USER)
    with redis_errors():
        pipe = store.r.pipeline(transaction=False)
        for scope in scopes:
            user, tenant = parse_user_scope(scope)
            keys = [store.keys(user, tenant).prefix, lk.state(user, tenant),
                    lk.access(user, tenant)]  # fmt: skip
            script(keys=keys, args=[repr(now), never, *FIELDS], client=pipe)
        return [str(r) for r in pipe.execute()]


def parse_users(scopes: Sequence[str], replies: Sequence[str]) -> list[UserBatch]:
    """:class:`UserBatch` per user from :func:`fetch_users` replies."""
    out = []
    for scope, raw in zip(scopes, replies, strict=True):
        user, tenant = parse_user_scope(scope)
        rows, state, hits_flat, n_never, n_settled = json.loads(raw)
        items = [parse_view(row) for row in rows] if isinstance(rows, list) else []
        state = state if isinstance(state, list) else []
        records = {str(state[i]): Record.loads(str(state[i + 1])) for i in range(0, len(state), 2)}
        hits_flat = hits_flat if isinstance(hits_flat, list) else []
        hits = {}
        for i in range(0, len(hits_flat), 2):
            src, _, mid = str(hits_flat[i]).partition(":")
            if src == "redis_stm":
                hits[mid] = int(float(hits_flat[i + 1]))
        out.append(UserBatch(user, tenant, items, records, hits, int(n_never), int(n_settled)))
    return out


def read_users(
    store: StmStore,
    scopes: Sequence[str],
    *,
    now: float,
    never_types: Iterable[str] = (),
    never_subtypes: Iterable[str] = (),
) -> list[UserBatch]:
    """Live undecided items (expires_at > now), lifecycle records and recall hits per user.

    Items of a never-promoted kind or already settled are counted, not returned.
    """
    replies = fetch_users(store, scopes, now=now, never_types=never_types,
                          never_subtypes=never_subtypes)  # fmt: skip
    return parse_users(scopes, replies)
