"""Plain-text renderings of STM items and write decisions for the CLI (inspect, explain, demo)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from memstrata.core.ltm.card import LtmCard
from memstrata.core.models.candidate import Verdict, WriteDecision
from memstrata.core.models.memory import MemoryItem

SUMMARY_WIDTH = 110


def _short(text: str, width: int = SUMMARY_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def duration(seconds: float) -> str:
    """``93784`` → ``1d2h``: a compact, human-readable TTL."""
    s = int(max(0, seconds))
    if s >= 86400:
        days, hours = divmod(s, 86400)
        return f"{days}d{hours // 3600}h" if hours >= 3600 else f"{days}d"
    if s >= 3600:
        hours, rest = divmod(s, 3600)
        return f"{hours}h{rest // 60}m" if rest >= 60 else f"{hours}h"
    if s >= 60:
        return f"{s // 60}m"
    return f"{s}s"


def item_line(item: MemoryItem, *, now: float | None = None) -> str:
    now = time.time() if now is None else now
    kind = f"{item.memory_type.value}/{item.subtype}"
    head = (
        f"  {kind:<30} v{item.version}  imp {item.importance:.2f}  "
        f"expires in {duration(item.expires_at - now):<6}"
    )
    lines = [head, f"      {_short(item.summary)}"]
    if item.entities:
        lines.append(f"      entities: {', '.join(item.entities[:8])}")
    for old in reversed(item.history):
        lines.append(f"      was v{old.version}: {_short(old.summary, SUMMARY_WIDTH - 12)}")
    if item.mention_count > 1:
        lines.append(f"      mentioned {item.mention_count}×")
    return "\n".join(lines)


def items_block(items: Iterable[MemoryItem], *, now: float | None = None) -> str:
    return "\n".join(item_line(i, now=now) for i in items)


def card_line(card: LtmCard) -> str:
    """One LTM card: id, type, status, when it last changed, its text and provenance."""
    when = datetime.fromtimestamp(card.updated_at, tz=UTC).strftime("%Y-%m-%d %H:%M")
    said = len(card.source_message_ids)
    head = f"  {card.memory_id}  {card.memory_type} [{card.status.value}] v{card.version} {when}"
    named = f", names {len(card.source_card_ids)} card(s)" if card.source_card_ids else ""
    return f"{head}  {said} source message(s){named}\n      {_short(card.summary)}"


def cards_block(found: Iterable[LtmCard]) -> str:
    return "\n".join(card_line(c) for c in found)


def breakdown_text(terms: dict[str, float]) -> str:
    if not terms:
        return "(no term fired)"
    return " ".join(f"{k} {v:+g}" for k, v in terms.items())


def decision_line(d: WriteDecision, *, verbose: bool = False) -> str:
    sign = "≥" if d.score >= d.threshold else "<"
    mark = "stored " if d.verdict is Verdict.WRITTEN else "refused"
    head = (
        f"  {mark} score {d.score:>3g} {sign} {d.threshold:g}  "
        f"{d.memory_type.value}/{d.subtype}  [{d.rule}]"
    )
    lines = [head, f"      {_short(d.summary)}", f"      why: {d.reason}"]
    if d.omitted:  # a budget summary: what was not recorded one by one
        lines.append("      omitted: " + ", ".join(f"{k} {v:,}" for k, v in d.omitted.items()))
    if verbose:
        lines.append(f"      score = {breakdown_text(d.breakdown)}")
        p = d.profile
        lines.append(
            f"      profile: verified={p.is_verified} constraint={p.is_user_constraint} "
            f"decision={p.is_decision} stable={p.is_stable_for_current_task} "
            f"preference={p.is_preference} novelty={p.novelty:g} confidence={p.confidence:g} "
            f"ttl={p.estimated_ttl_minutes}min duplicate={p.duplicate} "
            f"transient={p.transient} raw_blob={p.raw_unstructured_blob}"
        )
        if d.verdict is Verdict.WRITTEN:
            imp = " + ".join(f"{k} {v:g}" for k, v in d.importance_breakdown.items())
            lines.append(f"      importance {d.importance:.2f} = {imp}")
        lines.append(
            f"      key {d.canonical_fact_key}"
            + (f" → {d.memory_id}" if d.memory_id else "")
            + f"  from {', '.join(d.message_ids)}"
        )
    return "\n".join(lines)


def decisions_block(decisions: Iterable[WriteDecision], *, verbose: bool = False) -> str:
    return "\n".join(decision_line(d, verbose=verbose) for d in decisions)
