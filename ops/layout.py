"""Data of earlier Redis and L0 layouts, brought up to date (``memstrata migrate``, ``up``).

Two one-way steps, each idempotent, in order: the owner identity's adoption of no-tenant
keys and folders (``core/owner_layout.py``), then the STM indexes' newest-first order
(``core/stm/index_order.py``, which must see the adopted key names).  Both run before
workers start: an older entry is never lost meanwhile, but is swept or listed oddly.
"""

from __future__ import annotations

import sys
import time

from memstrata.core.owner_layout import adopt_redis, adopt_transcripts
from memstrata.core.runtime import Runtime
from memstrata.core.stm.index_order import Negated, negate_legacy_scores


def upgrade_layouts(runtime: Runtime) -> list[str]:
    """Run both steps on the runtime's namespace and transcript folder; one line per
    thing done or left in place (none when there was nothing to do)."""
    ns = runtime.settings.key_namespace
    lines: list[str] = []
    keys = adopt_redis(runtime.redis, ns)
    files = adopt_transcripts(runtime.settings.transcript_dir)
    if keys.keys or keys.members or files.files:
        lines.append(f"owner layout: {keys.keys} keys, {keys.members} index members and "
                     f"{files.files} transcript files moved into tenant 'default'")  # fmt: skip
    lines += [f"owner layout: left in place (the new layout holds it too): {name}"
              for name in keys.conflicts + files.conflicts]  # fmt: skip
    last = [time.monotonic()]

    def progress(done: Negated) -> None:  # a long job says how far it is, every 5 s
        if time.monotonic() - last[0] >= 5.0:
            last[0] = time.monotonic()
            print(f"STM index order: {done.keys} indexes turned so far", file=sys.stderr)

    turned = negate_legacy_scores(runtime.redis, ns, progress=progress)
    if turned.keys:
        lines.append(f"STM index order: {turned.entries} entries of {turned.keys} indexes "
                     "now newest first")  # fmt: skip
    return lines
