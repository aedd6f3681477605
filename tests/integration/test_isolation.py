"""``memstrata up`` never attaches to a Milvus it did not start (another deployment's)."""

from __future__ import annotations

import socket
import subprocess
import sys
from urllib.parse import urlparse

import pytest

from memstrata.core.runtime import Runtime
from tests.integration.conftest import REPO_ROOT, process_env

pytestmark = pytest.mark.integration


def test_up_refuses_a_milvus_address_that_is_already_served(res: Runtime) -> None:
    port = urlparse(res.settings.ltm.milvus_uri).port
    assert port is not None
    with socket.socket() as other:  # another deployment's server on this namespace's address
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))
        other.listen()
        out = subprocess.run(
            [sys.executable, "-m", "memstrata.ops.cli", "up", "--no-demo", "--exit-after-demo"],
            cwd=REPO_ROOT, env=process_env(res.settings, {"MEMSTRATA_FLOWER_PASSWORD": "x1y2z3"}),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"already listens on 127.0.0.1:{port}" in out.stderr and "never attaches" in out.stderr
    assert "Traceback" not in out.stderr
