"""A throwaway PostgreSQL cluster that a test or a benchmark may stop and start.

Never the shared server: the fault suite and ``memstrata bench faults`` stop it on purpose.

``initdb`` in a fresh temp folder with the newest server binaries under
``/usr/lib/postgresql/<version>/bin`` (as ``ops/setup_env.sh`` finds them), trust
authentication for 127.0.0.1 only, its own port and socket folder.  PostgreSQL refuses
to run as root, so under root every server command runs as the ``postgres`` user, and
the folder lives directly under the system temp folder (pytest's own is root-only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from memstrata.core import migrations
from memstrata.core.ltm.milvus_server import free_port

PG_ROOT = Path("/usr/lib/postgresql")
START_TIMEOUT_S = 60


class NoPostgresServer(RuntimeError):
    """No PostgreSQL server binaries are installed (tests skip, the benchmark says so)."""


def server_bin() -> Path:
    """The newest installed server's ``bin`` folder; :class:`NoPostgresServer` if none."""
    versions = sorted(
        (p for p in PG_ROOT.glob("*") if (p / "bin" / "initdb").exists()),
        key=lambda p: tuple(int(x) for x in p.name.split(".") if x.isdigit()),
    )
    if not versions:
        raise NoPostgresServer(f"no PostgreSQL server binaries under {PG_ROOT}")
    return versions[-1] / "bin"


class PgCluster:
    """One cluster in ``folder`` on 127.0.0.1:``port``; ``start``/``stop`` as often as needed."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.data = folder / "data"
        self.bin = server_bin()
        self._as_postgres = os.geteuid() == 0

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed: {done.stderr or done.stdout}\n{tail}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"),
                  "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start")  # fmt: skip

    def stop(self) -> None:
        """Fast shutdown: open connections are cut, as in a real outage."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


@contextmanager
def pg_cluster() -> Iterator[PgCluster]:
    """A started throwaway cluster, stopped and deleted afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="memstrata-pg-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        cluster = PgCluster(folder, free_port())
        cluster.init()
        cluster.start()
        try:
            yield cluster
        finally:
            if cluster.running:
                cluster.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def migrated_cluster(dbname: str = "memstrata") -> Iterator[PgCluster]:
    """A started throwaway cluster with ``dbname`` migrated to every branch's head."""
    with pg_cluster() as cluster:
        with psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:  # fmt: skip
            conn.execute(f'CREATE DATABASE "{dbname}"'.encode())
        migrations.upgrade(cluster.url(dbname))
        yield cluster
