"""A script call on the lean path (``core.adapters.redis.run_script``).

``record_turn``'s enqueue and the STM recall read go through it: packed by hiredis and
sent and read on a pooled connection directly.  What must hold: the reply is the
script's, the connection goes back to the pool with nothing unread on it, and every way
the call can fail (an empty script cache, a reply that never comes, a server that is not
there or never answers, an argument Redis cannot take) ends as a plain call would: the
client's retry policy, the script loaded, or a translated error; and the bytes sent
are the ones redis-py's own packer makes.  Real servers only: the shared
Redis, throwaway ``redis-server`` processes stopped (``SIGSTOP``) mid-call, and a bare
TCP listener that never answers.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hiredis import pack_command
from redis._parsers.encoders import Encoder
from redis.backoff import NoBackoff
from redis.connection import PythonRespSerializer
from redis.retry import Retry

from memstrata.core.adapters.redis import run_script
from memstrata.core.errors import StoreRejected, StoreUnavailable
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.runtime import Runtime
from memstrata.ops.bench.common.scratch_redis import RedisServer

pytestmark = pytest.mark.integration

# counts its runs: a reply says how often the script ran
COUNT = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


def clean(client: redis.Redis) -> bool:
    """No connection checked out, and none in the pool with a reply waiting to be read
    (redis-py would quietly reconnect such a one, so a PING cannot tell)."""
    pool = client.connection_pool
    idle = pool._available_connections
    return not pool._in_use_connections and all(
        c._sock is None or not c.can_read(timeout=0) for c in idle
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path / "redis")
    srv.start()
    yield srv
    pause(srv, signal.SIGCONT)
    srv.stop()


def pause(srv: RedisServer, sig: signal.Signals) -> None:
    """``SIGSTOP`` / ``SIGCONT`` the server (``RedisServer.kill`` waits for an exit)."""
    assert srv.proc is not None
    srv.proc.send_signal(sig)


def throwaway_client(srv: RedisServer, timeout_s: float, retries: int = 0) -> redis.Redis:
    return redis.Redis.from_url(
        srv.url, decode_responses=True, socket_timeout=timeout_s,
        retry=Retry(NoBackoff(), retries),
    )  # fmt: skip


def connections_received(probe: redis.Redis) -> int:
    return int(probe.info("stats")["total_connections_received"])


@pytest.mark.parametrize(
    "args",
    [
        ("k", 1, 0, -7, 10**30, "ü€𝄞", "a b"),
        (0.1, 1 / 3, 1700000000.123, -0.0, 1e20, 5e-324, float("inf"), float("-inf")),
        (b"raw\x00bytes", "", 123456789012345680.0),
    ],
)
def test_hiredis_packs_the_bytes_redis_py_packs(args: tuple[str | int | float | bytes]) -> None:
    # the lean call's packer against redis-py's own (a hiredis upgrade must not change
    # what reaches Redis: float formatting above all)
    encoder = Encoder("utf-8", "strict", False)  # type: ignore[no-untyped-call]
    reference = PythonRespSerializer(6000, encoder.encode)
    command = ("EVALSHA", "0" * 40, 1, *args)
    expected = b"".join(reference.pack(*command))  # type: ignore[no-untyped-call]
    assert pack_command(command) == expected  # type: ignore[arg-type]


def test_the_reply_is_the_scripts_and_the_connection_comes_back_clean(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:count"
    script = res.redis.register_script(COUNT)
    script(keys=[key], args=[0])  # loaded: the lean call finds it cached
    assert run_script(res.redis, script, [key], [5]) == 5
    assert clean(res.redis)
    assert res.redis.get(key) == "5"
    # floats go as redis-py sends them
    assert run_script(res.redis, res.redis.register_script("return ARGV[1]"), [key], [0.1]) == "0.1"


def test_an_empty_script_cache_loads_the_script_and_runs_it_once(server: RedisServer) -> None:
    client = throwaway_client(server, timeout_s=2.0)
    script = client.register_script(COUNT)
    script(keys=["n"], args=[0])
    client.script_flush()  # as after a restart or a failover (a throwaway server's cache)
    assert run_script(client, script, ["n"], [3]) == 3  # NOSCRIPT never ran it
    assert client.get("n") == "3"
    assert client.script_exists(script.sha) == [True]
    assert clean(client)
    client.close()


def test_an_argument_redis_cannot_encode_is_rejected_before_anything_is_sent(
    res: Runtime,
) -> None:
    key = f"{res.settings.key_namespace}:count"
    script = res.redis.register_script(COUNT)
    with pytest.raises(StoreRejected, match="cannot encode"):
        run_script(res.redis, script, [key], [True])  # redis-py refuses a bool too
    assert clean(res.redis)
    assert res.redis.get(key) is None


def test_a_failing_script_is_rejected_and_its_connection_stays_clean(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:count"
    res.redis.set(key, "not a number")
    script = res.redis.register_script(COUNT)
    with pytest.raises(StoreRejected):
        run_script(res.redis, script, [key], [1])
    assert clean(res.redis)


def test_a_single_connection_client_makes_the_plain_call(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:count"
    single = redis.Redis.from_url(
        str(res.settings.redis_url), decode_responses=True, single_connection_client=True
    )
    try:
        assert run_script(single, single.register_script(COUNT), [key], [2]) == 2
        assert single.ping() is True
    finally:
        single.close()


def test_a_reply_that_never_comes_is_unavailable_after_one_attempt(
    server: RedisServer,
) -> None:
    client = throwaway_client(server, timeout_s=0.3)  # no retries, as the runtime's client
    script = client.register_script(COUNT)
    script(keys=["n"], args=[0])
    probe = throwaway_client(server, timeout_s=5.0)
    before = connections_received(probe)
    pause(server, signal.SIGSTOP)  # stopped first: the command sits unanswered in its socket
    with pytest.raises(StoreUnavailable) as info:
        run_script(client, script, ["n"], [1])  # the read times out
    assert isinstance(info.value.__cause__, redis.TimeoutError)
    pause(server, signal.SIGCONT)
    # no second attempt on a new connection (the server would have counted it)
    assert connections_received(probe) == before
    assert clean(client)
    client.close()
    probe.close()


def test_a_lost_reply_is_retried_as_the_clients_retry_policy_says(server: RedisServer) -> None:
    client = throwaway_client(server, timeout_s=2.0, retries=1)
    script = client.register_script(COUNT)
    script(keys=["n"], args=[0])
    pause(server, signal.SIGSTOP)
    # resumed after the first read gave up (2 s) and well before the retry's does (4 s)
    resume = threading.Timer(3.0, pause, args=(server, signal.SIGCONT))
    resume.start()
    try:
        # the retry's reply; the lost call ran first (a retried script may run twice)
        assert run_script(client, script, ["n"], [1]) == 2
    finally:
        resume.join()
    assert client.get("n") == "2" and clean(client)
    client.close()


def test_a_server_that_is_not_there_is_unavailable() -> None:
    client = redis.Redis(
        host="127.0.0.1", port=free_port(), decode_responses=True, socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )  # fmt: skip
    with pytest.raises(StoreUnavailable) as info:
        run_script(client, client.register_script(COUNT), ["n"], [1])
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    assert clean(client)


def test_a_server_that_never_answers_is_connected_to_once_not_twice() -> None:
    # a port that accepts connections (the kernel's backlog) and never answers them
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        client = redis.Redis(
            host="127.0.0.1", port=listener.getsockname()[1], decode_responses=True,
            socket_timeout=0.3, socket_connect_timeout=0.3, retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
        with pytest.raises(StoreUnavailable):  # its handshake times out
            run_script(client, client.register_script(COUNT), ["n"], [1])
        listener.setblocking(False)
        attempts = 0
        while True:
            try:
                listener.accept()[0].close()
            except BlockingIOError:
                break
            attempts += 1
    # one round of connecting, as a plain call makes: no second round after it failed
    assert attempts == 1
    assert clean(client)
