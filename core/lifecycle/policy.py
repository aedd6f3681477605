"""Promotion policy (seed 1 十四 + seed 2 三): a pure function of (item, signals, policy, now).

Two gates must both pass before anything leaves STM:

* **seed 1** (stricter than writing): the item is not task-local (no moment or ticket
  markers, not a next step / hypothesis / tool output), and shows at least one trigger:
  an explicit "remember this", recurrence across sessions, repeated hits (mentions or
  recall hits), or survival past ``min_age_s``;
* **seed 2** (importance): for LTM cards (path B), importance > ``promote_now`` goes at
  once, ``batch_min``..``promote_now`` goes to the batch queue, where three items on one
  topic are themselves the recurrence trigger; below ``batch_min`` it stays until its TTL.

Path A (PostgreSQL) takes only items with an authority key (preferences, profile,
project configuration, long-lived constraints) and needs seed 1's triggers alone: a
stable preference said once with "remember" is promoted whatever its importance.
Permissions are never promoted from conversation: an admin grants them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from memstrata.core.authority.domain_authority import authority_key
from memstrata.core.lifecycle.generality import assess

_SEGMENT = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


class PromotionPolicy(BaseModel):
    """Thresholds of both seeds, all configurable (``MEMSTRATA_LIFECYCLE__PROMOTION__*``)."""

    model_config = ConfigDict(frozen=True)

    promote_now: float = Field(0.7, ge=0.0, le=1.0)  # seed 2: > 0.7 persisted at once
    batch_min: float = Field(0.3, ge=0.0, le=1.0)  # seed 2: 0.3..0.7 to the batch queue
    explicit_min_importance: float = Field(0.9, ge=0.0, le=1.0)  # the write policy's floor
    min_sessions: int = Field(2, ge=2, le=32)
    min_mentions: int = Field(3, ge=2, le=1000)
    min_hits: int = Field(3, ge=1, le=100_000)
    min_age_s: float = Field(3 * 24 * 3600.0, ge=0)
    never_types: frozenset[str] = frozenset({"hypothesis", "observation"})
    never_subtypes: frozenset[str] = frozenset(
        {"next_step", "hypothesis", "chit_chat", "symptom", "excluded_cause", "current_decision",
         "tool_output", "ltm_preload", "session_summary"}
    )  # fmt: skip
    # what a participant said about their life ("I went to a support group yesterday"):
    # neither task state nor reusable experience; kept as one LTM episode card per
    # statement when its session ends (sessions.finalise), never merged or sent to PG
    episode_subtypes: frozenset[str] = frozenset({"conversation_fact"})


class Route(StrEnum):
    PATH_A = "path_a"  # PostgreSQL stable fact
    PATH_B = "path_b"  # LTM card now
    BATCH = "batch"  # seed 2 batch queue
    STAY = "stay"  # not yet: waits for evidence or its TTL
    NEVER = "never"  # task-local: never leaves STM
    EPISODE = "episode"  # an episode card when its session ends (sessions.finalise)


@dataclass(frozen=True, slots=True)
class ItemView:
    """The fields of an STM item the policy reads (a light view: the scan reads 1M of them)."""

    memory_id: str
    user_id: str
    tenant_id: str | None
    session_id: str
    memory_type: str
    subtype: str
    summary: str
    canonical_fact_key: str
    fingerprint: str
    importance: float
    created_at: float
    updated_at: float
    mention_count: int = 1
    seen_sessions: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    topic: str | None = None
    value: object = None
    message_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    route: Route
    reason: str
    triggers: tuple[str, ...] = ()
    breakdown: dict[str, float] = field(default_factory=dict)
    authority_key: str | None = None
    topic: str = ""

    @property
    def score(self) -> float:
        return round(sum(self.breakdown.values()), 4)


def topic_of(item: ItemView) -> str:
    """The grouping topic: the extractor's topic, else the main entity, else the key's tail."""
    raw = item.topic or (item.entities[0] if item.entities else "")
    if not raw:
        raw = item.canonical_fact_key.rsplit(":", 1)[-1]
    return re.sub(r"[^0-9a-z_\-\u4e00-\u9fff]+", "_", raw.casefold()).strip("_")[:64] or "misc"


def pg_key(item: ItemView) -> str | None:
    """The authority key of an item that belongs in PostgreSQL (path A), else None."""
    key = item.canonical_fact_key
    parts = key.split(":")
    if len(parts) == 3 and parts[:2] == ["user", "pref"]:
        out = authority_key(key)
    elif len(parts) == 3 and parts[:2] == ["user", "config"]:
        out = f"config.{parts[2]}"
    elif len(parts) == 4 and parts[0] == "project" and parts[2] == "config":
        out = f"project_metadata.{parts[1]}.{parts[3]}"
    elif "constraint" in parts[1:-1]:
        rest = parts[parts.index("constraint", 1) + 1 :]
        out = authority_key(key) if rest[0] == "permission" else "constraint." + ".".join(rest)
    elif "." in key and key.split(".", 1)[0] in {
        "profile",
        "preference",
        "config",
        "project_metadata",
        "constraint",
    }:
        return key  # fmt: skip
    else:
        return None
    segments = out.split(".")[1:]
    return out if segments and all(_SEGMENT.match(s) for s in segments) else None


def _triggers(
    item: ItemView, hits: int, policy: PromotionPolicy, now: float
) -> tuple[tuple[str, ...], dict[str, float]]:
    explicit = item.importance >= policy.explicit_min_importance
    sessions = len(set(item.seen_sessions) | {item.session_id})
    checks = {
        "explicit": explicit,
        "cross_session": sessions >= policy.min_sessions,
        "repeated": item.mention_count >= policy.min_mentions or hits >= policy.min_hits,
        "survived": now - item.created_at >= policy.min_age_s,
    }
    breakdown = {
        "importance": round(item.importance, 4),
        "explicit": 1.0 if explicit else 0.0,
        "sessions": float(sessions),
        "mentions": float(item.mention_count),
        "hits": float(hits),
        "age_days": round(max(0.0, now - item.created_at) / 86400.0, 3),
    }
    return tuple(name for name, ok in checks.items() if ok), breakdown


def decide(item: ItemView, *, hits: int, policy: PromotionPolicy, now: float) -> Decision:
    """Where one STM item should go now, with the evidence that decided it."""
    topic = topic_of(item)
    triggers, breakdown = _triggers(item, hits, policy, now)
    gen = assess(item.summary)
    breakdown["general_markers"] = float(len(gen.general_markers))
    breakdown["local_markers"] = float(len(gen.local_markers))

    def out(route: Route, reason: str, key: str | None = None) -> Decision:
        return Decision(route, reason, triggers, breakdown, key, topic)

    if item.subtype in policy.episode_subtypes:
        return out(Route.EPISODE, "episodic statement: an LTM episode card when the session ends")
    if item.memory_type in policy.never_types or item.subtype in policy.never_subtypes:
        return out(Route.NEVER, f"task-local kind {item.memory_type}/{item.subtype}")
    if gen.is_local:
        return out(Route.NEVER, "task-local wording: " + ", ".join(gen.local_markers[:3]))
    key = pg_key(item)
    if key is not None:
        if key.startswith("permission."):
            return out(Route.NEVER, "permissions are granted by an admin, not promoted")
        if not triggers:
            return out(Route.STAY, "stable-fact candidate without a seed 1 trigger yet", key)
        return out(Route.PATH_A, "stable fact: " + "+".join(triggers), key)
    general = gen.is_general or "cross_session" in triggers or "explicit" in triggers
    if not general:
        return out(Route.STAY, "not shown to be general (no markers, one session)")
    if item.importance < policy.batch_min:
        imp = f"{item.importance:.2f}"
        return out(Route.STAY, f"importance {imp} < {policy.batch_min}: the TTL decides")
    if item.importance > policy.promote_now and triggers:
        return out(Route.PATH_B, "important and general: " + "+".join(triggers))
    return out(Route.BATCH, "general; waits for same-topic company in the batch queue")
