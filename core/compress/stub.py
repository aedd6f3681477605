"""Light compression (seed 十六.2, first layer): a digested tool result becomes a stub.

The stub keeps what the agent needs to trust and re-find the result: the tool call id,
what the call was, how big the output was, its first error line (a rule, in case STM
kept other lines), and the facts STM extracted from it (or from the reply that consumed
it).  The full output stays in L0 under the same id.
"""

from __future__ import annotations

from memstrata.core.compress.deps import Dependency
from memstrata.core.compress.model import CompressionPolicy
from memstrata.core.compress.summary import ERROR_LINE, clip
from memstrata.core.models.memory import MemoryType

ERROR_SCAN_CHARS = 20_000
_ERROR_LABEL = {"en": "first error line", "zh": "首个错误行"}
_LABEL = {
    "en": ("compressed tool result", "digested", "facts kept", "full output in the transcript"),
    "zh": ("已压缩的工具结果", "已消化", "保留的事实", "完整输出见原始记录"),
}


def first_error(text: str, limit: int = ERROR_SCAN_CHARS) -> str | None:
    """The first error-looking line of an output (scanned in its first ``limit`` chars)."""
    head = text[:limit]
    err = ERROR_LINE.search(head)
    if err is None:
        return None
    start = head.rfind("\n", 0, err.start()) + 1
    end = head.find("\n", err.end())
    return head[start : end if end >= 0 else None].strip()


def stub_text(dep: Dependency, *, content: str, policy: CompressionPolicy, lang: str) -> str:
    """The stub of one digested result: call, size, its first error line, STM facts."""
    what, digested, facts_label, where = _LABEL[lang]
    chars, lines = len(content), content.count("\n") + 1
    slot = dep.slot
    args = clip(slot.arguments, policy.stub_arg_chars)
    head = (
        f"[{what} · call {slot.call_id} · {slot.name}({args}) · "
        f"{chars} chars, {lines} lines · {digested} · {where}]"
    )
    held = [i for i in dep.held if i.memory_type is not MemoryType.HYPOTHESIS]
    # errors and conclusions first: they are what a later step needs from the output
    held.sort(
        key=lambda i: (i.memory_type is MemoryType.OBSERVATION, not ERROR_LINE.search(i.summary))
    )
    facts = [f"- {clip(i.summary, policy.line_chars)}" for i in held[: policy.stub_facts]]
    err = first_error(content)
    if err is not None and not any(err[:60] in f for f in facts):
        head += f"\n{_ERROR_LABEL[lang]}: {clip(err, policy.line_chars)}"
    if not facts:
        return head
    return head + f"\n{facts_label}:\n" + "\n".join(facts)
