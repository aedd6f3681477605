"""Where a drained turn's CPU goes: the drain loop in process, split by stage, by Redis
command, and by function (issue 17 "profile, then cut").

The ingest benchmark's turn mix (``fixtures.turn_messages``) goes through L0 and the real
pipeline in batches of the shipped ``ingest_batch``, 10 users, sessions of 20 turns, on a
scratch namespace, with no Celery around it (what a worker adds is the task overhead the
steady phase measures).  Three views of the same loop, each from its own pass, so that no
instrument inflates another's figures:

- **stages**: the pipeline's CPU per turn split by step, timed by ``time.process_time``
  around each step (extraction, lookup, judging, item encoding, the upsert round trip,
  the decision records) — the figures are unprofiled;
- **Redis commands**: ``INFO commandstats`` before and after (deltas, so a shared server's
  other clients only add what they did meanwhile), per turn: the upsert script and the
  commands it runs inside (Redis counts a script's inner commands too);
- **functions**: cProfile with a CPU timer, the top functions by self time (profiled
  times are inflated by the profiler's per-call cost: read them as shares);
- **sorted-set encoding**: the Redis CPU of the same loop on scratch servers with the
  shipped ``ops/redis.conf`` at several ``zset-max-listpack-entries``.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from memstrata.core.collector import tune_collector
from memstrata.core.extract.rules import RuleExtractor
from memstrata.core.ingest import pipeline as pipeline_module
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.models.transcript import MessageIn, TranscriptRecord, TurnPointer
from memstrata.core.policy.write import WritePolicy
from memstrata.core.settings import load_settings
from memstrata.core.stm.store import StmStore
from memstrata.core.transcript.store import TranscriptStore
from memstrata.ops.bench.common import scratch_redis
from memstrata.ops.bench.common.cpu import redis_cpu_seconds
from memstrata.ops.bench.common.env import new_namespace, purge
from memstrata.ops.bench.common.fixtures import turn_messages
from memstrata.ops.bench.common.stats import r3

USERS = 10
TURNS_PER_SESSION = 20
TOP_FUNCTIONS = 12
TOP_COMMANDS = 8
Batch = list[tuple[TurnPointer, list[TranscriptRecord]]]


def _batches(l0: TranscriptStore, turns: int, batch: int) -> list[Batch]:
    now = time.time()
    out: list[Batch] = []
    for start in range(0, turns, batch):
        part: Batch = []
        for n in range(start, min(turns, start + batch)):
            u, s = n % USERS, (n // USERS) // TURNS_PER_SESSION
            msgs = [MessageIn.model_validate(m) for m in turn_messages(n)]
            turn = l0.append_turn(user_id=f"u{u}", session_id=f"u{u}s{s}", task_id=f"u{u}s{s}t",
                                  messages=msgs, at=now + n * 1e-3)  # fmt: skip
            part.append((turn.pointer, list(turn.records)))
        out.append(part)
    return out


@contextmanager
def _timed(obj: Any, name: str, spent: defaultdict[str, float], label: str) -> Iterator[None]:
    """``obj.name`` timed into ``spent[label]`` (CPU seconds) while the block runs."""
    original: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - t0

    own = name in vars(obj)  # a module's function (put back) or a method (un-shadowed)
    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        if own:
            setattr(obj, name, original)
        else:
            delattr(obj, name)


def _pass(client: redis.Redis, turns: int, batch: int, mode: str) -> dict[str, Any]:
    """One pass over fresh state: ``mode`` is ``stages``, ``commands``, ``functions`` or
    ``plain`` (no instrument)."""
    ns = new_namespace("benchprof")
    store = StmStore(client, namespace=ns)
    extractor = RuleExtractor(conversation_facts=True)
    pipeline = IngestPipeline(store=store, extractor=extractor, policy=WritePolicy())
    out: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="benchprof") as folder:
            batches = _batches(TranscriptStore(Path(folder), fsync=False), turns, batch)
            spent: defaultdict[str, float] = defaultdict(float)
            stats0: dict[str, Any] = client.info("commandstats") if mode == "commands" else {}
            profiler = cProfile.Profile(time.process_time) if mode == "functions" else None
            server0 = redis_cpu_seconds(client)
            cpu0 = time.process_time()
            if mode == "stages":
                with (
                    _timed(extractor, "extract_turn", spent, "extraction"),
                    _timed(pipeline, "_lookup", spent, "lookup (existing items)"),
                    _timed(pipeline, "_judge", spent, "judging (policy, items, decisions)"),
                    _timed(store, "_encode", spent, "item encoding"),
                    _timed(store, "upsert_batch", spent, "upserts"),
                    _timed(store, "record_decisions", spent, "decision records"),
                    _timed(pipeline_module, "count_decisions", spent, "metrics"),
                ):
                    for part in batches:
                        pipeline.process(part)
            else:
                if profiler is not None:
                    profiler.enable()
                try:
                    for part in batches:
                        pipeline.process(part)
                finally:  # a failed pass must not leave the hook on for what runs next
                    if profiler is not None:
                        profiler.disable()
            cpu = time.process_time() - cpu0
            server = redis_cpu_seconds(client) - server0
        out["cpu_ms_per_turn"] = r3(cpu * 1e3 / turns)
        out["redis_cpu_ms_per_turn"] = r3(server * 1e3 / turns)
        if mode == "stages":
            # the upsert figure holds the encoding: report the round trip on its own
            spent["upserts"] -= spent["item encoding"]
            spent["other"] = cpu - sum(spent.values())
            out["stages_ms_per_turn"] = {k: r3(v * 1e3 / turns) for k, v in spent.items()}
        elif mode == "commands":
            out["redis_commands"] = _command_deltas(stats0, client.info("commandstats"), turns)
        elif profiler is not None:
            out["functions"] = _top_functions(profiler, turns)
    finally:
        purge(client, ns)
    return out


def _by_zset_encoding(turns: int, batch: int) -> list[dict[str, Any]]:
    """Redis CPU per turn of the same loop on a scratch server with ``ops/redis.conf``, at
    its ``zset-max-listpack-entries`` and at smaller ones: a listpack sorted set is
    compact but an insert into it is linear in its entries, and an owner's ``recent``
    and ``expire`` indexes hold one entry per item (the trade-off ``ops/redis.conf``
    documents).  Only this loop uses a scratch server: its CPU is this loop's (plus the
    server's idle ticks and one script load)."""
    rows: list[dict[str, Any]] = []
    if not scratch_redis.available():
        return rows
    shipped = _conf_value(scratch_redis.SHIPPED_CONF, "zset-max-listpack-entries")
    for entries in dict.fromkeys([shipped, "128", "0"]):
        with scratch_redis.scratch_redis("--zset-max-listpack-entries", entries,
                                         conf=scratch_redis.SHIPPED_CONF) as client:  # fmt: skip
            got = _pass(client, turns, batch, "plain")
        rows.append({"zset_max_listpack_entries": int(entries), "shipped": entries == shipped,
                     "redis_cpu_ms_per_turn": got["redis_cpu_ms_per_turn"]})  # fmt: skip
    return rows


def _conf_value(path: Path, name: str) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return parts[1]
    return "128"  # Redis's default


def _command_deltas(
    before: dict[str, Any], after: dict[str, Any], turns: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for key, now in after.items():
        was = before.get(key, {"calls": 0, "usec": 0})
        calls, usec = now["calls"] - was["calls"], now["usec"] - was["usec"]
        if calls > 0:
            rows.append({"command": key.removeprefix("cmdstat_"),
                         "calls_per_turn": r3(calls / turns), "us_per_call": r3(usec / calls),
                         "us_per_turn": r3(usec / turns)})  # fmt: skip
    rows.sort(key=lambda r: -r["us_per_turn"])
    return rows[:TOP_COMMANDS]


def _top_functions(profiler: cProfile.Profile, turns: int) -> list[dict[str, Any]]:
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(row[2] for row in stats.values()) or 1.0
    rows: list[dict[str, Any]] = []
    for (path, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.items():
        where = path.split("/memstrata/")[-1] if "/memstrata/" in path else Path(path).name
        name = f"{where}:{line}:{func}" if path != "~" else func
        rows.append({"function": name, "calls_per_turn": r3(calls / turns),
                     "self_share": round(tottime / total, 3),
                     "cumulative_share": round(cumtime / total, 3)})  # fmt: skip
    rows.sort(key=lambda r: -r["self_share"])
    return rows[:TOP_FUNCTIONS]


@contextmanager
def _worker_collector() -> Iterator[int]:
    """The garbage collector on a worker's schedule while the block runs (the setting
    ``gc_threshold``, ``core.collector``), CPython's again after it."""
    before = gc.get_threshold()
    tune_collector(load_settings().gc_threshold)
    try:
        yield gc.get_threshold()[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def drain_profile(client: redis.Redis, *, turns: int, batch: int) -> dict[str, Any]:
    """The three views of one drain loop (module docstring), on a worker's collector
    schedule."""
    with _worker_collector() as gc_threshold:
        stages = _pass(client, turns, batch, "stages")
        commands = _pass(client, turns, batch, "commands")
        functions = _pass(client, turns, batch, "functions")
        encodings = _by_zset_encoding(turns, batch)
    return {
        "turns": turns,
        "batch": batch,
        "gc_threshold": gc_threshold,
        "cpu_ms_per_turn": stages["cpu_ms_per_turn"],
        "stages_ms_per_turn": stages["stages_ms_per_turn"],
        "redis_commands": commands["redis_commands"],
        "functions": functions["functions"],
        "profiled_cpu_ms_per_turn": functions["cpu_ms_per_turn"],
        "redis_cpu_by_zset_encoding": encodings,
    }


def _table(intro: str, header: str, rows: list[str]) -> list[str]:
    """A paragraph, then a Markdown table: ``header``'s first column left, the rest right."""
    columns = header.count("|") - 1
    return ["", intro, "", header, "|---" + "|---:" * (columns - 1) + "|", *rows]


def markdown(p: dict[str, Any]) -> list[str]:
    """The profile's lines for the ingest section."""
    stages = " · ".join(f"{k} {v}" for k, v in p["stages_ms_per_turn"].items())
    lines = [
        "",
        f"**Profile of the drain loop** (in process, no Celery: {p['turns']} bench turns in "
        f"batches of {p['batch']}, `ops/bench/ingest/profile.py`; the collector on a "
        f"worker's schedule, generation 0 every {p.get('gc_threshold', 700)} allocations). "
        f"Worker CPU "
        f"{p['cpu_ms_per_turn']} ms per turn, by stage (ms): {stages}.",
    ]
    lines += _table(
        "Redis, per drained turn (`INFO commandstats` deltas; a script's inner commands are "
        "counted inside `evalsha` and again on their own rows):",
        "| command | calls per turn | µs per call | µs per turn |",
        [f"| `{r['command']}` | {r['calls_per_turn']} | {r['us_per_call']} | "
         f"{r['us_per_turn']} |" for r in p["redis_commands"]],
    )  # fmt: skip
    enc = p.get("redis_cpu_by_zset_encoding") or []
    if enc:
        lines += _table(
            "Redis CPU per drained turn of the same loop on a scratch server with "
            "`ops/redis.conf`, by `zset-max-listpack-entries` (listpack sorted sets are "
            "compact, but an insert into one is linear in its entries):",
            "| zset-max-listpack-entries | Redis CPU ms/turn |",
            [f"| {r['zset_max_listpack_entries']}{' (shipped)' if r['shipped'] else ''} | "
             f"{r['redis_cpu_ms_per_turn']} |" for r in enc],
        )  # fmt: skip
    lines += _table(
        f"Functions by self time (cProfile, CPU timer; {p['profiled_cpu_ms_per_turn']} ms "
        "per turn profiled, so read shares):",
        "| function | calls per turn | self share | cumulative share |",
        [f"| `{r['function']}` | {r['calls_per_turn']} | {r['self_share']:.1%} | "
         f"{r['cumulative_share']:.1%} |" for r in p["functions"]],
    )  # fmt: skip
    return lines
