"""Session context compression (seed 1 §十六): a derived view of a session within a budget.

L0 is never changed.  Light compression stubs digested tool outputs; formal compression
folds older process into the seed's summary sections; the near-field stays verbatim.
Entry points: :func:`compress` (pure), :func:`compress_session` (reads L0 and STM) and
:func:`compress_cached` (the same, through the Redis view cache).
"""

from core.compress.engine import compress
from core.compress.errors import BudgetTooSmall, TokenizerUnavailable
from core.compress.explain import explain
from core.compress.model import (
    CompressedView,
    CompressionPolicy,
    DependencyClass,
    Level,
    Part,
)
from core.compress.service import compress_cached, compress_session, session_items
from core.compress.tokens import TokenCounter, default_counter

__all__ = [
    "BudgetTooSmall",
    "CompressedView",
    "CompressionPolicy",
    "DependencyClass",
    "Level",
    "Part",
    "TokenCounter",
    "TokenizerUnavailable",
    "compress",
    "compress_cached",
    "compress_session",
    "default_counter",
    "explain",
    "session_items",
]
