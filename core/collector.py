"""The Python garbage collector's schedule in a server process (a worker, the REST service).

A drain allocates several container objects per candidate (candidates, judgements,
decisions, items, their dicts), and a batch of 200 turns keeps ~1,600 of each alive until
it is written, so they survive generation 0 and are traversed again by the collections of
generations 1 and 2.  At CPython's default schedule (a generation-0 collection every 700
net allocations) the collector was about a quarter of a drain's CPU, and one full
collection of a process holding the runtime (~120k objects) took ~50 ms, in the middle of
whatever call it fell on (issue 17, docs/PERFORMANCE.md).  Reference counting frees
everything that is not a cycle; cycles (an exception's traceback and its frames, say) wait
for a collection of their generation, which now comes ~70 times less often: the ingest
benchmark's workers measured no change of resident memory.  The thresholds mean this on
CPython 3.11–3.13; 3.14's incremental collector reads the later ones differently.
"""

from __future__ import annotations

import gc


def tune_collector(threshold0: int) -> None:
    """Collect generation 0 after ``threshold0`` net allocations instead of 700, and move
    what is alive now (modules, the runtime, lexicons: built once and kept for the life of
    the process) out of the collector's sight (``gc.freeze``), so full collections do not
    traverse it.  No collection first: in a forked child it would write to every object
    inherited from the parent, copying the shared pages.  ``threshold0`` 0 leaves CPython's
    schedule as it is."""
    if threshold0 <= 0:
        return
    gc.freeze()
    _, threshold1, threshold2 = gc.get_threshold()
    gc.set_threshold(threshold0, threshold1, threshold2)
