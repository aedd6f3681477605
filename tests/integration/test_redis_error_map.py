"""The Redis error map (``core.adapters.redis``) against real servers, row by row.

Every vendor error here is produced by a real Redis: the shared one on 6379 for wrong
types, scripts and WATCH; throwaway ``redis-server`` processes on free ports for an
out-of-memory server (``maxmemory``), a read-only replica (``REPLICAOF``), a server
still loading its dataset (``key-load-delay``), a closed port and a stalled reply.
Each case asserts the memstrata type, its retry class, and that ``__cause__`` is the
redis-py exception the server produced.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from memstrata.core.adapters.redis import RULES, redis_errors, translate
from memstrata.core.errors import (
    ConcurrentWrite,
    MemstrataError,
    PermanentError,
    StoreFull,
    StoreReadOnly,
    StoreRejected,
    StoreUnavailable,
    TransientError,
)
from memstrata.core.ingest.queue import IngestQueue
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.runtime import Runtime
from memstrata.core.stm.store import StmStore
from tests.integration.test_stm_store import item

pytestmark = pytest.mark.integration

NO_RETRY = Retry(NoBackoff(), 0)  # redis-py must not hide the first error behind retries


def client(port: int, **kw: Any) -> redis.Redis:
    kw.setdefault("socket_timeout", 2.0)
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        decode_responses=True,
        retry=NO_RETRY,
        socket_connect_timeout=1.0,
        **kw,
    )


class Server:
    """A throwaway ``redis-server`` (no persistence unless asked) on a free port."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.port = free_port()
        folder.mkdir(parents=True, exist_ok=True)
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(folder), *args]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self) -> redis.Redis:
        c = client(self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                c.ping()
                return c
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*args: str, folder: str = "redis") -> Server:
        server = Server(tmp_path / folder, *args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def mapped(call: Callable[[], object], what: str = "redis") -> MemstrataError:
    """Run ``call`` under the map and return what it raised."""
    with pytest.raises(MemstrataError) as info, redis_errors(what):
        call()
    return info.value


def assert_mapped(
    err: MemstrataError, ours: type[MemstrataError], vendor: type[redis.RedisError]
) -> None:
    assert type(err) is ours, f"{type(err).__name__}: {err}"
    assert isinstance(err.__cause__, vendor), repr(err.__cause__)
    assert str(err.__cause__) in str(err)


# ---------------------------------------------------------------- the table itself


def test_no_row_is_shadowed_by_an_earlier_more_general_row() -> None:
    for i, (vendor, _ours, _why) in enumerate(RULES):
        earlier = [v.__name__ for v, _o, _w in RULES[:i] if issubclass(vendor, v)]
        assert earlier == [], f"{vendor.__name__} is caught first by {earlier}"
    assert RULES[-1][0] is redis.RedisError  # everything redis-py raises is mapped


# ---------------------------------------------------------------- permanent: the server refused


def test_a_command_on_the_wrong_type_is_rejected_permanently(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:h"
    res.redis.hset(key, "a", "1")
    err = mapped(lambda: res.redis.incr(key))
    assert_mapped(err, StoreRejected, redis.ResponseError)
    assert isinstance(err, PermanentError) and "WRONGTYPE" in str(err)


def test_the_wrong_type_inside_a_pipeline_is_rejected_permanently(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:h"
    res.redis.hset(key, "a", "1")
    pipe = res.redis.pipeline(transaction=False)
    pipe.get(key)
    assert_mapped(mapped(pipe.execute), StoreRejected, redis.ResponseError)


@pytest.mark.parametrize(
    ("script", "fragment"),
    [
        ("error('boom')", "boom"),
        ("return redis.call('INCR', KEYS[1])", "WRONGTYPE"),
        ("return redis.call('NOSUCHCOMMAND')", "Unknown Redis command"),
    ],
    ids=["lua error", "wrong type in a script", "unknown command in a script"],
)
def test_a_failing_script_is_rejected_permanently(
    res: Runtime, script: str, fragment: str
) -> None:
    key = f"{res.settings.key_namespace}:h"
    res.redis.hset(key, "a", "1")
    err = mapped(lambda: res.redis.eval(script, 1, key))
    assert_mapped(err, StoreRejected, redis.ResponseError)
    assert fragment in str(err)


# ---------------------------------------------------------------- transient


def test_an_unknown_script_sha_is_transient(res: Runtime) -> None:
    # a restarted or flushed Redis forgets its scripts: the caller reloads and retries
    err = mapped(lambda: res.redis.evalsha("0" * 40, 0))
    assert_mapped(err, StoreUnavailable, redis.exceptions.NoScriptError)
    assert isinstance(err, TransientError)


def test_a_watched_key_that_changed_is_a_concurrent_write(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:w"
    res.redis.set(key, "0")
    with res.redis.pipeline(transaction=True) as pipe:
        pipe.watch(key)  # type: ignore[no-untyped-call]
        res.redis.set(key, "1")  # another client writes between WATCH and EXEC
        pipe.multi()
        pipe.set(key, "2")
        err = mapped(pipe.execute)
    assert_mapped(err, ConcurrentWrite, redis.WatchError)
    assert isinstance(err, TransientError) and res.redis.get(key) == "1"


def test_out_of_memory_is_a_transient_store_full(start_server: Callable[..., Server]) -> None:
    r = start_server().wait_ready()
    r.config_set("maxmemory", 1)  # far below what the server uses: every write is refused
    script = r.register_script("return redis.call('SET', KEYS[1], ARGV[1])")
    pipe = r.pipeline(transaction=False)
    pipe.get("k")
    pipe.set("k", "v")
    for call in (lambda: r.set("k", "v"), lambda: script(keys=["k"], args=["v"]), pipe.execute):
        err = mapped(call)
        assert_mapped(err, StoreFull, redis.exceptions.OutOfMemoryError)
        assert isinstance(err, StoreUnavailable) and isinstance(err, TransientError)
    assert r.get("k") is None  # reads still work; nothing was written


def test_out_of_memory_reaches_callers_of_the_stores_as_store_full(
    start_server: Callable[..., Server],
) -> None:
    r = start_server().wait_ready()
    store, queue = StmStore(r, namespace="toom"), IngestQueue(r, namespace="toom")
    queue.ensure_group(0)
    r.config_set("maxmemory", 1)
    with pytest.raises(StoreFull) as upsert:
        store.upsert(item("m_1"))
    with pytest.raises(StoreFull) as kick:
        queue.try_kick(0)
    for info in (upsert, kick):
        assert isinstance(info.value.__cause__, redis.exceptions.OutOfMemoryError)


def test_a_read_only_replica_is_transient(start_server: Callable[..., Server]) -> None:
    master = start_server(folder="master")
    master.wait_ready()
    replica = start_server(folder="replica").wait_ready()
    replica.replicaof("127.0.0.1", master.port)
    for call in (
        lambda: replica.set("k", "v"),
        lambda: replica.eval("return redis.call('SET', KEYS[1], 'v')", 1, "k"),
    ):
        err = mapped(call)
        assert_mapped(err, StoreReadOnly, redis.exceptions.ReadOnlyError)
        assert isinstance(err, StoreUnavailable)


def test_a_server_loading_its_dataset_is_transient(start_server: Callable[..., Server]) -> None:
    # Given a dump of 10k keys, and a server that takes ~2 s to load it (200 us per key)
    seed = start_server("--dbfilename", "dump.rdb", folder="data")
    r = seed.wait_ready()
    pipe = r.pipeline(transaction=False)
    for i in range(10_000):
        pipe.set(f"k{i}", "v")
    pipe.execute()
    r.save()
    seed.stop()
    slow_load = ("--key-load-delay", "200", "--loading-process-events-interval-bytes", "1024")
    loading = start_server("--dbfilename", "dump.rdb", *slow_load, folder="data")
    # When a client talks to it before it is done
    c = client(loading.port)
    seen: MemstrataError | None = None
    deadline = time.monotonic() + 15
    while seen is None and time.monotonic() < deadline:
        try:
            with redis_errors():
                c.get("k1")
            break  # loaded before we got an answer while loading
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, redis.exceptions.BusyLoadingError):
                seen = exc
            time.sleep(0.02)  # connection refused: the server is still starting
    # Then it is told to come back later
    assert seen is not None, "never saw the server loading"
    assert_mapped(seen, StoreUnavailable, redis.exceptions.BusyLoadingError)


def test_a_closed_port_is_unavailable() -> None:
    err = mapped(lambda: client(free_port()).ping())
    assert_mapped(err, StoreUnavailable, redis.ConnectionError)


def test_a_reply_that_does_not_come_in_time_is_unavailable(res: Runtime) -> None:
    slow = client(res.redis.connection_pool.connection_kwargs["port"], socket_timeout=0.2)
    err = mapped(lambda: slow.blpop([f"{res.settings.key_namespace}:empty"], timeout=2))
    assert_mapped(err, StoreUnavailable, redis.TimeoutError)
    slow.close()


def test_translate_names_the_caller_and_the_meaning(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:h"
    res.redis.hset(key, "a", "1")
    try:
        res.redis.incr(key)
    except redis.ResponseError as exc:
        err = translate(exc, "profile cache")
    assert str(err).startswith("profile cache: refused the command: WRONGTYPE")
