"""The throwaway PostgreSQL cluster of the tests (``ops/bench/common/scratch_pg.py``).

A test that needs one is skipped when no server binaries are installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memstrata.ops.bench.common import scratch_pg
from memstrata.ops.bench.common.scratch_pg import NoPostgresServer, PgCluster

__all__ = ["PgCluster", "migrated_cluster", "pg_cluster"]


@contextmanager
def pg_cluster() -> Iterator[PgCluster]:
    try:
        scratch_pg.server_bin()
    except NoPostgresServer as exc:
        pytest.skip(str(exc))
    with scratch_pg.pg_cluster() as cluster:
        yield cluster


@contextmanager
def migrated_cluster(dbname: str = "memstrata") -> Iterator[PgCluster]:
    try:
        scratch_pg.server_bin()
    except NoPostgresServer as exc:
        pytest.skip(str(exc))
    with scratch_pg.migrated_cluster(dbname) as cluster:
        yield cluster
