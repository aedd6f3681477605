"""Scoped erase: remove one owner's data from every layer (issue #14 item 7).

``erase_owner(runtime, tenant_id=T, user_id=U)`` is what ``memstrata erase`` and the
service API call.  The owner is ``(tenant, user)`` as everywhere (no tenant = the tenant
``default``).  What goes (docs/OPERATIONS.md "Erasing an owner"):

* **queued turns**: the owner's entries in every ingest shard stream (acknowledged and
  deleted, so no drain processes them after L0 is gone);
* **L0**: the owner's transcript folder (and, in the default tenant, the pre-identity
  folder ``u/<user>/``);
* **Redis**: every key carrying the owner's hash tag ``{<tenant>/<user>}`` whatever its
  family (STM items and indexes, decisions, lifecycle records, recall bookkeeping, the
  profile cache, compression views and counters), the owner's members and fields in the
  global structures (sweep hint, lifecycle batch queue and finalised sessions,
  compression activity, the round-robin cursors when they name the owner, the tenant
  cap's count), and the owner's dead-lettered turns;
* **PostgreSQL**: LTM ledger cards (their projections and stale-row records cascade), the
  authority rows (user, profile, preferences, project roles, stable facts with their
  history), the owner's lifecycle audit rows and agent-store documents
  (``core.agent_store``);
* **LTM indexes**: both card collections and both raw-history collections, by an owner
  filter (not by ids, so records the ledger no longer knows go too).

Crash-safe and idempotent: the first step writes a durable marker (``owner_erasures``,
``finished_at`` NULL = in progress) in PostgreSQL; every step can run again, and a rerun
runs all of them again (cheap, and it also catches what a concurrent writer added
meanwhile).  Redis is erased twice: before PostgreSQL (so no promotion reads STM any
more) and last (caches a concurrent read may have refilled).  The last step, in one
transaction, appends one audit row without content (``action = erase``: who, when, how
many records per layer) and marks the erase finished.

Not covered: in-flight Celery task messages (they carry ids, never content, and find
nothing when they run) and in-process LRUs of other processes (embeddings and token
counts keyed by a hash of the text; they age out).  Stop the owner's agents first: a
turn recorded during the erase may survive it (run it again).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Connection, and_, delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.adapters.redis import redis_errors
from memstrata.core.agent_store import AGENT_ITEMS
from memstrata.core.authority.tables import FACTS, PREFERENCES, PROFILES, ROLES, USERS
from memstrata.core.ids import DEFAULT_TENANT, owner_tenant, validate_id
from memstrata.core.ingest.queue import GROUP
from memstrata.core.keys import GlobalKeys, LifecycleKeys, TenantKeys, user_scope
from memstrata.core.lifecycle.audit import Action, AuditEvent, audit_table, erasures_table, record
from memstrata.core.ltm.tables import cards, projections, stale_rows
from memstrata.core.runtime import Runtime

STEPS = ("queued_turns", "l0", "redis", "postgres", "ltm_indexes", "redis_final")
"""The steps after the marker, in order; ``done`` (audit row + marker) follows them."""

_PAGE = 1000


@dataclass
class EraseReport:
    """What an erase found (a dry run: what it would remove) and what it removed."""

    tenant_id: str
    user_id: str
    dry_run: bool
    found: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # layer -> why
    resumed: bool = False  # an earlier erase of this owner had not finished
    steps_before: list[str] = field(default_factory=list)  # what that erase had finished
    finished: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id, "user_id": self.user_id, "dry_run": self.dry_run,
            "found": self.found, "removed": self.removed, "skipped": self.skipped,
            "resumed": self.resumed, "steps_before": self.steps_before,
            "finished": self.finished,
        }  # fmt: skip


@dataclass(frozen=True)
class _Owner:
    tenant_id: str
    user_id: str

    @property
    def scope(self) -> str:
        return user_scope(self.user_id, self.tenant_id)

    @property
    def scopes(self) -> list[str]:
        """The owner's scope, and in the default tenant the pre-identity one (``<user>``)."""
        return [self.scope] + ([self.user_id] if self.tenant_id == DEFAULT_TENANT else [])

    def pointer_is_mine(self, raw: str) -> bool:
        try:
            p = json.loads(raw)
        except ValueError:
            return False
        return (
            isinstance(p, dict)
            and p.get("user_id") == self.user_id
            and (p.get("tenant_id") or DEFAULT_TENANT) == self.tenant_id
        )


# ---------------------------------------------------------------------------- public


def erase_owner(
    rt: Runtime,
    *,
    user_id: str,
    tenant_id: str | None = None,
    dry_run: bool = False,
    now: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> EraseReport:
    """Remove one owner's data from every layer (see the module docstring), or with
    ``dry_run`` only count it.  Safe to run again at any time; a rerun finishes an
    interrupted erase.  Store errors propagate typed (``core.errors``): run it again.
    ``on_progress(steps done, steps)`` is called after each step (a CLI progress bar)."""
    owner = _Owner(owner_tenant(tenant_id), validate_id(user_id, kind="user_id"))
    at = time.time() if now is None else now
    report = EraseReport(owner.tenant_id, owner.user_id, dry_run)
    state = erase_state(rt, user_id=owner.user_id, tenant_id=owner.tenant_id)
    if state is not None and state["finished_at"] is None:
        report.resumed, report.steps_before = True, list(state["steps"])
    apply = not dry_run
    if apply:
        _begin(rt, owner, at)
    steps: dict[str, Callable[[], dict[str, int]]] = {
        "queued_turns": lambda: _queued_turns(rt, owner, apply),
        "l0": lambda: _l0(rt, owner, apply),
        "redis": lambda: _redis(rt, owner, apply),
        "postgres": lambda: _postgres(rt, owner, apply),
        "ltm_indexes": lambda: _ltm_indexes(rt, owner, apply, report.skipped),
        "redis_final": lambda: _redis(rt, owner, apply) if apply else {},
    }
    for done, name in enumerate(STEPS, 1):
        counts = steps[name]()
        target = report.removed if apply else report.found
        for k, v in counts.items():
            target[k] = target.get(k, 0) + v
        if apply:
            _step_done(rt, owner, name)
        if on_progress is not None:
            on_progress(done, len(STEPS))
    if apply:
        # an owner erased before, with nothing found now: the first record stands alone
        again = state is not None and state["finished_at"] is not None
        _finish(rt, owner, at, report, audit=not (again and not any(report.removed.values())))
        report.finished = True
    return report


def erase_state(rt: Runtime, *, user_id: str, tenant_id: str | None) -> dict[str, Any] | None:
    """The owner's erase marker (``owner_erasures`` row) or ``None`` if never erased."""
    t = erasures_table
    stmt = select(t).where(and_(t.c.tenant_id == owner_tenant(tenant_id), t.c.user_id == user_id))
    with pg_errors("read erase marker"), rt.engine.connect() as conn:
        row = conn.execute(stmt).mappings().first()
    return dict(row) if row is not None else None


# ---------------------------------------------------------------------------- marker


def _begin(rt: Runtime, owner: _Owner, at: float) -> None:
    t = erasures_table
    mine = and_(t.c.tenant_id == owner.tenant_id, t.c.user_id == owner.user_id)
    with pg_errors("begin erase"), rt.engine.begin() as conn:
        conn.execute(
            pg_insert(t)
            .values(tenant_id=owner.tenant_id, user_id=owner.user_id, started_at=at, runs=0)
            .on_conflict_do_nothing(index_elements=["tenant_id", "user_id"])
        )
        row = conn.execute(select(t.c.finished_at).where(mine).with_for_update()).one()
        if row.finished_at is None:  # new, or interrupted: one more run of the same erase
            conn.execute(update(t).where(mine).values(runs=t.c.runs + 1))
        else:  # erased before (and written again since): a new erase
            conn.execute(update(t).where(mine).values(started_at=at, finished_at=None, runs=1,
                                                      steps=text("'[]'::jsonb")))  # fmt: skip


def _step_done(rt: Runtime, owner: _Owner, step: str) -> None:
    t = erasures_table
    mine = and_(t.c.tenant_id == owner.tenant_id, t.c.user_id == owner.user_id)
    with pg_errors("record erase step"), rt.engine.begin() as conn:
        steps = conn.execute(select(t.c.steps).where(mine).with_for_update()).scalar_one()
        if step not in steps:
            conn.execute(update(t).where(mine).values(steps=[*steps, step]))


def _finish(rt: Runtime, owner: _Owner, at: float, report: EraseReport, *, audit: bool) -> None:
    t = erasures_table
    mine = and_(t.c.tenant_id == owner.tenant_id, t.c.user_id == owner.user_id)
    event = AuditEvent(
        action=Action.ERASE, tenant_id=owner.tenant_id, user_id=owner.user_id,
        target=f"owner:{owner.scope}", at=at,
        reason="owner erased from every layer (L0, Redis, PostgreSQL, LTM indexes)",
        inputs={"removed": dict(sorted(report.removed.items())),
                "skipped": dict(sorted(report.skipped.items()))},
    )  # fmt: skip
    with pg_errors("finish erase"), rt.engine.begin() as conn:
        record(conn, [event] if audit else [])
        conn.execute(update(t).where(mine).values(finished_at=time.time(), steps=[*STEPS, "done"]))


# ---------------------------------------------------------------------------- steps


def _stream_entries(r: redis.Redis, key: str) -> Iterator[tuple[str, dict[str, str]]]:
    start = "-"
    while True:
        page: list[Any] = list(r.xrange(key, min=start, max="+", count=_PAGE) or [])
        if not page:
            return
        for eid, fields in page:
            yield str(eid), {str(k): str(v) for k, v in (fields or {}).items()}
        last = str(page[-1][0])
        ms, _, seq = last.partition("-")
        start = f"{ms}-{int(seq) + 1}"
        if len(page) < _PAGE:
            return


def _queued_turns(rt: Runtime, owner: _Owner, apply: bool) -> dict[str, int]:
    """The owner's turn pointers still in an ingest shard stream (read or not)."""
    r, gk = rt.redis, GlobalKeys(rt.settings.key_namespace)
    pattern = gk.ingest_stream(0).replace("{s0}", "{s*}")
    n = 0
    with redis_errors("erase queued turns"):
        for stream in list(r.scan_iter(match=pattern, count=_PAGE)):
            ids = [str(eid) for eid, f in _stream_entries(r, stream)
                   if owner.pointer_is_mine(f.get("p", ""))]  # fmt: skip
            n += len(ids)
            if apply and ids:
                for i in range(0, len(ids), _PAGE):
                    chunk = ids[i : i + _PAGE]
                    # no consumer group yet: nothing is pending
                    with contextlib.suppress(redis.ResponseError):
                        r.xack(stream, GROUP, *chunk)
                    r.xdel(stream, *chunk)
    return {"redis.queued_turns": n}


def _l0_folders(rt: Runtime, owner: _Owner) -> list[Path]:
    root = rt.transcript.root
    out = [root / "t" / owner.tenant_id / "u" / owner.user_id]
    if owner.tenant_id == DEFAULT_TENANT:
        out.append(root / "u" / owner.user_id)  # the pre-identity layout (core.owner_layout)
    return out


def _l0(rt: Runtime, owner: _Owner, apply: bool) -> dict[str, int]:
    files = 0
    for folder in _l0_folders(rt, owner):
        if not folder.is_dir():
            continue
        files += sum(1 for p in folder.rglob("*") if p.is_file())
        if apply:
            shutil.rmtree(folder)
    return {"l0.files": files}


def _redis(rt: Runtime, owner: _Owner, apply: bool) -> dict[str, int]:
    """Every key of the owner, and the owner's part of every global structure."""
    r, ns = rt.redis, rt.settings.key_namespace
    gk, lk = GlobalKeys(ns), LifecycleKeys(ns)
    counts = {"redis.keys": 0, "redis.members": 0, "redis.dead_letters": 0}
    patterns = [f"{ns}:*:{{{owner.scope}}}:*"]
    if owner.tenant_id == DEFAULT_TENANT:  # not yet moved by `memstrata migrate`
        patterns += [f"{ns}:user:{{{owner.user_id}}}:*", f"{ns}:compress:{{{owner.user_id}}}:*"]
    with redis_errors("erase owner keys"):
        for pattern in patterns:
            keys = [str(k) for k in r.scan_iter(match=pattern, count=_PAGE)]
            counts["redis.keys"] += len(keys)
            if apply:
                for i in range(0, len(keys), _PAGE):
                    r.unlink(*keys[i : i + _PAGE])
        for scope in owner.scopes:
            counts["redis.members"] += _global_members(r, gk, lk, scope, apply)
        counts["redis.members"] += _cursors_and_counts(rt, owner, apply)
        dead = [str(eid) for eid, f in _stream_entries(r, gk.dead_letters)
                if owner.pointer_is_mine(f.get("p", ""))]  # fmt: skip
        counts["redis.dead_letters"] = len(dead)
        if apply:
            for i in range(0, len(dead), _PAGE):
                r.xdel(gk.dead_letters, *dead[i : i + _PAGE])
    return counts


def _cursors_and_counts(rt: Runtime, owner: _Owner, apply: bool) -> int:
    """The round-robin cursors when they name the owner, and the tenant cap's count."""
    r, ns, n = rt.redis, rt.settings.key_namespace, 0
    lk = LifecycleKeys(ns)
    for key in (lk.scan_cursor, lk.access_cursor):  # "resume after <this owner>"
        if r.get(key) in owner.scopes:
            n += 1
            if apply:
                r.delete(key)
    if r.zscore(TenantKeys(ns, owner.tenant_id).users, owner.user_id) is not None:
        n += 1
        if apply:
            rt.stm.forget_owner_count(owner.user_id, tenant_id=owner.tenant_id)
    return n


def _global_members(
    r: redis.Redis, gk: GlobalKeys, lk: LifecycleKeys, scope: str, apply: bool
) -> int:
    n = 0
    if r.zscore(gk.sweep_users, scope) is not None:
        n += 1
        if apply:
            r.zrem(gk.sweep_users, scope)
    members = [str(m) for m, _s in r.zscan_iter(gk.compress_active, match=f"{scope}|*")]
    n += len(members)
    if apply and members:
        r.zrem(gk.compress_active, *members)
    for key in (lk.batch, lk.finalised):
        fields = [str(f) for f, _v in r.hscan_iter(key, match=f"{scope}|*")]
        n += len(fields)
        if apply and fields:
            r.hdel(key, *fields)
    return n


def _owned(table: Any, owner: _Owner, user_col: str = "user_id") -> Any:
    return and_(table.c.tenant_id == owner.tenant_id, table.c[user_col] == owner.user_id)


def _postgres(rt: Runtime, owner: _Owner, apply: bool) -> dict[str, int]:
    """Ledger cards, authority rows and audit rows of the owner, in one transaction."""
    audit = audit_table
    mine_audit = and_(_owned(audit, owner), audit.c.action != Action.ERASE.value)
    # children before parents, so every count is the table's own
    plan: list[tuple[str, Any, Any]] = [
        ("pg.ltm_projections", projections,
         projections.c.memory_id.in_(select(cards.c.memory_id).where(_owned(cards, owner)))),
        ("pg.ltm_stale_rows", stale_rows,
         stale_rows.c.memory_id.in_(select(cards.c.memory_id).where(_owned(cards, owner)))),
        ("pg.ltm_cards", cards, _owned(cards, owner)),
        ("pg.stable_memory_facts", FACTS, _owned(FACTS, owner)),
        ("pg.user_project_roles", ROLES, _owned(ROLES, owner)),
        ("pg.user_preferences", PREFERENCES, _owned(PREFERENCES, owner)),
        ("pg.user_profiles", PROFILES, _owned(PROFILES, owner)),
        ("pg.users", USERS, _owned(USERS, owner, "id")),
        ("pg.lifecycle_audit", audit, mine_audit),
        ("pg.agent_store_items", AGENT_ITEMS, _owned(AGENT_ITEMS, owner)),
    ]  # fmt: skip
    out: dict[str, int] = {}
    with pg_errors("erase owner rows"), rt.engine.begin() as conn:
        for name, table, where in plan:
            out[name] = _count(conn, table, where)
            if apply and out[name]:
                conn.execute(delete(table).where(where))
    return out


def _count(conn: Connection, table: Any, where: Any) -> int:
    return int(conn.execute(select(func.count()).select_from(table).where(where)).scalar_one())


def _ltm_indexes(
    rt: Runtime, owner: _Owner, apply: bool, skipped: dict[str, str]
) -> dict[str, int]:
    if not rt.settings.ltm.enabled:
        skipped["ltm_indexes"] = "LTM is disabled (MEMSTRATA_LTM__ENABLED=false)"
        return {}
    ltm = rt.ltm  # raises typed when Milvus / Elasticsearch is unreachable: run it again
    indexes: list[tuple[str, Any]] = [("ltm.lexical", ltm.lexical), ("ltm.vectors", ltm.vector)]
    if ltm.history is not None:
        indexes += [("ltm.raw_lexical", ltm.history.lexical),
                    ("ltm.raw_vectors", ltm.history.vector)]  # fmt: skip
    else:
        skipped["ltm.raw_history"] = "the raw-history index is disabled"
    out = {}
    for name, index in indexes:
        out[name] = index.count_owner(owner.tenant_id, owner.user_id)
        if apply and out[name]:
            index.delete_owner(owner.tenant_id, owner.user_id)
    return out


__all__ = ["STEPS", "EraseReport", "erase_owner", "erase_state"]
