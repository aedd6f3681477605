"""L0: the append-only raw transcript (replay, audit, re-extraction; never injected whole)."""
