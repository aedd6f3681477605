"""Session context compression (seed 1 §十六): a derived view of a session within a budget.

L0 is never changed.  Light compression stubs digested tool outputs; formal compression
folds older process into the seed's summary sections; the near-field stays verbatim.
Entry points: :func:`engine.compress` (pure), :func:`service.compress_session` (reads L0
and STM) and :func:`service.compress_cached` (the same, through the Redis view cache).

Import from the submodules.  This package imports nothing, so that the pure parts
(engine, model, tokens) load no Redis client.
"""
