"""The ``memstrata`` console script: :func:`memstrata.ops.cli.main`, or one line naming the
extra when the install is the client alone (``pip install memstrata`` has no CLI stack)."""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from memstrata.ops.cli import main as cli_main
    except ImportError as exc:
        from memstrata.core.errors import missing_extra

        sys.stderr.write(f"memstrata: {missing_extra('server', 'the command line', exc)}\n")
        return 1
    return cli_main()
