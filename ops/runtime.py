"""What the ``memstrata`` commands and ``memstrata up`` share: the checked runtime, L0's
absolute folder, the worker ping and the user-facing error.

Kept apart from ``ops.cli`` so that ``ops.up`` (which the CLI starts) needs nothing from
the CLI package: the dependency runs one way, ``ops.cli`` → ``ops.up`` → here.
"""

from __future__ import annotations

import os

from memstrata.core.redact import redact
from memstrata.core.runtime import Runtime, get_runtime
from memstrata.core.settings import load_settings


class CliError(Exception):
    """A problem the user can fix; printed without a traceback, exit code 1."""


def connected_runtime() -> Runtime:
    """This process's runtime, once Redis has answered a ping (else a :class:`CliError`)."""
    res = get_runtime()
    try:
        res.redis.ping()
    except Exception as exc:
        raise CliError(
            f"Redis is not reachable at {redact(str(res.settings.redis_url))} "
            f"({redact(str(exc))}); "
            "set MEMSTRATA_REDIS_URL or run bash ops/quickstart.sh"
        ) from exc
    return res


def absolute_transcript_dir() -> None:
    """Pin L0's folder to an absolute path so every child process reads the same files."""
    settings = load_settings()
    os.environ["MEMSTRATA_TRANSCRIPT_DIR"] = str(settings.transcript_dir.resolve())


def workers_answering(timeout_s: float = 1.0) -> list[str]:
    """Names of the Celery workers of this key namespace that answered a ping."""
    from memstrata.tasks.app import app

    replies = app.control.ping(timeout=timeout_s) or []
    return sorted(name for reply in replies for name in reply)
