"""A script call sent now and answered later (``core.adapters.redis.SentScript``).

``record_turn`` sends its enqueue script before the L0 ``fsync`` and reads the reply after
it.  What must hold: the reply is the script's, the connection goes back to the pool with
nothing unread on it, and every way the early send can fail (an empty script cache, a
reply that never comes, a server that is not there) ends as a plain call would: the call
made again through redis-py, or a translated error.  Real servers only: the shared Redis,
and throwaway ``redis-server`` processes that are stopped (``SIGSTOP``) mid-call.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from memstrata.core.adapters.redis import SentScript
from memstrata.core.errors import StoreRejected, StoreUnavailable
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.runtime import Runtime
from memstrata.ops.bench.common.scratch_redis import RedisServer

pytestmark = pytest.mark.integration

# counts its runs: a reply says how often the script ran
COUNT = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


def in_use(client: redis.Redis) -> int:
    return len(client.connection_pool._in_use_connections)


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


def throwaway_client(srv: RedisServer, timeout_s: float) -> redis.Redis:
    return redis.Redis.from_url(
        srv.url, decode_responses=True, socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )


def test_the_reply_is_the_scripts_and_the_connection_comes_back_clean(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:count"
    script = res.redis.register_script(COUNT)
    script(keys=[key], args=[0])  # loaded: the early send finds it cached
    sent = SentScript(res.redis, script, [key], [5])
    assert in_use(res.redis) == 1  # on the wire, its connection held for the reply
    assert sent.reply() == 5
    assert in_use(res.redis) == 0
    # nothing was left unread: the next command on the pool gets its own answer
    assert res.redis.ping() is True
    assert res.redis.get(key) == "5"
    sent.abandon()  # after the reply there is nothing to give up
    assert res.redis.incrby(key, 1) == 6


def test_an_empty_script_cache_loads_the_script_and_runs_it_once(server: RedisServer) -> None:
    client = throwaway_client(server, timeout_s=2.0)
    script = client.register_script(COUNT)
    script(keys=["n"], args=[0])
    client.script_flush()  # as after a restart or a failover (a throwaway server's cache)
    sent = SentScript(client, script, ["n"], [3])
    assert sent.reply() == 3  # NOSCRIPT never ran it; the plain call loaded and ran it
    assert client.get("n") == "3"
    assert client.script_exists(script.sha) == [True]
    assert in_use(client) == 0 and client.ping() is True
    client.close()


def test_an_abandoned_call_drops_its_connection(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:count"
    script = res.redis.register_script(COUNT)
    script(keys=[key], args=[0])
    sent = SentScript(res.redis, script, [key], [7])
    sent.abandon()
    assert clean(res.redis)
    # the unread reply went with the dropped connection, not to the next command
    assert res.redis.ping() is True
    assert res.redis.incrby(key, 1) == 8  # the abandoned call ran (it was sent)


def test_an_argument_redis_cannot_encode_is_rejected_before_anything_is_sent(
    res: Runtime,
) -> None:
    key = f"{res.settings.key_namespace}:count"
    script = res.redis.register_script(COUNT)
    with pytest.raises(StoreRejected, match="cannot encode"):
        SentScript(res.redis, script, [key], [True])  # redis-py refuses a bool too
    assert in_use(res.redis) == 0
    assert res.redis.get(key) is None


def test_a_single_connection_client_makes_the_call_at_reply(res: Runtime) -> None:
    key = f"{res.settings.key_namespace}:count"
    single = redis.Redis.from_url(
        str(res.settings.redis_url), decode_responses=True,
        single_connection_client=True,
    )  # fmt: skip
    try:
        script = single.register_script(COUNT)
        sent = SentScript(single, script, [key], [2])
        assert single.get(key) is None  # nothing sent on the one connection yet
        assert sent.reply() == 2
        assert single.ping() is True
    finally:
        single.close()


def test_a_reply_that_never_comes_is_unavailable_and_leaves_no_reply_behind(
    server: RedisServer,
) -> None:
    client = throwaway_client(server, timeout_s=0.3)
    script = client.register_script(COUNT)
    script(keys=["n"], args=[0])
    pause(server, signal.SIGSTOP)  # stopped first: the command sits unanswered in its socket
    sent = SentScript(client, script, ["n"], [1])
    with pytest.raises(StoreUnavailable) as info:
        sent.reply()  # the read times out, and so does the call made again
    assert isinstance(info.value.__cause__, redis.TimeoutError)
    assert in_use(client) == 0
    pause(server, signal.SIGCONT)
    # the stalled connections were dropped: a new command gets its own reply
    assert client.ping() is True
    client.close()


def test_a_lost_reply_is_read_from_the_call_made_again(server: RedisServer) -> None:
    client = throwaway_client(server, timeout_s=2.0)
    script = client.register_script(COUNT)
    script(keys=["n"], args=[0])
    pause(server, signal.SIGSTOP)
    sent = SentScript(client, script, ["n"], [1])
    # resumed after the first read gave up (2 s) and well before the second does (4 s)
    resume = threading.Timer(3.0, pause, args=(server, signal.SIGCONT))
    resume.start()
    try:
        assert sent.reply() == 2  # the call made again; the lost one ran first (safe twice)
    finally:
        resume.join()
    assert client.get("n") == "2" and clean(client)
    client.close()


def test_a_server_that_is_not_there_fails_at_reply_translated() -> None:
    client = redis.Redis(
        host="127.0.0.1", port=free_port(), decode_responses=True, socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )  # fmt: skip
    script = client.register_script(COUNT)
    sent = SentScript(client, script, ["n"], [1])  # connecting fails: kept for reply()
    with pytest.raises(StoreUnavailable) as info:
        sent.reply()
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    assert in_use(client) == 0


def test_a_server_that_never_answers_is_connected_to_once_not_twice() -> None:
    # a port that accepts connections (the kernel's backlog) and never answers them
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        client = redis.Redis(
            host="127.0.0.1", port=listener.getsockname()[1], decode_responses=True,
            socket_timeout=0.3, socket_connect_timeout=0.3, retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
        script = client.register_script(COUNT)
        sent = SentScript(client, script, ["n"], [1])  # its handshake times out
        with pytest.raises(StoreUnavailable):
            sent.reply()
        listener.setblocking(False)
        attempts = 0
        while True:
            try:
                listener.accept()[0].close()
            except BlockingIOError:
                break
            attempts += 1
    # one round of connecting, as a plain call makes: reply() did not start another
    assert attempts == 1
    assert in_use(client) == 0
