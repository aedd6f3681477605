"""Explain mode: why each tool result was kept, stubbed or folded, as readable text."""

from __future__ import annotations

from memstrata.core.compress.model import CompressedView


def explain(view: CompressedView) -> str:
    """One line per tool result (class, action, reason), after the view's headline figures."""
    head = (
        f"session {view.session_id}: level {view.level.value}, {view.raw_tokens} → "
        f"{view.view_tokens} tokens (ratio {view.ratio:.1f}:1, budget {view.budget_tokens}, "
        f"near-field {view.near_field_tokens}, tokenizer {view.tokenizer})"
    )
    rows = [head]
    for t in view.tool_results:
        action = t.action.value if t.action is not None else "folded"
        near = " near-field" if t.near_field else ""
        rows.append(
            f"{t.tool_call_id} {t.tool} {t.tokens}t: {t.dependency.value} → {action}{near}"
            f" — {t.reason}"
        )
    return "\n".join(rows)
