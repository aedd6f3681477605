"""``memstrata mcp`` through the SDK's own client, over stdio and Streamable HTTP.

The server runs as a subprocess exactly as a user starts it (``memstrata mcp``), on the
test's Redis namespace and PostgreSQL database; a real Celery worker drains what
``remember`` queued.  Each transport goes the whole way: list the tools, remember a turn,
wait for the worker, recall it, explain the decision, read the STM resource, retract the
item, erase the user; and the errors a client sees are one line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent, TextResourceContents

from memstrata.core.ids import user_key
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from tests.conftest import REDIS_URL
from tests.integration import authority_db
from tests.integration.conftest import CeleryProcess, process_env, shard_idle, wait_until

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url

MEMSTRATA = Path(sys.executable).with_name("memstrata")
TURN = [
    {
        "role": "user",
        "content": "createOrder on payment-service keeps timing out in prod-k8s. "
        "Don't restart the prod database.",
    },
    {"role": "assistant", "content": "Understood: I will not restart the prod database."},
]

Open = Callable[[], AbstractAsyncContextManager[ClientSession]]


@pytest.fixture
def settings(namespace: str, tmp_path: Path, pg_url: str) -> Settings:
    """The test's stores; no LTM (no Milvus here): recall answers from PG + STM."""
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=namespace,
        postgres_url=pg_url,
        transcript_dir=tmp_path / "transcripts",
        ingest_claim_idle_ms=1000,
        ltm=LtmSettings(enabled=False, history_enabled=False),
    )


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def server_env(settings: Settings, tenant: str, **extra: str) -> dict[str, str]:
    # no key cache: a key revoked by the test fails on the server's next request
    return process_env(
        settings, {"MEMSTRATA_MCP__TENANT": tenant, "MEMSTRATA_API_KEY_CACHE_S": "0", **extra}
    )


@pytest.fixture
def keys(res: Runtime, tenant: str) -> dict[str, str]:
    """The tenant and its API keys made in PostgreSQL as ``memstrata apikey create`` does."""
    res.owners.create_tenant(tenant)
    revoked = res.api_keys.create(tenant, name="old", scopes=["read", "write"])
    res.api_keys.revoke(revoked.info.key_id)
    rw = res.api_keys.create(tenant, name="agent", scopes=["read", "write"]).secret
    return {
        "rw": rw,
        "r": res.api_keys.create(tenant, name="reader", scopes=["read"]).secret,
        "revoked": revoked.secret,
        "forged": rw[:-2] + ("xx" if not rw.endswith("xx") else "yy"),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def text_of(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    out = result.structured_content
    assert isinstance(out, dict)
    return out


async def call_error(session: ClientSession, tool: str, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error, f"{tool} should have failed: {result}"
    message = text_of(result)
    assert "\n" not in message and "Traceback" not in message, message
    return message


async def stm_resource(
    session: ClientSession, tenant: str, user: str, layer: str = "stm"
) -> list[dict[str, Any]]:
    out = await session.read_resource(f"memstrata://{tenant}/{user}/{layer}")
    (content,) = out.contents
    assert isinstance(content, TextResourceContents)
    items: list[dict[str, Any]] = json.loads(content.text)
    return items


def drained(res: Runtime) -> bool:
    return all(shard_idle(res, s) for s in range(res.settings.ingest_shards))


async def whole_way(
    session: ClientSession, res: Runtime, worker: CeleryProcess, tenant: str
) -> None:
    """The scenario both transports must pass, from the client's side."""
    tools = {t.name for t in (await session.list_tools()).tools}
    assert tools == {"remember", "recall", "forget", "explain"}
    templates = (await session.list_resource_templates()).resource_templates
    assert sorted(t.uri_template for t in templates) == [
        "memstrata://{tenant}/{user}/ltm", "memstrata://{tenant}/{user}/stm"
    ]  # fmt: skip

    # remember a turn; the real worker extracts it
    before_turn = time.time()
    got = await call(session, "remember", user_id="alice", session_id="s1", messages=TURN,
                     turn_id="turn-1")  # fmt: skip
    assert got["turn_id"] == "turn-1" and got["message_ids"] == ["turn-1.0", "turn-1.1"]
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: drained(res), "the worker to drain the turn", worker=worker)
    )
    stored = res.stm.recent("alice", tenant_id=tenant)
    assert stored, "the worker stored nothing"
    restart = [i for i in stored if "restart" in i.summary.lower()]
    assert restart, [i.summary for i in stored]

    # recall finds it, with its id, layer and source messages
    out = await call(session, "recall", user_id="alice", session_id="s1",
                     query="may I restart the prod database?")  # fmt: skip
    assert "restart" in out["text"].lower()
    by_id = {i["memory_id"]: i for i in out["items"]}
    item_id = restart[0].id
    assert item_id in by_id and by_id[item_id]["layer"] == "redis_stm"
    assert by_id[item_id]["message_ids"][0].startswith("turn-1.")
    # as of a moment before the turn, memory did not hold it yet
    then = await call(session, "recall", user_id="alice", session_id="s1",
                      query="may I restart the prod database?", as_of=before_turn)  # fmt: skip
    assert item_id not in {i["memory_id"] for i in then["items"]}
    assert "as_of" in await call_error(session, "recall", user_id="alice", session_id="s1",
                                       query="restart?", as_of=-1.0)  # fmt: skip

    # explain shows the decision that stored it (and only this turn's)
    why = await call(session, "explain", user_id="alice", session_id="s1", turn_id="turn-1",
                     verdict="written")  # fmt: skip
    assert item_id in {d["memory_id"] for d in why["decisions"]}
    assert all(d["verdict"] == "written" for d in why["decisions"])
    none = await call(session, "explain", user_id="alice", session_id="s1", turn_id="turn-9")
    assert none["decisions"] == []

    # the STM resource lists it; another tenant's URI shows nothing
    assert item_id in {i["memory_id"] for i in await stm_resource(session, tenant, "alice")}
    with pytest.raises(Exception, match="no resource"):
        await stm_resource(session, "someone-else", "alice")
    # the LTM resource lists her long-term cards (one written here: no session ended)
    from memstrata.core.ltm.card import CardDraft

    card = res.ledger.write(CardDraft(
        tenant_id=tenant, user_id=user_key("alice"), canonical_key="episode:mcp",
        memory_type="episode", title="prod database", summary="Never restart the prod database",
        source_type="session_episode", source_message_ids=["turn-1.0"],
    )).memory_id  # fmt: skip
    cards = await stm_resource(session, tenant, "alice", "ltm")
    assert [(c["memory_id"], c["user_id"]) for c in cards] == [(card, "alice")]
    with pytest.raises(Exception, match="no resource"):
        await stm_resource(session, "someone-else", "alice", "ltm")

    # errors are one line: bad arguments, unknown user, unknown item
    assert "top_k" in await call_error(session, "recall", user_id="alice", session_id="s1",
                                       query="x", top_k=0)  # fmt: skip
    assert f"no user 'nobody' in tenant '{tenant}'" in await call_error(
        session, "recall", user_id="nobody", session_id="s1", query="restart?"
    )
    assert "either messages or fact" in await call_error(
        session, "remember", user_id="alice", session_id="s1"
    )
    assert "no STM item" in await call_error(
        session, "forget", user_id="alice", memory_id="m_doesnotexist"
    )
    too_long = await call_error(session, "recall", user_id="张" * 30, session_id="s1", query="x")
    assert "invalid user_id '张张" in too_long and "at most 79 UTF-8 bytes" in too_long

    # forget one item: gone from recall
    done = await call(session, "forget", user_id="alice", memory_id=item_id)
    assert done == {**done, "action": "retracted", "layer": "stm", "changed": True}
    out = await call(session, "recall", user_id="alice", session_id="s1",
                     query="may I restart the prod database?")  # fmt: skip
    assert item_id not in {i["memory_id"] for i in out["items"]}

    # a fact as a one-message turn, then erase the user: nothing is left
    await call(session, "remember", user_id="alice", session_id="s2",
               fact="Please answer in Chinese, conclusion first.")  # fmt: skip
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: drained(res), "the worker to drain the fact", worker=worker)
    )
    dry = await call(session, "forget", user_id="alice", dry_run=True)
    assert dry["action"] == "would_erase" and dry["counts"]["redis.keys"] > 0
    gone = await call(session, "forget", user_id="alice")
    assert gone["action"] == "erased" and gone["counts"]["l0.files"] >= 1
    assert await stm_resource(session, tenant, "alice") == []
    assert res.stm.recent("alice", tenant_id=tenant) == []

    # an external user id (an email) round-trips: remember -> recall -> the resource
    email = "alice@example.com"
    await call(session, "remember", user_id=email, session_id="s3", messages=TURN)
    await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: drained(res), "the worker to drain the email's turn",
                           worker=worker)
    )  # fmt: skip
    stored = res.stm.recent(user_key(email), tenant_id=tenant)  # stored under its key part
    assert stored and user_key(email) != email
    out = await call(session, "recall", user_id=email, session_id="s3",
                     query="may I restart the prod database?")  # fmt: skip
    assert "restart" in out["text"].lower()
    assert {i.id for i in stored} & {i["memory_id"] for i in out["items"]}
    listed = await stm_resource(session, tenant, quote(email, safe=""))
    assert {i["memory_id"] for i in listed} == {i.id for i in stored}
    # decoded once: the URI of the user literally named "alice%40example.com" is not hers
    assert await stm_resource(session, tenant, quote(quote(email, safe=""), safe="")) == []
    gone = await call(session, "forget", user_id=email)
    assert gone["action"] == "erased" and res.stm.recent(user_key(email), tenant_id=tenant) == []


# ---------------------------------------------------------------------------- stdio


def test_stdio_transport_the_whole_way(
    res: Runtime, celery_worker: CeleryProcess, tenant: str
) -> None:
    params = StdioServerParameters(
        command=str(MEMSTRATA),
        args=["mcp", "--transport", "stdio", "--tenant", tenant],
        env=server_env(res.settings, "default"),  # --tenant wins over the setting
    )

    async def scenario() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await whole_way(session, res, celery_worker, tenant)

    anyio.run(scenario)


# ---------------------------------------------------------------------------- http


@pytest.fixture
def http_server(res: Runtime, tenant: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path / "mcp-http.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(MEMSTRATA), "mcp", "--transport", "http", "--port", str(port)],
            env=server_env(res.settings, "default"),  # the tenant comes from the key
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mcp http server did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def http_session(url: str, key: str | None) -> Open:
    @asynccontextmanager
    async def open_session() -> AsyncIterator[ClientSession]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as client,
            streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    return open_session


def test_http_transport_the_whole_way(
    res: Runtime, celery_worker: CeleryProcess, tenant: str, keys: dict[str, str],
    http_server: str,
) -> None:  # fmt: skip
    async def scenario() -> None:
        async with http_session(http_server, keys["rw"])() as session:
            await whole_way(session, res, celery_worker, tenant)

    anyio.run(scenario)


@pytest.mark.parametrize("which", [None, "wrong", "forged", "revoked"])
def test_http_refuses_a_missing_wrong_or_revoked_key(
    keys: dict[str, str], http_server: str, which: str | None
) -> None:
    key = {None: None, "wrong": "msk_0123456789ab_" + "x" * 43}.get(which) or keys.get(which or "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    reply = httpx.post(f"{http_server}/mcp", json=body, headers=headers, timeout=10)
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"].startswith("Bearer")
    assert "tools" not in reply.text

    async def scenario() -> None:
        async with http_session(http_server, key)() as session:
            await session.list_tools()

    with pytest.raises(BaseException):  # noqa: B017 - the SDK surfaces the 401 its own way
        anyio.run(scenario)


def test_http_key_scopes_and_revocation_take_effect(
    res: Runtime, tenant: str, keys: dict[str, str], http_server: str
) -> None:
    async def scenario() -> None:
        async with http_session(http_server, keys["r"])() as session:
            assert "lacks the 'write' scope" in await call_error(
                session, "remember", user_id="alice", session_id="s1", fact="I like tea."
            )
            # a read key reads: the tenant is the key's (no such user there yet)
            assert f"in tenant '{tenant}'" in await call_error(
                session, "recall", user_id="alice", session_id="s1", query="tea?"
            )

    anyio.run(scenario)
    (reader,) = [k for k in res.api_keys.list(tenant) if k.name == "reader"]
    res.api_keys.revoke(reader.key_id)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {keys['r']}"}
    reply = httpx.post(f"{http_server}/mcp", json=body, headers=headers, timeout=10)
    assert reply.status_code == 401
