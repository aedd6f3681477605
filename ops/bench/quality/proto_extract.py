"""Prototype (not in core): a conversation-fact rule on top of the v1 rule extractor.

The v1 rules were written for debugging sessions: they propose a memory only for
preferences, constraints, symptoms, conclusions, decisions and next steps.  In casual
conversation almost every statement is none of these ("I went to a support group
yesterday"), so nothing is proposed.  This wrapper adds one general rule, measured by the
quality harness as a diagnostic variant:

* a user message the v1 rules proposed nothing from, that is not chit-chat, becomes one
  ``conversation_fact`` candidate: its statement clauses (questions dropped), one
  candidate per message so that the provenance stays per turn (``source.message_ids`` =
  that message), verified (the person said it), medium confidence;
* the canonical key is the normalised statement, so a restated fact merges instead of
  duplicating.

Nothing is tuned to benchmark questions: the rule reads only the message.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.extract.entities import extract_entities
from core.extract.rules import (
    ExtractionContext,
    RuleExtractor,
    clip,
    normalise_fact,
    short_hash,
    split_clauses,
)
from core.models.candidate import Candidate, CandidateSignals
from core.models.memory import MemorySource, MemoryType
from core.models.transcript import Role, TranscriptRecord

MIN_WORDS = 4
SUMMARY_CHARS = 300


class ConversationFactExtractor:
    def __init__(self, base: RuleExtractor | None = None) -> None:
        self.base = base or RuleExtractor()
        self.lexicon = self.base.lexicon

    def extract(self, turn: Sequence[TranscriptRecord], ctx: ExtractionContext) -> list[Candidate]:
        out = self.base.extract(turn, ctx)
        covered = {m for c in out for m in c.source.message_ids}
        for rec in turn:
            if rec.role is not Role.USER or rec.message_id in covered:
                continue
            cand = self._fact(rec)
            if cand is not None:
                out.append(cand)
        return out

    def _fact(self, rec: TranscriptRecord) -> Candidate | None:
        text = rec.content.strip()
        if not text or self.lexicon.matches("chit_chat", text):
            return None
        speaker, _, body = text.partition(": ") if ": " in text[:60] else ("", "", text)
        clauses = [c for c in split_clauses(body) if not self.lexicon.matches("question", c)]
        statement = " ".join(clauses)
        if len(statement.split()) < MIN_WORDS and len(statement) < 2 * MIN_WORDS:
            return None
        summary = clip(f"{speaker}: {statement}" if speaker else statement, SUMMARY_CHARS)
        norm = normalise_fact(summary)
        return Candidate(
            memory_type=MemoryType.FACT,
            subtype="conversation_fact",
            summary=summary,
            detail={"role": rec.role.value, "speaker": speaker or rec.name or ""},
            entities=extract_entities(summary, self.lexicon),
            tags=["conversation_fact"],
            canonical_fact_key=f"user:conv:{short_hash(norm, 16)}",
            source=MemorySource(kind="conversation", message_ids=[rec.message_id]),
            confidence=0.7,
            signals=CandidateSignals(is_verified=True),
            rule="conversation_fact",
        )
