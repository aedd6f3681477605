"""Extraction cost per input byte on the worst inputs (the reliability review's D2, p5c).

For each kind of text and each shape of turn, the extractor's wall time
(``RuleExtractor.extract_turn`` with the default budget, best of the repetitions) divided
by the turn's UTF-8 size: ``ns_per_byte``.  Kinds: the review's three (CJK prose that
proposes a candidate per clause, punctuation only, English sentences), plus CJK prose that
proposes nothing (every clause classified: the most CPU per character read) and an
assistant message of unclosed ``<think>`` tags (quadratic before the one-pass strip).
Shapes: one message of 65,536 characters, one of 1,048,576 (L0's cap), and the review's
turn of 64 × 65,536 (L0's largest turn).  For the 64 × 65,536 turn the whole pipeline is
timed too (extract, judge, STM writes and decision records in Redis), with the bytes of
decision records it left; ``no budget`` is the 65,536-character message read whole with
no candidate cap, which is what extraction did before the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

from memstrata.core.extract.rules import (
    Extraction,
    ExtractionBudget,
    ExtractionContext,
    RuleExtractor,
)
from memstrata.core.ingest.pipeline import IngestPipeline
from memstrata.core.models.transcript import Role, TranscriptRecord, TurnPointer
from memstrata.core.policy.write import WritePolicy
from memstrata.core.runtime import Runtime
from memstrata.core.settings import load_settings
from memstrata.ops.bench.common.env import new_namespace, purge, redis_url, scratch_dir
from memstrata.ops.bench.common.machine import load_average, machine
from memstrata.ops.bench.common.stats import r3

CHARS = 65_536
KINDS: dict[str, tuple[Role, str]] = {
    "cjk_prose": (Role.USER, "我们决定回滚支付服务，不要重启生产环境。"),
    "punctuation": (Role.USER, "!?。，；"),
    "sentences": (Role.USER, "We decided to roll back payment-service. Don't restart prod. "),
    "cjk_no_candidates": (Role.USER, "今天天气很好，"),
    "unclosed_think": (Role.ASSISTANT, "x<think>"),  # not a reasoning-only message
}
SHAPES: dict[str, tuple[int, int]] = {  # messages, characters each
    "1 x 65,536": (1, CHARS),
    "1 x 1,048,576": (1, 1024 * 1024),
    "64 x 65,536": (64, CHARS),
}
TURN = "64 x 65,536"
UNBOUNDED = ExtractionBudget(
    message_chars=16 * 1024 * 1024,
    turn_chars=64 * 1024 * 1024,
    message_candidates=10**9,
    turn_candidates=10**9,
)


def _turn(kind: str, messages: int, chars: int) -> list[TranscriptRecord]:
    role, unit = KINDS[kind]
    text = (unit * (chars // len(unit) + 1))[:chars]
    return [
        TranscriptRecord(
            message_id=f"m{k}",
            turn_id="tbench",
            user_id="u_bench",
            session_id="s_bench",
            role=role,
            content=text,
            at=time.time(),
        )
        for k in range(messages)
    ]


def _best(reps: int, work: Callable[[], Extraction]) -> tuple[float, Extraction]:
    best, out = float("inf"), Extraction([])
    for _ in range(reps):
        t = time.perf_counter()
        out = work()
        best = min(best, time.perf_counter() - t)
    return best, out


def _size(turn: list[TranscriptRecord]) -> int:
    return sum(len(r.content.encode()) for r in turn)


def _extraction(reps: int) -> list[dict[str, Any]]:
    ctx = ExtractionContext(user_id="u_bench", session_id="s_bench")
    budgeted, unbounded = RuleExtractor(), RuleExtractor(budget=UNBOUNDED)
    rows = []
    for kind in KINDS:
        for shape, (messages, chars) in SHAPES.items():
            turn = _turn(kind, messages, chars)
            secs, out = _best(reps, partial(budgeted.extract_turn, turn, ctx))
            read = out.read_chars
            rows.append(
                {
                    "kind": kind, "shape": shape, "input_bytes": _size(turn),
                    "seconds": r3(secs), "ns_per_byte": r3(secs * 1e9 / _size(turn)),
                    "candidates": len(out.candidates), "chars_read": read,
                }
            )  # fmt: skip
        turn = _turn(kind, 1, CHARS)
        secs, out = _best(reps, partial(unbounded.extract_turn, turn, ctx))
        rows.append(
            {
                "kind": kind, "shape": "1 x 65,536, no budget", "input_bytes": _size(turn),
                "seconds": r3(secs), "ns_per_byte": r3(secs * 1e9 / _size(turn)),
                "candidates": len(out.candidates), "chars_read": out.read_chars,
            }
        )  # fmt: skip
    return rows


def _pipeline(reps: int) -> list[dict[str, Any]]:
    rows = []
    with scratch_dir("memstrata-bench-extract-") as tmp:
        settings = load_settings(
            redis_url=redis_url(), key_namespace=new_namespace("benchx"),
            transcript_dir=Path(tmp), transcript_fsync=False,
        )  # fmt: skip
        res = Runtime(settings)
        try:
            for n, kind in enumerate(KINDS):
                messages, chars = SHAPES[TURN]
                turn = _turn(kind, messages, chars)
                best = float("inf")
                for rep in range(reps):
                    pipeline = IngestPipeline(
                        store=res.stm, extractor=RuleExtractor(), policy=WritePolicy(),
                        max_refusals_per_message=settings.decision_max_refusals_per_message,
                    )  # fmt: skip
                    user = f"u_bench{n}_{rep}"
                    pointer = TurnPointer(
                        user_id=user, session_id="s_bench", turn_id="tbench", at=time.time(),
                        offset=0, length=1,
                    )  # fmt: skip
                    t = time.perf_counter()
                    pipeline.process([(pointer, turn)])
                    best = min(best, time.perf_counter() - t)
                raw = cast(
                    dict[str, str], res.redis.hgetall(res.stm.keys(user).decisions("s_bench"))
                )
                rows.append(
                    {
                        "kind": kind, "input_bytes": _size(turn), "seconds": r3(best),
                        "ns_per_byte": r3(best * 1e9 / _size(turn)),
                        "decision_records": len(raw),
                        "decision_bytes": sum(len(k.encode()) + len(v.encode())
                                              for k, v in raw.items()),
                    }
                )  # fmt: skip
        finally:
            purge(res.redis, settings.key_namespace)
            res.close()
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    reps = 1 if quick else 3
    extraction = _extraction(reps)
    pipeline = _pipeline(reps)
    budgeted = [r for r in extraction if "no budget" not in r["shape"]]
    return {
        "quick": quick,
        "repetitions": reps,
        "machine": machine(),
        "loadavg_at_end": [round(x, 2) for x in load_average()],
        "soft_time_limit_s": load_settings().task_soft_time_limit_s,
        "extraction": extraction,
        "pipeline": pipeline,
        "worst_ns_per_byte": max(r["ns_per_byte"] for r in budgeted),
        "worst_turn_s": max(r["seconds"] for r in pipeline),
    }


def markdown(figures: dict[str, Any]) -> str:
    f = figures
    lines = [
        "### Extraction cost on the worst inputs (`memstrata bench extract"
        + (" --quick" if f.get("quick") else "")
        + "`)",
        "",
        "Wall time of `RuleExtractor.extract_turn` with the default budget (best of "
        f"{f['repetitions']}), per UTF-8 byte of the turn; `no budget` reads the message "
        "whole with no candidate cap, as extraction did before the budget. Load average "
        f"at the end: {f['loadavg_at_end'][0]}.",
        "",
        "| kind | turn | input bytes | s | ns / byte | candidates | chars read |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in f["extraction"]:
        lines.append(
            f"| {r['kind']} | {r['shape']} | {r['input_bytes']:,} | {r['seconds']} | "
            f"{r['ns_per_byte']} | {r['candidates']:,} | {r['chars_read']:,} |"
        )
    lines += [
        "",
        "The review's turn (64 × 65,536 characters) through the whole pipeline (extract, "
        "judge, STM writes, decision records; real Redis):",
        "",
        "| kind | input bytes | s | ns / byte | decision records | decision bytes |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in f["pipeline"]:
        lines.append(
            f"| {r['kind']} | {r['input_bytes']:,} | {r['seconds']} | {r['ns_per_byte']} | "
            f"{r['decision_records']:,} | {r['decision_bytes']:,} |"
        )
    lines += [
        "",
        f"Worst extraction cost with the budget: **{f['worst_ns_per_byte']} ns per input "
        f"byte**; worst turn through the pipeline: **{f['worst_turn_s']} s** (the drain's "
        f"soft time limit is {f['soft_time_limit_s']} s).",
    ]
    return "\n".join(lines)
