"""Optional model-written summary behind a protocol; off by default.

The rule summary needs no model.  A deployment may plug in a summariser (e.g. an
OpenAI-compatible chat model) to rewrite the optional lines in better prose; the
mandatory lines (goal, decisions, plans, constraints) are put back verbatim whatever it
returns, because a lost instruction is the failure users report most of model summaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memstrata.core.compress.model import CompressedView, Level, SummaryLine, SummarySection
from memstrata.core.compress.summary import header
from memstrata.core.compress.tokens import MESSAGE_OVERHEAD, TokenCounter
from memstrata.core.models.transcript import TranscriptRecord


class Summariser(Protocol):
    def summarise(
        self, sections: Sequence[SummarySection], folded: Sequence[TranscriptRecord]
    ) -> list[SummarySection]:
        """Rewrite the summary sections, given the folded messages they stand for."""
        ...


def with_mandatory(
    original: Sequence[SummarySection], rewritten: Sequence[SummarySection]
) -> list[SummarySection]:
    """``rewritten`` with every mandatory line of ``original`` restored if it went missing."""
    by_key = {s.key: s.model_copy(deep=True) for s in rewritten}
    for section in original:
        target = by_key.setdefault(
            section.key, SummarySection(key=section.key, title=section.title, lines=[])
        )
        present = {ln.text for ln in target.lines}
        missing: list[SummaryLine] = [
            ln for ln in section.lines if ln.mandatory and ln.text not in present
        ]
        target.lines = missing + target.lines
    return [by_key[s.key] for s in original if s.key in by_key]


def render_sections(sections: Sequence[SummarySection], lang: str, folded: int) -> str:
    """Summary text from sections (same layout as the rule summary)."""
    parts = [header(lang, folded)]
    for section in sections:
        if section.lines:
            parts.append(f"## {section.title}")
            parts.extend(f"- {ln.text}" for ln in section.lines)
    return "\n".join(parts)


def apply_summariser(
    view: CompressedView,
    summariser: Summariser,
    records: Sequence[TranscriptRecord],
    counter: TokenCounter,
) -> CompressedView:
    """The view with its summary rewritten by ``summariser``, mandatory lines restored.

    Falls back to the rule summary when the rewrite would break the budget, so a chatty
    model can never push the view over it.
    """
    if view.level is not Level.FORMAL or not view.messages:
        return view
    folded_ids = set(view.folded_message_ids)
    folded = [r for r in records if r.message_id in folded_ids]
    sections = with_mandatory(view.sections, summariser.summarise(view.sections, folded))
    text = render_sections(sections, view.language, len(folded))
    first = view.messages[0].model_copy(
        update={"content": text, "tokens": counter.count(text) + MESSAGE_OVERHEAD}
    )
    messages = [first, *view.messages[1:]]
    total = sum(m.tokens for m in messages)
    if view.budget_tokens is not None and total > view.budget_tokens:
        return view
    return view.model_copy(
        update={"messages": messages, "sections": sections, "view_tokens": total}
    )
