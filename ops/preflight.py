"""Reachability checks for the set-up scripts (``ops/quickstart.sh``, ``ops/run_tests.sh``).

    python -m memstrata.ops.preflight redis URL            exit 0 if Redis answers PING
    python -m memstrata.ops.preflight postgres URL         exit 0 if PostgreSQL accepts a connection
    python -m memstrata.ops.preflight createdb URL [DB…]   create the URL's database (and DBs)
                                                           if missing
    python -m memstrata.ops.preflight hostport URL         print "host port" of a URL

Every check uses a 2 s connect timeout, so a dead address costs seconds, not minutes.
URLs may carry a SQLAlchemy driver (``postgresql+psycopg://``); it is dropped here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

CONNECT_TIMEOUT_S = 2

DEFAULT_PORTS = {"redis": 6379, "rediss": 6380, "postgresql": 5432, "postgres": 5432}


def libpq_url(url: str, *, dbname: str | None = None) -> str:
    """``postgresql+psycopg://u@h:p/db`` → ``postgresql://u@h:p/<dbname or db>``."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    path = f"/{dbname}" if dbname is not None else parts.path
    return urlunsplit((scheme, parts.netloc, path, parts.query, parts.fragment))


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    return parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS.get(scheme, 0)


def redis_answers(url: str) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=CONNECT_TIMEOUT_S
        )
        return bool(client.ping())
    except redis.RedisError as exc:
        print(f"redis at {url}: {exc}", file=sys.stderr)
        return False


def postgres_answers(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(libpq_url(url, dbname="postgres"), connect_timeout=CONNECT_TIMEOUT_S):
            return True
    except psycopg.Error as exc:
        print(f"postgres at {host_port(url)}: {str(exc).strip()}", file=sys.stderr)
        return False


def create_databases(url: str, extra: Sequence[str]) -> list[str]:
    """Create the URL's database and ``extra`` ones where missing; returns those created."""
    import psycopg
    from psycopg import sql

    wanted = [urlsplit(url).path.lstrip("/") or "postgres", *extra]
    created = []
    with psycopg.connect(
        libpq_url(url, dbname="postgres"), connect_timeout=CONNECT_TIMEOUT_S, autocommit=True
    ) as conn:
        for name in dict.fromkeys(wanted):
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                created.append(name)
    return created


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    command, url, *rest = argv
    if command == "redis":
        return 0 if redis_answers(url) else 1
    if command == "postgres":
        return 0 if postgres_answers(url) else 1
    if command == "createdb":
        for name in create_databases(url, rest):
            print(f"created database {name}")
        return 0
    if command == "hostport":
        host, port = host_port(url)
        print(host, port)
        return 0
    print(f"unknown check {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
