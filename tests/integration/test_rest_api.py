"""The REST service as a remote agent sees it: a real ``memstrata api`` (uvicorn) in a
subprocess on a free port, real HTTP clients (httpx, ``Memory(url=...)``, ``AsyncMemory``),
real Redis and PostgreSQL, and schemathesis fuzzing every route from ``/openapi.json``.

The service's drain kicks go to a Celery queue no worker reads; the test drains inline
from the same L0 folder and Redis namespace (what the ingest task would run).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.checks import content_type_conformance, not_a_server_error

from memstrata import (
    AsyncMemory,
    Conflict,
    Forbidden,
    InvalidInput,
    Memory,
    PayloadTooLarge,
    Unauthorized,
    UnknownTenant,
    UnknownUser,
)
from memstrata.core.ids import user_key
from memstrata.core.ltm.config import LtmSettings
from memstrata.core.ltm.milvus_server import free_port
from memstrata.core.runtime import Runtime
from memstrata.core.settings import Settings, load_settings
from tests.conftest import REDIS_URL, _purge
from tests.integration.conftest import REPO_ROOT, process_env
from tests.integration.test_client import TURN, drain
from tests.integration.test_lifecycle_env import lifecycle_pg

pytestmark = pytest.mark.integration
__all__ = ["lifecycle_pg"]


ADMIN_KEY = "deployment-admin-" + uuid.uuid4().hex  # MEMSTRATA_ADMIN_API_KEY of the service


@dataclass
class Service:
    url: str
    rt: Runtime
    tenant: str
    keys: dict[str, str]  # scope set -> secret
    log: Path


@pytest.fixture(scope="module")
def api_settings(tmp_path_factory: pytest.TempPathFactory, lifecycle_pg: str) -> Settings:
    return load_settings(
        redis_url=REDIS_URL,
        key_namespace=f"t{uuid.uuid4().hex[:10]}",
        transcript_dir=tmp_path_factory.mktemp("api") / "transcripts",
        postgres_url=lifecycle_pg,
        ltm=LtmSettings(enabled=False),
        api_max_body_bytes=64 * 1024,
        api_key_cache_s=0.0,  # a revoked key fails on the next request
        admin_api_key=SecretStr(ADMIN_KEY),
    )


@pytest.fixture(scope="module")
def service(api_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    rt = Runtime(api_settings)
    tenant = "api-" + api_settings.key_namespace
    rt.owners.create_tenant(tenant, name="REST test")
    rt.owners.create_tenant(tenant + "-b")
    keys = {
        "rw": rt.api_keys.create(tenant, name="agent", scopes=["read", "write"]).secret,
        "r": rt.api_keys.create(tenant, name="reader", scopes=["read"]).secret,
        "all": rt.api_keys.create(tenant, name="ops", scopes=["read", "write", "admin"]).secret,
        "b": rt.api_keys.create(tenant + "-b", name="other", scopes=["read", "write"]).secret,
    }
    log = tmp_path_factory.mktemp("api-log") / "api.log"
    with running_api(api_settings, log) as url:
        try:
            yield Service(url, rt, tenant, keys, log)
        finally:
            _purge(redis.Redis.from_url(REDIS_URL), api_settings.key_namespace)
            rt.close()


@contextlib.contextmanager
def running_api(settings: Settings, log: Path, *, workers: int = 1) -> Iterator[str]:
    """``memstrata api`` on a free port with ``settings``; its URL once it answers."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memstrata.ops.cli", "api", "--port", str(port),
             "--workers", str(workers), "--no-access-log", "--log-level", "warning"],
            cwd=REPO_ROOT, env=process_env(settings), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"memstrata api did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_health_needs_no_key_and_every_v1_route_does(service: Service) -> None:
    assert httpx.get(service.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(service.url + "/readyz").json() == {"status": "ready"}
    for method, path in [("POST", "/v1/turns"), ("POST", "/v1/recall"),
                         ("GET", "/v1/memories?user_id=u"), ("GET", "/v1/cards?user_id=u"),
                         ("GET", "/v1/decisions"),
                         ("DELETE", "/v1/users/u"), ("GET", "/v1/admin/users"),
                         ("GET", "/v1/tenants"), ("POST", "/v1/tenants"),
                         ("POST", "/v1/tenants/x/apikeys")]:  # fmt: skip
        for headers in ({}, bearer("msk_000000000000_wrong"), bearer("nonsense")):
            r = httpx.request(method, service.url + path, headers=headers, json={})
            assert r.status_code == 401, (method, path, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["type"] == "urn:memstrata:error:Unauthorized"


def test_the_remote_client_round_trips_through_the_service(service: Service) -> None:
    user = "alice@example.com"
    with Memory(url=service.url, api_key=service.keys["all"]) as m:
        receipt = m.record_turn(user_id=user, session_id="s_123", task_id="PAY-4521",
                                messages=TURN, turn_id="turn-1")  # fmt: skip
        again = m.record_turn(user_id=user, session_id="s_123", task_id="PAY-4521",
                              messages=TURN, turn_id="turn-1")  # fmt: skip
        assert again.already_recorded and again.turn_id == receipt.turn_id == "turn-1"
        drain(service.rt)
        out = m.recall("that endpoint still times out", user_id=user, session_id="s_123",
                       task_id="PAY-4521", explain=True)  # fmt: skip
        assert "The database is not the cause" in out.text and out.explain is not None
        items = m.inspect(user_id=user, session_id="s_123")
        assert items and {i.tenant_id for i in items} == {service.tenant}
        assert {i.user_id for i in items} == {user}  # the caller's id, not the key part
        raw = httpx.get(service.url + "/v1/memories", params={"user_id": user},
                        headers=bearer(service.keys["all"])).json()  # fmt: skip
        assert raw and {i["user_id"] for i in raw} == {user}
        # long-term cards: none yet (no session ended); one written is listed for the
        # caller's id, of the key's tenant only; a bad kind is a typed error
        assert m.cards(user_id=user) == []
        from memstrata.core.ltm.card import CardDraft

        card = service.rt.ledger.write(CardDraft(
            tenant_id=service.tenant, user_id=user_key(user), canonical_key="entity:anna",
            memory_type="entity", title="Anna: 3 memories", summary="Anna: stated on 3 cards",
            source_type="entity", source_card_ids=["ltm_a", "ltm_b", "ltm_c"],
        )).memory_id  # fmt: skip
        [listed] = m.cards(user_id=user, memory_type="entity")
        assert (listed.memory_id, listed.user_id, listed.source_card_ids) == (
            card, user, ["ltm_a", "ltm_b", "ltm_c"])  # fmt: skip
        with Memory(url=service.url, api_key=service.keys["b"]) as other:
            assert other.cards(user_id=user) == []
        with pytest.raises(InvalidInput, match="memory_type"):
            m.cards(user_id=user, memory_type="NOT A TYPE")
        assert m.explain(user_id=user, session_id="s_123", verdict="written")
        assert [u.user_id for u in m.admin.list_users()] == [user]
        assert m.admin.get_user(user).key == user_key(user)
        assert [t.tenant_id for t in m.admin.list_tenants()] == [service.tenant]
        with pytest.raises(Forbidden, match="cannot manage tenants"):
            m.admin.create_tenant("someone-else")
        with pytest.raises(Forbidden):
            m.admin.create_api_key(service.tenant + "-b")
        assert m.erase(user, dry_run=True).found
        assert m.erase(user).finished
        assert m.inspect(user_id=user) == []
        with pytest.raises(UnknownUser):
            m.admin.get_user(user)


def test_the_deployment_admin_key_creates_tenants_and_their_keys(service: Service) -> None:
    # Given the service's MEMSTRATA_ADMIN_API_KEY
    new = "made-" + uuid.uuid4().hex[:8]
    with Memory(url=service.url, api_key=ADMIN_KEY) as admin:
        # When it creates a tenant and a key of that tenant
        made = admin.admin.create_tenant(new, name="Made over REST")
        assert (made.tenant_id, made.name) == (new, "Made over REST")
        assert new in {t.tenant_id for t in admin.admin.list_tenants()}
        assert service.tenant in {t.tenant_id for t in admin.admin.list_tenants()}
        key = admin.admin.create_api_key(new, name="agent", scopes=["read", "write"])
        assert key.info.tenant_id == new and key.info.scopes == ["read", "write"]
        with pytest.raises(Conflict):
            admin.admin.create_tenant(new)
        with pytest.raises(UnknownTenant):
            admin.admin.create_api_key("no-such-" + new)
        # And it is no tenant's key: memory calls refuse it
        with pytest.raises(Unauthorized):
            admin.recall("q", user_id="u", session_id="s")
    # Then the new key works in the new tenant, and sees that tenant only
    with Memory(url=service.url, api_key=key.secret) as m:
        m.record_turn(user_id="carol@example.com", session_id="s1", messages=TURN)
    assert [u.user_id for u in service.rt.owners.list_users(new)] == ["carol@example.com"]
    # And a wrong admin key is no key at all
    r = httpx.get(service.url + "/v1/tenants", headers=bearer(ADMIN_KEY + "x"))
    assert r.status_code == 401


def test_without_an_admin_key_tenants_stay_on_the_cli(
    service: Service, api_settings: Settings, tmp_path: Path
) -> None:
    # Given a service (two workers: uvicorn's multiprocess path) with no MEMSTRATA_ADMIN_API_KEY
    off = api_settings.model_copy(update={"admin_api_key": None})
    with running_api(off, tmp_path / "api.log", workers=2) as url:
        # When a tenant's admin key asks to create a tenant, Then the answer says it is off
        with Memory(url=url, api_key=service.keys["all"]) as m:
            with pytest.raises(Forbidden, match="MEMSTRATA_ADMIN_API_KEY"):
                m.admin.create_tenant("never-" + uuid.uuid4().hex[:6])
            assert [t.tenant_id for t in m.admin.list_tenants()] == [service.tenant]
        # And the key that the other service accepts is no key here
        r = httpx.post(url + "/v1/tenants", headers=bearer(ADMIN_KEY), json={"tenant_id": "x"})
        assert r.status_code == 401 and r.json()["type"].endswith("Unauthorized")


def test_the_service_exposes_memstratas_metrics(service: Service) -> None:
    with Memory(url=service.url, api_key=service.keys["all"]) as m:
        said = [{"role": "user", "content": "The deploy window is Friday."}]
        m.record_turn(user_id="metrics@example.com", session_id="s1", messages=said)
    body = httpx.get(service.url + "/metrics/").text
    recorded = [line for line in body.splitlines()
                if line.startswith("memstrata_turns_recorded_total")]  # fmt: skip
    assert recorded and float(recorded[0].split()[-1]) >= 1
    assert "memstrata_ingest_backlog_turns" in body


def test_the_tenant_comes_from_the_key(service: Service) -> None:
    a = Memory(url=service.url, api_key=service.keys["rw"])
    b = Memory(url=service.url, api_key=service.keys["b"])
    a.record_turn(user_id="user:42", session_id="s1", messages=TURN)
    drain(service.rt)
    assert a.inspect(user_id="user:42")
    assert b.inspect(user_id="user:42") == []
    # a tenant_id in the body is refused, never obeyed
    r = httpx.post(service.url + "/v1/turns", headers=bearer(service.keys["b"]),
                   json={"user_id": "user:42", "session_id": "s1", "messages": TURN,
                         "tenant_id": service.tenant})  # fmt: skip
    assert r.status_code == 422 and r.json()["title"] == "InvalidInput"
    a.close()
    b.close()


def test_scopes_are_enforced(service: Service) -> None:
    with Memory(url=service.url, api_key=service.keys["r"]) as reader:
        with pytest.raises(Forbidden, match="write"):
            reader.record_turn(user_id="u", session_id="s", messages=TURN)
        with pytest.raises(Forbidden, match="admin"):
            reader.erase("u")
        assert reader.inspect(user_id="u") == []


def test_errors_are_typed_problems_without_tracebacks(service: Service) -> None:
    with Memory(url=service.url, api_key=service.keys["all"]) as m:
        with pytest.raises(InvalidInput, match="role"):
            m.record_turn(user_id="u", session_id="s", messages=[{"role": "robot"}])
        with pytest.raises(InvalidInput):
            m.record_turn(user_id="u", session_id="bad/session", messages=TURN)
        with pytest.raises(PayloadTooLarge):
            m.record_turn(user_id="u", session_id="s",
                          messages=[{"role": "user", "content": "x" * 100_000}])  # fmt: skip
    r = httpx.post(service.url + "/v1/recall", headers=bearer(service.keys["all"]),
                   content=b"{not json", timeout=5)  # fmt: skip
    assert r.status_code == 422 and "Traceback" not in r.text
    r = httpx.get(service.url + "/v1/nope", headers=bearer(service.keys["all"]))
    assert r.status_code == 404 and r.json()["title"] == "NotFound"


def test_a_revoked_key_stops_working(service: Service) -> None:
    new = service.rt.api_keys.create(service.tenant, name="temp", scopes=["read"])
    with Memory(url=service.url, api_key=new.secret) as m:
        assert m.inspect(user_id="u") == []
        service.rt.api_keys.revoke(new.info.key_id)
        with pytest.raises(Unauthorized, match="revoked"):
            m.inspect(user_id="u")
    with (
        Memory(url=service.url, api_key=new.secret[:-2] + "xx") as forged,
        pytest.raises(Unauthorized, match="unknown"),
    ):
        forged.inspect(user_id="u")


def test_async_memory_over_http(service: Service) -> None:
    async def run() -> None:
        async with AsyncMemory(url=service.url, api_key=service.keys["all"]) as m:
            await m.record_turn(user_id="张三", session_id="s9", messages=TURN)
            drain(service.rt)
            out = await m.recall("does it still time out?", user_id="张三", session_id="s9")
            assert "database is not the cause" in out.text
            assert await m.inspect(user_id="张三")
            assert await m.cards(user_id="张三", superseded=True) == []
            assert (await m.admin.get_user("张三")).user_id == "张三"

    asyncio.run(run())


@pytest.fixture(scope="module")
def api_schema(service: Service) -> Any:
    return schemathesis.openapi.from_url(service.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_every_route_from_its_own_schema(case: Any, service: Service) -> None:
    case.call_and_validate(
        headers=bearer(service.keys["all"]),
        checks=[not_a_server_error, content_type_conformance],
        timeout=10,
    )
