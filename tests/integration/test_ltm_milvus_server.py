"""The milvus-lite launcher: one server per data file, logs kept in our folder, SIGTERM."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.errors import MilvusServerError
from memstrata.core.ltm.milvus import MilvusConnection
from memstrata.core.ltm.milvus_server import MilvusServer, free_port

pytestmark = pytest.mark.integration


def test_server_serves_refuses_a_second_one_on_its_file_and_stops(tmp_path: Path) -> None:
    server = MilvusServer(tmp_path / "a.db", f"127.0.0.1:{free_port()}", log_dir=tmp_path / "logs")
    with server:
        conn = MilvusConnection(server.uri, timeout_s=5)
        assert conn.client.list_collections() == []
        conn.close()
        second = MilvusServer(tmp_path / "a.db", f"127.0.0.1:{free_port()}")
        with pytest.raises(MilvusServerError, match="already serves"):
            second.start()
        pid = server.pid
        assert pid is not None
    assert server.proc is None
    glog = [p.name for p in (tmp_path / "logs").iterdir() if p.name.startswith("milvus.")]
    assert glog  # GLOG_log_dir honoured: the server's logs are ours, not in /tmp
    again = MilvusServer(tmp_path / "a.db", f"127.0.0.1:{free_port()}")
    again.start()  # the lock went with the stopped server
    again.stop()
    again.stop()  # idempotent


def test_bad_names_and_addresses_are_refused_before_starting(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        MilvusServer(tmp_path / "bad name.db", "127.0.0.1:1")
    with pytest.raises(InvalidInput):
        MilvusServer(tmp_path / "ok.db", "127.0.0.1;rm -rf /")


def test_the_server_does_not_outlive_a_killed_launcher(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path\n"
        "from memstrata.core.ltm.milvus_server import MilvusServer, free_port\n"
        "s = MilvusServer(Path(sys.argv[1]), f'127.0.0.1:{free_port()}'); s.start()\n"
        "print(s.pid, flush=True); time.sleep(60)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "orphan.db")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert launcher.stdout is not None
    server_pid = int(launcher.stdout.readline())
    launcher.kill()
    launcher.wait(10)
    launcher.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(server_pid):
        time.sleep(0.1)
    assert not _alive(server_pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie awaiting its (gone) parent's reaper
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(") ", 1)[1][0] != "Z"
    return True
