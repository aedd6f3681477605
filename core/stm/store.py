"""Redis adapter for short-term memory: atomic upsert, indexed reads, delete, sweep.

Every write goes through one Lua script (value, indexes, dedup maps and expiry in one
call).  Reads are newest-first from a sorted-set index, then one pipelined HGETALL;
ids whose item is gone or expired are skipped, because index entries are only removed
by the sweep (Redis must not evict keys on its own: run it with ``noeviction``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, NamedTuple

import redis
from pydantic_core import to_jsonable_python
from redis.commands.core import Script

from memstrata.core.adapters.redis import redis_errors, run_script
from memstrata.core.errors import InvalidInput, PayloadTooLarge
from memstrata.core.ids import owner_tenant, validate_id
from memstrata.core.keys import (
    GlobalKeys,
    TenantKeys,
    UserKeys,
    index_suffixes,
    parse_user_scope,
    user_keys,
)
from memstrata.core.models.decision_record import DecisionRecord
from memstrata.core.models.memory import MemoryItem, MemoryStatus
from memstrata.core.stm.index_order import expire_second, score_of

log = logging.getLogger(__name__)


def lua(name: str) -> str:
    """A script of ``core/stm/lua/`` (the store package's scripts live there, not inline)."""
    return (resources.files("memstrata.core.stm") / "lua" / name).read_text(encoding="utf-8")


@lru_cache(maxsize=16_384)
def _json_list(raw: str) -> tuple[str, ...]:
    """A stored JSON list as a tuple; cached, as recall reads the same items again."""
    return tuple(json.loads(raw) or ())


@lru_cache(maxsize=16_384)
def _message_ids(raw_source: str) -> tuple[str, ...]:
    """The message ids of a stored ``source``; cached like :func:`_json_list`."""
    return tuple((json.loads(raw_source) or {}).get("message_ids") or ())


@lru_cache(maxsize=16_384)
def _stm_hit(
    mid: str, summary: str, key: str, fp: str, mtype: str, imp: str, upd: str, ents: str,
    src: str, task: str,
) -> StmHit:  # fmt: skip
    """One recall-read item from its stored fields; cached by those fields (any change to
    the item is a new key), as a session's recalls read the same items again, and the
    same hit objects let recall's per-item caches hash them cheaply (issue 17)."""
    return StmHit(mid, summary, key, fp, mtype, float(imp or 0), float(upd or 0),
                  _json_list(ents or "[]"), _message_ids(src or "{}"), task or None)  # fmt: skip


# built once: ``json.dumps`` with options builds a new encoder per call
_compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# the C string encoder that encoder uses (``ensure_ascii=False``): lists and maps of
# strings are joined around it, without the encoder's set-up per call (issue 17)
_string: Callable[[str], str] = json.encoder.encode_basestring


def _string_list(values: Sequence[str]) -> str:
    return "[" + ",".join(map(_string, values)) + "]"


def _encode_payload(fields: Mapping[str, str]) -> str:
    return "{" + ",".join(f"{_string(k)}:{_string(v)}" for k, v in fields.items()) + "}"


def _json_value(value: object) -> str:
    """A nested field (``detail``) as compact JSON, converted exactly as
    ``model_dump(mode="json")`` converts it: dates to strings, NaN to null, keys to str."""
    return _compact_json(to_jsonable_python(value, inf_nan_mode="null"))


def _number(value: float) -> str:
    """A float field as ``to_redis_hash`` writes it (``str`` of the float)."""
    if not math.isfinite(value):
        raise InvalidInput(f"not a finite number: {value!r}")
    return str(float(value))


def payload_fields(item: MemoryItem) -> dict[str, str]:
    """The hash fields an upsert sends for ``item``: every field the stored hash keeps,
    as :meth:`MemoryItem.to_redis_hash` writes it, plus the full index list ``_idx``;
    without ``id``'s owner (``user_id``, ``tenant_id``, the key says them), ``status``
    (STM holds active items only) and any field at its default."""
    fields = {
        "id": item.id,
        "session_id": item.session_id,
        "memory_type": item.memory_type.value,
        "summary": item.summary,
        "confidence": _number(item.confidence),
        "importance": _number(item.importance),
        "created_at": _number(item.created_at),
        "updated_at": _number(item.updated_at),
        "last_access_at": _number(item.last_access_at),
        "expires_at": _number(item.expires_at),
        "fingerprint": item.fingerprint,
        "canonical_fact_key": item.canonical_fact_key,
    }
    for key, value in (("task_id", item.task_id), ("agent_id", item.agent_id),
                       ("owner_agent", item.owner_agent), ("shared_scope", item.shared_scope)):
        if value is not None:
            fields[key] = value
    if item.subtype != "general":
        fields["subtype"] = item.subtype
    if item.version != 1:
        fields["version"] = str(item.version)
    if item.mention_count != 1:
        fields["mention_count"] = str(item.mention_count)
    if item.detail:
        fields["detail"] = _json_value(item.detail)
    if item.entities:
        fields["entities"] = _string_list(item.entities)
    if item.tags:
        fields["tags"] = _string_list(item.tags)
    if item.history:
        fields["history"] = _compact_json([h.model_dump(mode="json") for h in item.history])
    fields["seen_sessions"] = _string_list(item.seen_sessions or [item.session_id])
    # provenance without its defaults (kind "conversation", empty id lists)
    src = item.source
    parts = [f'"kind":{_string(src.kind)}'] if src.kind not in ("", "conversation") else []
    if src.message_ids:
        parts.append(f'"message_ids":{_string_list(src.message_ids)}')
    if src.tool_call_ids:
        parts.append(f'"tool_call_ids":{_string_list(src.tool_call_ids)}')
    fields["source"] = "{" + ",".join(parts) + "}"
    fields["_idx"] = _string_list(
        index_suffixes(session_id=item.session_id, task_id=item.task_id, entities=item.entities)
    )
    return fields


# What a compact item hash leaves out (docs/KEYS.md "Compact items"): every field at its
# default, and what the key says (id, owner) or STM implies (status).  The upsert script
# (``expand`` / ``compact`` in upsert.lua) applies the same rules.
_ITEM_DEFAULTS = {
    "version": "1", "mention_count": "1", "history": "[]", "entities": "[]", "tags": "[]",
    "detail": "{}", "subtype": "general", "status": MemoryStatus.ACTIVE.value,
}  # fmt: skip


def restore_item(
    row: dict[str, str], *, memory_id: str, user_id: str, tenant_id: str | None
) -> dict[str, str]:
    """A stored item hash with every field :meth:`MemoryItem.from_redis_hash` needs.

    Hashes written before compaction carry every field already; nothing is overridden.
    ``tenant_id`` is filled only when the reader named one (no tenant reads back as none).
    """
    full = dict(_ITEM_DEFAULTS)
    full.update(row)
    full.setdefault("id", memory_id)
    full.setdefault("user_id", user_id)
    if tenant_id is not None:
        full.setdefault("tenant_id", tenant_id)
    if full.get("source") in (None, "{}", "[]"):  # all provenance at its defaults
        full["source"] = '{"kind":"conversation"}'
    if "session_id" in full:
        full.setdefault("seen_sessions", _compact_json([full["session_id"]]))
    if "updated_at" in full:
        full.setdefault("created_at", full["updated_at"])
        full.setdefault("last_access_at", full["updated_at"])
    return full


@dataclass(frozen=True)
class UpsertResult:
    op: str  # inserted | merged | updated | unchanged | stale
    memory_id: str
    version: int
    evicted: tuple[str, ...] = ()
    owner_items: int = 0  # the owner's live STM items after the write


@dataclass(frozen=True)
class DedupHit:
    """What the store already holds for a candidate's canonical key or fingerprint."""

    memory_id: str
    fingerprint: str
    message_ids: tuple[str, ...]
    by: str  # canon | fp
    mention_count: int = 1


@dataclass(frozen=True)
class RecallMark:
    """What one recall leaves behind: the session's sufficiency flag and a hit per memory."""

    user_id: str
    tenant_id: str | None
    session_id: str
    flag: str  # ok | insufficient
    members: tuple[str, ...]  # "<source>:<id>" of every memory the recall returned


# (user_id, tenant_id, session_id, decision): one recorded write decision
DecisionRow = tuple[str, str | None, str, DecisionRecord]


class StmStore:
    """Short-term memory of all users in one Redis (DESIGN §3).

    Every write to an owner's STM keys goes through a method of this class (items,
    indexes and expiry through one Lua script each; write decisions, session cleanup
    and recall bookkeeping through the methods below); the client stays private, so no
    caller can write an index without its item.  The lifecycle layer's own hashes are
    written by :class:`core.stm.lifecycle.LifecycleStore`.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str,
        session_cap: int = 50,
        history_cap: int = 5,
        user_cap: int = 0,
        tenant_cap: int = 0,
        max_summary_chars: int = 400,
        max_detail_chars: int = 4000,
        durable_subtypes: frozenset[str] = frozenset(),
    ) -> None:
        if not client.get_connection_kwargs().get("decode_responses"):
            # its scripts' replies are parsed as text: bytes failed deep in a JSON decode
            raise InvalidInput("StmStore needs a Redis client made with decode_responses=True")
        self._r = client
        self.namespace = validate_id(namespace, kind="key namespace")
        self.session_cap = session_cap
        self.history_cap = history_cap
        self.user_cap = user_cap  # 0: no per-owner cap
        self.tenant_cap = tenant_cap  # 0: no per-tenant cap (and no accounting)
        self.max_summary_chars = max_summary_chars
        self.max_detail_chars = max_detail_chars
        # the session cap evicts these last: they wait for their session's end (episodes)
        self._durable = json.dumps(sorted(durable_subtypes))
        common = lua("common.lua")
        upsert = common + lua("upsert.lua")  # defines upsert_item; an entry point calls it
        self._upsert: Script = client.register_script(upsert + lua("upsert_one.lua"))
        self._upsert_batch: Script = client.register_script(upsert + lua("upsert_batch.lua"))
        self._delete: Script = client.register_script(common + lua("delete.lua"))
        self._sweep: Script = client.register_script(common + lua("sweep.lua"))
        self._evict: Script = client.register_script(common + lua("evict.lua"))
        self._tenant_count: Script = client.register_script(lua("tenant_count.lua"))
        self._recall_read: Script = client.register_script(common + lua("recall_read.lua"))
        self._decisions: Script = client.register_script(lua("decisions.lua"))
        self.gkeys = GlobalKeys(self.namespace)

    def keys(self, user_id: str, tenant_id: str | None = None) -> UserKeys:
        return user_keys(self.namespace, user_id, tenant_id)

    # ------------------------------------------------------------------ writes
    def _encode(self, item: MemoryItem) -> str:
        """The upsert script's payload: the item's hash fields as one JSON object.

        Built from the item's attributes, not ``model_dump`` (issue 17: about a fifth of
        the write path's Python time was this), and without the fields the script would only
        compact away again (what the key says, every default; docs/KEYS.md "Compact
        items"): the script's ``expand`` puts defaults back where it merges."""
        if item.status is not MemoryStatus.ACTIVE:
            raise InvalidInput("only active items are written to STM")
        if len(item.summary) > self.max_summary_chars:
            raise PayloadTooLarge(
                f"summary of {len(item.summary)} chars over the {self.max_summary_chars} limit"
            )
        fields = payload_fields(item)
        if len(fields.get("detail", "")) > self.max_detail_chars:
            raise PayloadTooLarge(f"detail over the {self.max_detail_chars} char limit")
        return _encode_payload(fields)

    def upsert(self, item: MemoryItem) -> UpsertResult:
        """Insert, merge or version-bump one item atomically."""
        return self.upsert_many([item])[0]

    def upsert_many(self, items: Sequence[MemoryItem]) -> list[UpsertResult]:
        """Upsert several items in one pipelined round trip (each still atomic on its own)."""
        payloads = [(self.keys(item.user_id, item.tenant_id), self._encode(item)) for item in items]
        if not payloads:
            return []

        def send() -> list[Any]:
            pipe = self._r.pipeline(transaction=False)
            for k, payload in payloads:
                # plain EVALSHA: redis-py's Script object adds a SCRIPT EXISTS per pipeline
                pipe.evalsha(self._upsert.sha, 1, k.prefix, payload, self.session_cap,
                             self.history_cap, self.user_cap, self._durable)  # fmt: skip
            for (k, _payload), item in zip(payloads, items, strict=True):
                pipe.zadd(self.gkeys.sweep_users, {k.scope: expire_second(item.expires_at)},
                          lt=True)  # fmt: skip
            return pipe.execute()

        with redis_errors():
            try:
                raw = send()
            except redis.exceptions.NoScriptError:  # a restarted or flushed Redis
                self._r.script_load(self._upsert.script)
                raw = send()
        out = []
        for res in raw[: len(items)]:
            op, memory_id, version, owner_items, *evicted = res
            out.append(UpsertResult(op, memory_id, int(version), tuple(evicted), int(owner_items)))
        if self.tenant_cap > 0:
            owners = [(item.tenant_id, item.user_id) for item in items]
            self._account({o: r.owner_items for o, r in zip(owners, out, strict=True)})
        return out

    def upsert_batch(
        self, items: Sequence[MemoryItem], *, per_call: int = 64
    ) -> list[UpsertResult]:
        """:meth:`upsert_many` with one script call per owner (at most ``per_call`` items
        each) and one sweep-index update per owner, in one round trip (issue 17).

        Each owner's items are upserted in their order, each as :meth:`upsert` would:
        the same replies, the same state; only the number of commands changes.
        """
        if not items:
            return []
        by_owner: dict[tuple[str, str | None], list[int]] = {}
        for n, item in enumerate(items):
            by_owner.setdefault((item.user_id, item.tenant_id), []).append(n)
        calls: list[tuple[UserKeys, list[int], list[str]]] = []
        for (user_id, tenant_id), idxs in by_owner.items():
            k = self.keys(user_id, tenant_id)
            for i in range(0, len(idxs), per_call):
                part = idxs[i : i + per_call]
                calls.append((k, part, [self._encode(items[n]) for n in part]))

        def send() -> list[Any]:
            pipe = self._r.pipeline(transaction=False)
            for k, _part, payloads in calls:
                pipe.evalsha(self._upsert_batch.sha, 1, k.prefix, self.session_cap,
                             self.history_cap, self.user_cap, self._durable, *payloads)  # fmt: skip
            for (user_id, tenant_id), idxs in by_owner.items():  # ZADD LT: the earliest counts
                soonest = expire_second(min(items[n].expires_at for n in idxs))
                pipe.zadd(self.gkeys.sweep_users, {self.keys(user_id, tenant_id).scope: soonest},
                          lt=True)  # fmt: skip
            return pipe.execute()

        with redis_errors():
            try:
                raw = send()
            except redis.exceptions.NoScriptError:  # a restarted or flushed Redis
                self._r.script_load(self._upsert_batch.script)
                raw = send()
        out: list[UpsertResult | None] = [None] * len(items)
        for (_k, part, _payloads), replies in zip(calls, raw[: len(calls)], strict=True):
            for n, res in zip(part, replies, strict=True):
                op, memory_id, version, owner_items, *evicted = res
                out[n] = UpsertResult(op, memory_id, int(version), tuple(evicted), int(owner_items))
        results = [r for r in out if r is not None]
        if self.tenant_cap > 0:
            owners = [(item.tenant_id, item.user_id) for item in items]
            self._account({o: r.owner_items for o, r in zip(owners, results, strict=True)})
        return results

    def delete(
        self, user_id: str, memory_ids: Sequence[str], *, tenant_id: str | None = None
    ) -> int:
        """Delete items and all their index entries; returns how many existed."""
        ids = [validate_id(m, kind="memory_id") for m in memory_ids]
        if not ids:
            return 0
        with redis_errors():
            n, left = self._delete(keys=[self.keys(user_id, tenant_id).prefix], args=ids)
        if self.tenant_cap > 0:
            self._account({(tenant_id, user_id): int(left)})
        return int(n)

    # ------------------------------------------------------------------ per-tenant cap
    def _account(self, counts: Mapping[tuple[str | None, str], int]) -> None:
        """Record each owner's item count for its tenant; enforce the per-tenant cap.

        The cap's order (docs/OPERATIONS.md "Memory bounds"): while the tenant holds more
        than ``tenant_cap`` items, its heaviest user gives up items in the per-owner order
        (least recently updated, least important of those first).  The counts are set,
        not added, from what each owner script saw, so they heal with every write.
        """
        by_tenant: dict[str, list[str | int]] = {}
        for (tenant_id, user_id), n in counts.items():
            by_tenant.setdefault(owner_tenant(tenant_id), []).extend([user_id, n])
        tenants = [(TenantKeys(self.namespace, t), args) for t, args in by_tenant.items()]

        def send() -> list[Any]:  # every tenant of the batch in one round trip
            pipe = self._r.pipeline(transaction=False)
            for tk, args in tenants:
                pipe.evalsha(self._tenant_count.sha, 2, tk.users, tk.items, *args)
            return pipe.execute()

        with redis_errors():
            try:
                replies = send()
            except redis.exceptions.NoScriptError:  # a restarted or flushed Redis
                self._r.script_load(self._tenant_count.script)
                replies = send()
        for (tk, _args), (total, heaviest, held) in zip(tenants, replies, strict=True):
            for _round in range(8):  # each round evicts what it can; a later write goes on
                over = int(total) - self.tenant_cap
                if over <= 0 or not heaviest:
                    break
                with redis_errors():
                    left, *_evicted = self._evict(
                        keys=[self.keys(str(heaviest), tk.tenant_id).prefix],
                        args=[min(over, int(held))],
                    )
                    total, heaviest, held = self._tenant_count(
                        keys=[tk.users, tk.items], args=[str(heaviest), int(left)]
                    )

    def tenant_items(self, tenant_id: str | None) -> int:
        """The tenant's STM items as the per-tenant cap counts them (0 when the cap is off)."""
        tk = TenantKeys(self.namespace, owner_tenant(tenant_id))
        with redis_errors():
            return int(self._r.get(tk.items) or 0)

    def forget_owner_count(self, user_id: str, *, tenant_id: str | None) -> None:
        """Drop an owner from its tenant's accounting (scoped erase)."""
        with redis_errors():
            self._tenant_count(
                keys=[TenantKeys(self.namespace, owner_tenant(tenant_id)).users,
                      TenantKeys(self.namespace, owner_tenant(tenant_id)).items],
                args=[user_id, 0],
            )  # fmt: skip

    def session_members(
        self, user_id: str, session_id: str, *, tenant_id: str | None = None
    ) -> list[str]:
        """Every memory id in the session's index (expired or gone ones included), oldest
        first: the order a session's summary card lists its items in."""
        key = self.keys(user_id, tenant_id).session(session_id)
        with redis_errors():  # the scores are negated times (index_order.py): the tail first
            return [str(m) for m in self._r.zrange(key, 0, -1, desc=True)]

    def drop_session(
        self,
        user_id: str,
        session_id: str,
        *,
        tenant_id: str | None = None,
        decisions: bool = False,
    ) -> None:
        """Delete the session's index (and with ``decisions``, its recorded write decisions).

        Items are deleted with :meth:`delete` first; an item the session shares with
        others keeps its other indexes and its ``_idx`` (removing an entry from a deleted
        index is a no-op for the scripts).
        """
        k = self.keys(user_id, tenant_id)
        doomed = [k.session(session_id)] + ([k.decisions(session_id)] if decisions else [])
        with redis_errors():
            self._r.delete(*doomed)

    # ------------------------------------------------------------------ write decisions
    def record_decisions(self, rows: Sequence[DecisionRow], *, ttl_s: int) -> None:
        """Record write decisions in their compact form: one script call per session hash,
        all in one pipelined round trip; each hash expires ``ttl_s`` seconds after its last
        write.

        Write-once (``HSETNX``): a redelivered turn must not rewrite why it was (not) stored.
        """
        if not rows:
            return
        by_key: dict[str, list[str]] = {}
        for user_id, tenant_id, session_id, record in rows:
            key = self.keys(user_id, tenant_id).decisions(session_id)
            by_key.setdefault(key, [str(ttl_s)]).extend((record.decision_id, record.encode()))

        def send() -> None:
            pipe = self._r.pipeline(transaction=False)
            for key, args in by_key.items():
                # plain EVALSHA: redis-py's Script object adds a SCRIPT EXISTS per pipeline
                pipe.evalsha(self._decisions.sha, 1, key, *args)
            pipe.execute()

        with redis_errors():
            try:
                send()
            except redis.exceptions.NoScriptError:  # a restarted or flushed Redis
                self._r.script_load(self._decisions.script)
                send()  # write-once (HSETNX): records the first attempt wrote stay as they are

    def decisions(
        self, user_id: str, session_id: str, *, tenant_id: str | None = None
    ) -> list[DecisionRecord]:
        """Every recorded write decision of a session, in turn order, as stored (either
        format); ``core.ingest.pipeline.read_decisions`` expands them from L0."""
        validate_id(session_id, kind="session_id")
        with redis_errors():
            raw = self._r.hgetall(self.keys(user_id, tenant_id).decisions(session_id))
        out = []
        for k, v in raw.items():
            try:
                out.append(DecisionRecord.decode(str(k), str(v), session_id=session_id))
            except ValueError as exc:  # a format this version does not know (a newer
                # writer during a rolling upgrade): skipped, the others are still read
                log.warning("decision %s of session %s not read: %s", k, session_id, exc)
        out.sort(key=lambda d: (d.at, d.decision_id))
        return out

    # ------------------------------------------------------------------ dedup lookups
    def lookup(
        self, user_id: str, pairs: Sequence[tuple[str, str]], *, tenant_id: str | None = None
    ) -> list[DedupHit | None]:
        """For each (canonical_fact_key, fingerprint), the item already holding it, if any."""
        if not pairs:
            return []
        k = self.keys(user_id, tenant_id)
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            pipe.hmget(k.canon, [c for c, _ in pairs])
            pipe.hmget(k.fp, [f for _, f in pairs])
            canon_ids, fp_ids = pipe.execute()
            wanted = {m for m in list(canon_ids) + list(fp_ids) if m}
            pipe = self._r.pipeline(transaction=False)
            order = sorted(wanted)
            for mid in order:
                pipe.hmget(k.item(mid), ["fingerprint", "source", "history", "mention_count"])
            fetched = dict(zip(order, pipe.execute(), strict=True))
        out: list[DedupHit | None] = []
        for cid, fid in zip(canon_ids, fp_ids, strict=True):
            mid, by = (cid, "canon") if cid else (fid, "fp")
            row = fetched.get(mid) if mid else None
            if not mid or row is None or row[0] is None:
                out.append(None)
                continue
            msgs = list(json.loads(row[1] or "{}").get("message_ids") or [])
            for h in json.loads(row[2] or "[]") or []:
                msgs.extend(h.get("message_ids") or [])
            out.append(DedupHit(mid, row[0], tuple(msgs), by, int(row[3] or 1)))
        return out

    # ------------------------------------------------------------------ reads
    def get(
        self, user_id: str, memory_id: str, *, tenant_id: str | None = None
    ) -> MemoryItem | None:
        items = self.get_many(user_id, [memory_id], include_expired=True, tenant_id=tenant_id)
        return items[0] if items else None

    def get_many(
        self,
        user_id: str,
        memory_ids: Sequence[str],
        *,
        now: float | None = None,
        include_expired: bool = False,
        tenant_id: str | None = None,
    ) -> list[MemoryItem]:
        """Batch get in the given order, skipping ids that are gone (or expired at ``now``)."""
        k = self.keys(user_id, tenant_id)
        ids = [validate_id(m, kind="memory_id") for m in memory_ids]
        if not ids:
            return []
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for mid in ids:
                pipe.hgetall(k.item(mid))
            rows = pipe.execute()
        out = []
        for mid, row in zip(ids, rows, strict=True):
            if not row:
                continue
            item = MemoryItem.from_redis_hash(
                restore_item(row, memory_id=mid, user_id=user_id, tenant_id=tenant_id)
            )
            if not include_expired and now is not None and item.expires_at <= now:
                continue
            out.append(item)
        return out

    def _by_index(
        self, user_id: str, key: str, limit: int, now: float | None, tenant_id: str | None
    ) -> list[MemoryItem]:
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be within 1..1000")
        with redis_errors():  # newest first: the scores are negated times (index_order.py)
            ids = [str(m) for m in self._r.zrange(key, 0, limit - 1)]
        return self.get_many(user_id, ids, now=now, tenant_id=tenant_id)

    def recent(
        self,
        user_id: str,
        *,
        limit: int = 20,
        now: float | None = None,
        tenant_id: str | None = None,
    ) -> list[MemoryItem]:
        k = self.keys(user_id, tenant_id)
        return self._by_index(user_id, k.recent, limit, now, tenant_id)

    def by_session(
        self,
        user_id: str,
        session_id: str,
        *,
        limit: int = 20,
        now: float | None = None,
        tenant_id: str | None = None,
    ) -> list[MemoryItem]:
        validate_id(session_id, kind="session_id")
        k = self.keys(user_id, tenant_id)
        return self._by_index(user_id, k.session(session_id), limit, now, tenant_id)

    def by_task(
        self,
        user_id: str,
        task_id: str,
        *,
        limit: int = 20,
        now: float | None = None,
        tenant_id: str | None = None,
    ) -> list[MemoryItem]:
        validate_id(task_id, kind="task_id")
        k = self.keys(user_id, tenant_id)
        return self._by_index(user_id, k.task(task_id), limit, now, tenant_id)

    def by_entity(
        self,
        user_id: str,
        entity: str,
        *,
        limit: int = 20,
        now: float | None = None,
        tenant_id: str | None = None,
    ) -> list[MemoryItem]:
        k = self.keys(user_id, tenant_id)
        return self._by_index(user_id, k.entity(entity), limit, now, tenant_id)

    def by_type(
        self,
        user_id: str,
        memory_type: str,
        *,
        limit: int = 20,
        now: float | None = None,
        tenant_id: str | None = None,
    ) -> list[MemoryItem]:
        from memstrata.core.models.memory import MemoryType

        try:
            mtype = MemoryType(memory_type)
        except ValueError as exc:
            raise InvalidInput(f"unknown memory type {memory_type!r}") from exc
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be within 1..1000")
        # no index by type (an entry per item for one CLI view): filter the recent index,
        # newest first, reading one field per item (bounded by the per-user cap)
        k = self.keys(user_id, tenant_id)
        with redis_errors():
            ids = [str(m) for m in self._r.zrange(k.recent, 0, -1)]
            pipe = self._r.pipeline(transaction=False)
            for mid in ids:
                pipe.hget(k.item(mid), "memory_type")
            types = pipe.execute()
        wanted = [mid for mid, t in zip(ids, types, strict=True) if t == mtype.value]
        return self.get_many(user_id, wanted[:limit], now=now, tenant_id=tenant_id)

    def read_for_recall(
        self,
        user_id: str,
        *,
        tenant_id: str | None,
        session_id: str,
        task_id: str | None,
        entities: Sequence[str],
        limit: int,
        now: float,
        with_flag: bool = False,
        also_get: Sequence[str] = (),
    ) -> RecallRead:
        """Session, task, entity and recent indexes in one round trip, only ranking fields,
        and (``with_flag``) the session's last-recall flag.

        The recall hot path: one EVALSHA instead of a ZRANGE and a pipeline of
        HGETALLs per index, and no full model validation per item.  ``also_get``: other
        string keys of the same owner (the profile cache's) read in the same call, their
        values in :attr:`RecallRead.values`; a key of another owner is refused.
        """
        validate_id(session_id, kind="session_id")
        k = self.keys(user_id, tenant_id)
        try:
            gets = [k.suffix(key) for key in also_get]
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        p = len(k.prefix)
        suffixes = [k.session(session_id)[p:]]
        if task_id:
            suffixes.append(k.task(validate_id(task_id, kind="task_id"))[p:])
        suffixes += [k.entity(e)[p:] for e in entities]
        # last, the user's most recent items: a fresh session still sees its recent past
        suffixes.append(k.recent[p:])
        flag_suffix = k.last_recall(session_id)[p:] if with_flag else ""
        # the lean call: redis-py's command wrapper and packer were 3.5-6 % of an STM-only
        # recall (docs/PERFORMANCE.md, 2026-12-07 fourth sitting)
        args: list[str | int | float] = [limit, now, flag_suffix, len(gets), *gets, *suffixes]
        raw = run_script(self._r, self._recall_read, [k.prefix], args)
        flag = raw[0] or None
        first = 1 + len(gets)
        # each item's 10 ranking fields, then its expiry (checked by the script)
        hits = [_stm_hit(*raw[i : i + 10]) for i in range(first, len(raw), 11)]
        return RecallRead(flag=flag, hits=hits, values=tuple(raw[1:first]))

    def record_recalls(
        self, marks: Sequence[RecallMark], *, flag_ttl_s: int, access_ttl_s: int
    ) -> None:
        """Recall bookkeeping in one pipelined round trip: each session's last-recall flag
        (expires after ``flag_ttl_s``) and one hit per returned memory in the owner's
        ``access`` ZSET (expires ``access_ttl_s`` after the last recall).

        ``marks`` in recall order are coalesced first: a session's flag is written once
        (its last recall's), a memory's hits as one ``ZINCRBY`` by their count, an owner's
        expiry once, the same end state as a command per mark at a fraction of the
        commands when one session recalls often (a busy agent; issue 17)."""
        if not marks:
            return
        flags: dict[tuple[str, str, str], str] = {}
        hits: dict[tuple[str, str], dict[str, int]] = {}
        for m in marks:
            tenant = owner_tenant(m.tenant_id)  # no tenant and the default one: one owner
            flags[(tenant, m.user_id, m.session_id)] = m.flag  # the last one wins
            counts = hits.setdefault((tenant, m.user_id), {})
            for member in m.members:
                counts[member] = counts.get(member, 0) + 1
        with redis_errors():
            pipe = self._r.pipeline(transaction=False)
            for (tenant_id, user_id, session_id), flag in flags.items():
                k = self.keys(user_id, tenant_id)
                pipe.set(k.last_recall(session_id), flag, ex=flag_ttl_s)
            for (tenant_id, user_id), counts in hits.items():
                k = self.keys(user_id, tenant_id)
                for member, n in counts.items():
                    pipe.zincrby(k.access, n, member)
                pipe.expire(k.access, access_ttl_s)
            pipe.execute()

    # ------------------------------------------------------------------ sweep
    def user_scopes(self) -> list[str]:
        """Every user scope that holds STM items (the ``sweep:users`` hint), unsorted."""
        with redis_errors():
            return [str(s) for s in self._r.zrange(self.gkeys.sweep_users, 0, -1)]

    def expired_ids(
        self, user_id: str, *, now: float, limit: int, tenant_id: str | None = None
    ) -> list[str]:
        """The ids a sweep at ``now`` would remove first, at most ``limit`` (a dry run)."""
        key = self.keys(user_id, tenant_id).expire
        with redis_errors():  # what sweep.lua reads: negated expiries >= -now, oldest first
            raw = self._r.zrevrangebyscore(key, "(0", score_of(now), start=0, num=limit)
        return [str(m) for m in raw]

    def sweep_user(
        self, user_id: str, *, now: float, limit: int, tenant_id: str | None = None
    ) -> tuple[int, float | None]:
        """Remove up to ``limit`` expired items of one user; returns (removed, next expiry)."""
        with redis_errors():
            removed, nxt, left = self._sweep(
                keys=[self.keys(user_id, tenant_id).prefix], args=[now, limit]
            )
        if self.tenant_cap > 0:
            self._account({(tenant_id, user_id): int(left)})
        return int(removed), (float(nxt) if nxt else None)

    def sweep(self, *, now: float, max_items: int, per_user: int = 500) -> SweepReport:
        """Sweep users whose earliest expiry has passed, until ``max_items`` are removed.

        The global ``sweep:users`` zset is a hint kept by writers (``ZADD LT``); after a
        user is swept its score is reset to the next expiry, or the user is dropped.  Up
        to 256 due users are swept per round trip (one pipelined script call each).
        """
        removed = users = 0
        gk = self.gkeys.sweep_users
        while removed < max_items:
            with redis_errors():
                due = [str(s) for s in self._r.zrangebyscore(gk, "-inf", now, start=0, num=256)]
            if not due:
                break
            budgets: list[tuple[str, int]] = []
            left = max_items - removed
            for scope in due:
                budget = min(per_user, left)
                if budget <= 0:
                    break
                budgets.append((scope, budget))
                left -= budget
            with redis_errors():
                pipe = self._r.pipeline(transaction=False)
                for scope, budget in budgets:
                    user_id, tenant_id = parse_user_scope(scope)
                    self._sweep(
                        keys=[self.keys(user_id, tenant_id).prefix], args=[now, budget], client=pipe
                    )
                replies = pipe.execute()
            progressed = False
            with redis_errors():
                pipe = self._r.pipeline(transaction=False)
                counts: dict[tuple[str | None, str], int] = {}
                for (scope, budget), (n_raw, nxt_raw, left_raw) in zip(
                    budgets, replies, strict=True
                ):
                    n = int(n_raw)
                    if n:
                        user_id, tenant_id = parse_user_scope(scope)
                        counts[(tenant_id, user_id)] = int(left_raw)
                    removed += n
                    users += 1
                    progressed = progressed or n > 0
                    nxt = float(nxt_raw) if nxt_raw else None
                    if nxt is None:
                        pipe.zrem(gk, scope)
                    elif nxt > now or n < budget:
                        pipe.zadd(gk, {scope: nxt})
                pipe.execute()
            if counts and self.tenant_cap > 0:
                self._account(counts)
            if not progressed:
                break
        return SweepReport(removed=removed, users=users)


class StmHit(NamedTuple):
    """The fields of an STM item that recall ranks and renders (a tuple: recall builds
    ~50 per call, and a frozen dataclass costs a ``__setattr__`` per field)."""

    memory_id: str
    summary: str
    canonical_fact_key: str
    fingerprint: str
    memory_type: str
    importance: float
    updated_at: float
    entities: tuple[str, ...]
    message_ids: tuple[str, ...]
    task_id: str | None


@dataclass(frozen=True)
class RecallRead:
    flag: str | None
    hits: list[StmHit]
    values: tuple[str | None, ...] = ()  # of ``also_get``, in its order


@dataclass(frozen=True)
class SweepReport:
    removed: int
    users: int
