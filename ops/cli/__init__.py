"""The ``memstrata`` console entry point: one subcommand per role.

    memstrata up [--exit-after-demo]   worker + Beat + Flower, the demo, then run until Ctrl-C
    memstrata worker | beat | flower   one Celery role in the foreground (exec)
    memstrata demo [--inline]          feed the bundled sessions through record_turn()
    memstrata inspect | explain        what is in STM, and why each candidate was (not) stored
                                       (explain --card ID: what was merged into a card, why)
    memstrata sweep [--dry-run]        run the expire sweep once
    memstrata migrate                  bring PostgreSQL (Alembic) and the Redis layout up to date
    memstrata replay [...]             replay public agent sessions (ops/replay/)
    memstrata bench <name>             benchmarks (ops/bench)
    memstrata ltm status|reindex|requeue  LTM projections: counts, rebuild-and-swap, dead letters
    memstrata dead-letters list|retry|drop  turns the ingest drain gave up on
    memstrata milvus [DB_FILE] [ADDR]  the local milvus-lite server in the foreground
    memstrata retract fact|card ...    undo a promotion (PG fact or LTM card), audited
    memstrata rebuild --user --session re-derive a session's STM from its L0 transcript
    memstrata forget [--dry-run]       forget long-inactive low-importance LTM cards
    memstrata consolidate [--user]     merge same-topic and near-duplicate LTM cards now
    memstrata erase --tenant --user    remove one owner's data from every layer [--dry-run]
    memstrata tenant | user | apikey   tenants, users (any id string) and REST API keys
    memstrata api                      the REST service (FastAPI + uvicorn, OpenAPI)
    memstrata mcp [--transport stdio|http]  serve memory to MCP clients (needs [mcp])
    memstrata status [--json]          workers, Beat jobs, backlog, dead letters (3: attention)
    memstrata metrics --port N         serve /metrics: counters of the namespace and its state

Settings come from ``MEMSTRATA_*`` environment variables (``core.settings``), read when a
command starts.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from memstrata.core.errors import MemstrataError
from memstrata.core.redact import redact
from memstrata.core.runtime import close_runtime
from memstrata.ops.cli import (
    admin,
    bench,
    deadletters,
    erase,
    lifecycle,
    ltm,
    mcp,
    memory,
    observe,
    roles,
)
from memstrata.ops.runtime import CliError

# roles that serve or count metrics for the deployment: set PROMETHEUS_MULTIPROC_DIR first
# (`api` is the REST service's command, where it is installed)
_LONG_RUNNING = frozenset({"api", "worker", "beat", "metrics", "up"})
_MODEL_PREFIX = re.compile(r"^[A-Z][A-Za-z]+\.(?=[a-z_]+: )")


def _replay(argv: Sequence[str]) -> int:
    """Everything after ``replay`` goes to ``ops.replay`` untouched (its own options)."""
    from memstrata.ops import replay

    code: int = replay.main(list(argv))
    return code


def _version() -> str:
    from memstrata import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memstrata", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"memstrata {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    bench.add_bench(sub)
    roles.add_up(sub)
    roles.add_celery_roles(sub)
    roles.add_demo(sub)
    memory.add_inspect_explain(sub)
    memory.add_sweep(sub)
    roles.add_migrate(sub)
    # listed for --help only: main() hands `replay ...` to ops.replay before parsing
    sub.add_parser("replay", help="replay public agent sessions (ops/replay/; --help there)")
    memory.add_recall(sub)
    memory.add_compress(sub)
    ltm.add_ltm(sub)
    deadletters.add_dead_letters(sub)
    lifecycle.add_lifecycle(sub)
    erase.add_erase(sub)
    admin.add_admin(sub)
    mcp.add_mcp(sub)
    observe.add_status(sub)
    observe.add_metrics(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["replay"]:
        return _replay(args_in[1:])
    parser = build_parser()
    args = parser.parse_args(args_in)
    try:
        if args.command in _LONG_RUNNING:  # metrics files shared with the workers' folder
            from memstrata.core.metrics import configure_multiprocess
            from memstrata.core.settings import load_settings

            configure_multiprocess(load_settings())
        code: int = args.func(args)
    except (CliError, MemstrataError, ValidationError) as exc:
        # one line, never a traceback, never a password (a URL in a vendor error)
        if isinstance(exc, ValidationError):  # bad input or settings: the first problem
            first = exc.errors(include_url=False, include_input=False)[0]
            cause = first.get("ctx", {}).get("error")
            what = str(cause) if isinstance(cause, MemstrataError) else first["msg"]
            message = f"{'.'.join(str(p) for p in first['loc']) or exc.title}: {what}"
        else:  # a model's field error reads "RecallRequest.top_k: ...": the CLI names the field
            message = _MODEL_PREFIX.sub("", str(exc), count=1)
        print(f"memstrata {args.command}: {' '.join(redact(message).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memstrata … | head`: stop quietly, like other CLI tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        close_runtime()
    return code
