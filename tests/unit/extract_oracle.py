"""The extractor + write policy over fixed turns, as canonical JSON: what the hot-path
optimisations of the write path must leave unchanged (tests/unit/test_extract_invariant.py).

Two corpora: the ingest benchmark's turn mix (English and Chinese, tool calls; its
expected output is committed in ``tests/data/extract_golden.json``) and, where the
shared bench data is present, real agent sessions read in place (checked by digest).
Each candidate is judged twice: against an empty STM and against an item holding the
same fingerprint from another message (the duplicate / merge path).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from memstrata.core.extract.rules import ExtractionContext, RuleExtractor
from memstrata.core.models.identity import fingerprint
from memstrata.core.models.transcript import TranscriptRecord
from memstrata.core.policy.write import Existing, WritePolicy, judge

GOLDEN = "extract_golden.json"
BENCH_TURNS = 64
SESSION_SOURCES = ("swe-agent", "mini-swe-agent", "openhands", "tau-bench", "opencode-zh")
SESSIONS_PER_SOURCE = 8
BENCH_SHOWN = 3  # turns whose whole expected output is committed (readable diffs)
MESSAGES_PER_TURN = 3


def records(
    turn_id: str, messages: Sequence[dict[str, Any]], *, task: bool
) -> list[TranscriptRecord]:
    return [
        TranscriptRecord(
            message_id=f"{turn_id}.{i}",
            turn_id=turn_id,
            user_id="u_or",
            session_id="s_or",
            task_id="t_or" if task else None,
            role=m["role"],
            content=m.get("content") or "",
            tool_call_id=m.get("tool_call_id"),
            tool_calls=m.get("tool_calls") or [],
            name=m.get("name"),
            at=1_700_000_000.0,
        )
        for i, m in enumerate(messages)
    ]


def outcome(turn: Sequence[TranscriptRecord], extractor: RuleExtractor) -> dict[str, Any]:
    """Candidates, budget notes and both judgements of each candidate, as plain JSON."""
    first = turn[0]
    ctx = ExtractionContext(user_id=first.user_id, session_id=first.session_id,
                            task_id=first.task_id)  # fmt: skip
    ex = extractor.extract_turn(turn, ctx)
    policy = WritePolicy()
    cands = []
    for cand in ex.candidates:
        fp = fingerprint(ctx.user_id, ctx.scope, cand.subtype, cand.summary)
        twin = Existing("m_other", fp, ("other.0",), 2)
        judged = [judge(cand, existing=e, fp=fp, policy=policy) for e in (None, twin)]
        cands.append({
            "candidate": cand.model_dump(mode="json"),
            "fp": fp,
            "judged": [
                {"verdict": j.verdict.value, "reason": j.reason, "score": j.score,
                 "breakdown": j.breakdown, "profile": j.profile.model_dump(mode="json"),
                 "importance": j.importance, "importance_breakdown": j.importance_breakdown,
                 "ttl_s": j.ttl_s}
                for j in judged
            ],
        })  # fmt: skip
    notes = [vars(n) for n in ex.notes]
    return {"candidates": cands, "notes": notes, "read_chars": ex.read_chars}


def bench_outcomes(extractor: RuleExtractor | None = None) -> list[dict[str, Any]]:
    from memstrata.ops.bench.common.fixtures import turn_messages

    ex = extractor or RuleExtractor()
    return [
        outcome(records(f"b{n}", turn_messages(n), task=n % 3 != 0), ex) for n in range(BENCH_TURNS)
    ]


def session_turns(source: str) -> Iterator[list[TranscriptRecord]]:
    """A real session cut into turns of three messages (system prompts left out)."""
    from memstrata.ops.replay.formats import load_source

    for k, session in enumerate(load_source(source, limit=SESSIONS_PER_SOURCE)):
        msgs = [m for m in session.messages if m["role"] != "system"]
        for start in range(0, len(msgs), MESSAGES_PER_TURN):
            chunk = msgs[start : start + MESSAGES_PER_TURN]
            yield records(f"x{k}n{start}", chunk, task=start % 2 == 0)


def digest(outcomes: Iterator[dict[str, Any]] | Sequence[dict[str, Any]]) -> tuple[int, str]:
    """(how many, sha256 of their canonical JSON)."""
    h = hashlib.sha256()
    n = 0
    for out in outcomes:
        h.update(canonical(out).encode())
        n += 1
    return n, h.hexdigest()


def session_digest(source: str, extractor: RuleExtractor | None = None) -> tuple[int, str]:
    """(turns, sha256 of their outcomes) of one source of the shared agent sessions."""
    ex = extractor or RuleExtractor()
    return digest(outcome(turn, ex) for turn in session_turns(source))


def canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
