"""Seed 2's batch queue rule, pure: group by topic, merge three or more, decay the rest.

"Three on one topic" counts mentions, not rows: STM dedup folds a fact restated in three
turns into one item with ``mention_count`` 3, which is the recurrence seed 2 looks for.

``plan_batch(entries, policy, now)`` only decides; :mod:`core.lifecycle.scheduler` applies
the plan (or prints it).  Importance is rounded to 4 places after each decay so that
0.3 - 3 × 0.1 is 0 (dropped), not 5.6e-17 (kept forever).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class BatchPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    merge_min: int = Field(3, ge=2, le=1000)  # seed 2: >= 3 on one topic
    decay_step: float = Field(0.1, gt=0.0, le=1.0)  # seed 2: -0.1 per run
    merged_importance: float = Field(0.6, ge=0.0, le=1.0)  # seed 2: mergeMemoryItems → 0.6
    max_merge: int = Field(50, ge=2, le=1000)  # one merged card never holds more
    min_wait_s: float = Field(0.0, ge=0)  # an isolated entry is decayed only once this old


class BatchEntry(BaseModel):
    """A snapshot of an STM item in the queue: merging must not depend on its TTL."""

    model_config = ConfigDict(frozen=True)

    user_id: str
    tenant_id: str | None = None
    memory_id: str
    session_id: str
    topic: str
    importance: float
    summary: str
    memory_type: str = "fact"
    fingerprint: str = ""
    entities: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    enqueued_at: float = 0.0
    decays: int = 0
    mentions: int = 1  # an STM item restated N times (dedup merged them) is N votes

    @property
    def group(self) -> tuple[str | None, str, str]:
        return (self.tenant_id, self.user_id, self.topic)


@dataclass(frozen=True)
class Merge:
    group: tuple[str | None, str, str]
    entries: tuple[BatchEntry, ...]
    importance: float


@dataclass(frozen=True)
class BatchPlan:
    merges: tuple[Merge, ...]
    decays: tuple[tuple[BatchEntry, float], ...]  # entry, importance after the decay
    drops: tuple[BatchEntry, ...]
    waiting: tuple[BatchEntry, ...] = ()

    def summary(self) -> dict[str, int]:
        return {
            "merged_groups": len(self.merges),
            "merged_items": sum(len(m.entries) for m in self.merges),
            "decayed": len(self.decays),
            "dropped": len(self.drops),
        }


def plan_batch(entries: Sequence[BatchEntry], *, policy: BatchPolicy, now: float) -> BatchPlan:
    """Seed 2 ``processBatchQueue``: the same input always gives the same plan."""
    groups: dict[tuple[str | None, str, str], dict[str, BatchEntry]] = {}
    for e in sorted(entries, key=lambda x: (x.enqueued_at, x.memory_id)):
        groups.setdefault(e.group, {})[e.memory_id] = e  # one vote per memory
    merges: list[Merge] = []
    decays: list[tuple[BatchEntry, float]] = []
    drops: list[BatchEntry] = []
    waiting: list[BatchEntry] = []
    for group, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        items = list(members.values())
        if sum(max(1, e.mentions) for e in items) >= policy.merge_min:
            for start in range(0, len(items), policy.max_merge):
                chunk = tuple(items[start : start + policy.max_merge])
                if start == 0 or sum(max(1, e.mentions) for e in chunk) >= policy.merge_min:
                    merges.append(Merge(group, chunk, policy.merged_importance))
                else:
                    merges[-1] = Merge(group, merges[-1].entries + chunk, policy.merged_importance)
            continue
        for e in items:
            if now - e.enqueued_at < policy.min_wait_s:
                waiting.append(e)
                continue
            left = round(e.importance - policy.decay_step, 4)
            if left <= 0:
                drops.append(e)
            else:
                decays.append((e, left))
    return BatchPlan(tuple(merges), tuple(decays), tuple(drops), tuple(waiting))
