"""Run a command with stderr on a pseudo-terminal, as an operator's shell would."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from collections.abc import Sequence

from tests.integration.conftest import REPO_ROOT


def run_on_pty(argv: Sequence[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal; (exit code, stdout, what the terminal got)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=follower, stdin=subprocess.DEVNULL, timeout=180)  # fmt: skip
        os.close(follower)
        follower = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return proc.returncode, proc.stdout.decode(), drawn.decode(errors="replace")
