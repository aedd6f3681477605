"""The write policy (seed 十三): write_profile, write_score, TTL and importance.

All functions are pure: ``(candidate, what the store already holds, policy) → verdict``.
The weights are the seed's formula verbatim; the threshold (3) and the TTLs are settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from memstrata.core.models.candidate import Candidate, Verdict, WriteProfile
from memstrata.core.models.memory import MemoryType
from memstrata.core.models.trusted import trusted


class TtlPolicy(BaseModel):
    """Lifetime of an STM item by memory type, in seconds (seed 十三 estimated_ttl)."""

    model_config = ConfigDict(frozen=True)

    fact_s: int = Field(24 * 3600, ge=60)
    decision_s: int = Field(24 * 3600, ge=60)
    hypothesis_s: int = Field(2 * 3600, ge=60)
    observation_s: int = Field(6 * 3600, ge=60)
    constraint_s: int = Field(7 * 24 * 3600, ge=60)
    preference_s: int = Field(30 * 24 * 3600, ge=60)

    def for_type(self, memory_type: str) -> int:
        value: int = getattr(self, f"{memory_type}_s")
        return value


class WriteWeights(BaseModel):
    """Seed 十三's weights; change them only with a measured reason."""

    model_config = ConfigDict(frozen=True)

    is_verified: float = 3
    is_user_constraint: float = 3
    is_decision: float = 2
    is_stable_for_current_task: float = 2
    novelty_high: float = 2
    confidence_high: float = 1
    duplicate: float = -3
    transient: float = -2
    raw_unstructured_blob: float = -2


class WritePolicy(BaseModel):
    """Everything the write decision depends on besides the candidate."""

    model_config = ConfigDict(frozen=True)

    threshold: float = 3.0
    weights: WriteWeights = WriteWeights()
    high_confidence: float = Field(0.8, ge=0, le=1)
    high_novelty: float = Field(0.5, ge=0, le=1)
    ttl: TtlPolicy = TtlPolicy()


@dataclass(frozen=True)
class Existing:
    """What the store holds under the candidate's canonical key or fingerprint."""

    memory_id: str
    fingerprint: str
    message_ids: tuple[str, ...]
    mention_count: int = 1


def novelty(candidate_fp: str, existing: Existing | None, own_message_ids: list[str]) -> float:
    """1.0 new, 0.8 a changed version of a known fact, 0.0 the same fact again.

    A redelivery of the turn that created the item is not a duplicate of itself.
    """
    if existing is None:
        return 1.0
    if set(own_message_ids) & set(existing.message_ids):
        return 1.0
    return 0.0 if existing.fingerprint == candidate_fp else 0.8


def build_write_profile(
    cand: Candidate, *, novelty_value: float, ttl_s: int, policy: WritePolicy
) -> WriteProfile:
    s = cand.signals
    # built from validated parts for every candidate: set, not re-validated (issue 17)
    return trusted(WriteProfile, dict(
        is_verified=s.is_verified,
        is_stable_for_current_task=s.is_stable_for_current_task,
        is_user_constraint=s.is_user_constraint,
        is_decision=s.is_decision,
        is_preference=s.is_preference,
        novelty=novelty_value,
        confidence=cand.confidence,
        estimated_ttl_minutes=max(1, ttl_s // 60),
        duplicate=novelty_value == 0.0,
        transient=s.transient or s.chit_chat or s.off_task,
        raw_unstructured_blob=s.raw_unstructured_blob,
    ))  # fmt: skip


def write_score(profile: WriteProfile, policy: WritePolicy) -> tuple[float, dict[str, float]]:
    """The seed's formula, returned with its per-term breakdown."""
    w = policy.weights
    terms = {
        "is_verified": w.is_verified * profile.is_verified,
        "is_user_constraint": w.is_user_constraint * profile.is_user_constraint,
        "is_decision": w.is_decision * profile.is_decision,
        "is_stable_for_current_task": w.is_stable_for_current_task
        * profile.is_stable_for_current_task,
        "novelty_high": w.novelty_high * (profile.novelty >= policy.high_novelty),
        "confidence_high": w.confidence_high * (profile.confidence >= policy.high_confidence),
        "duplicate": w.duplicate * profile.duplicate,
        "transient": w.transient * profile.transient,
        "raw_unstructured_blob": w.raw_unstructured_blob * profile.raw_unstructured_blob,
    }
    return float(sum(terms.values())), {k: float(v) for k, v in terms.items() if v}


_TYPE_PRIOR = {
    MemoryType.CONSTRAINT: 0.8,
    MemoryType.PREFERENCE: 0.7,
    MemoryType.DECISION: 0.7,
    MemoryType.FACT: 0.6,
    MemoryType.OBSERVATION: 0.5,
    MemoryType.HYPOTHESIS: 0.3,
}


def importance(cand: Candidate, *, mentions: int = 1) -> tuple[float, dict[str, float]]:
    """Importance in [0, 1]: a blend of the type prior, seed 2's weighting and entity density.

    Seed 2's ``calculateImportance``: turns (mentions/10, cap 1) × 0.4, explicit feedback
    (1.0, else 0.3) × 0.3, density (tokens/500, cap 1) × 0.3.  It is one input (weight
    0.3) because on its own it ranks long text above short decisive facts.
    """
    tokens = max(1, len(cand.summary) // 4)
    seed2 = (
        min(mentions / 10.0, 1.0) * 0.4
        + (1.0 if cand.signals.explicit_remember else 0.3) * 0.3
        + min(tokens / 500.0, 1.0) * 0.3
    )
    prior = _TYPE_PRIOR[cand.memory_type]
    if cand.subtype == "excluded_cause":
        prior = 0.7
    entity_density = min(len(cand.entities) / 4.0, 1.0)
    value = 0.5 * prior + 0.3 * seed2 + 0.2 * entity_density
    if cand.signals.explicit_remember:
        value = max(value, 0.9)
    value = round(min(1.0, value), 4)
    return value, {
        "type_prior": round(0.5 * prior, 4),
        "seed2": round(0.3 * seed2, 4),
        "entity_density": round(0.2 * entity_density, 4),
    }


def ttl_seconds(cand: Candidate, policy: WritePolicy) -> int:
    ttl = policy.ttl.for_type(cand.memory_type.value)
    if cand.signals.explicit_remember:
        ttl = max(ttl, policy.ttl.preference_s)
    return ttl


def refusal_reason(
    cand: Candidate, profile: WriteProfile, score: float, policy: WritePolicy
) -> str:
    """The most specific human-readable reason a candidate was not written."""
    s = cand.signals
    if profile.raw_unstructured_blob:
        return "raw unstructured text (seed 四.5: no raw logs or transcripts in STM)"
    if s.chit_chat:
        return "chit-chat carries no task state"
    if cand.memory_type is MemoryType.HYPOTHESIS and not profile.is_verified:
        return "unverified guess (seed 四.5)"
    if profile.duplicate:
        return "duplicate of a fact already in STM"
    if profile.transient:
        return "transient, short-lived information"
    return f"score {score:g} below threshold {policy.threshold:g}"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str
    score: float
    breakdown: dict[str, float]
    profile: WriteProfile
    importance: float
    importance_breakdown: dict[str, float]
    ttl_s: int
    mentions: int = 1  # what importance was computed with (kept in the decision record)


def judge(cand: Candidate, *, existing: Existing | None, fp: str, policy: WritePolicy) -> Judgement:
    """Decide one candidate: build its write_profile, score it, compare with the threshold."""
    nov = novelty(fp, existing, list(cand.source.message_ids))
    ttl = ttl_seconds(cand, policy)
    profile = build_write_profile(cand, novelty_value=nov, ttl_s=ttl, policy=policy)
    score, breakdown = write_score(profile, policy)
    mentions = (existing.mention_count + 1) if existing and nov < 1.0 else 1
    imp, imp_breakdown = importance(cand, mentions=mentions)
    if score >= policy.threshold:
        if profile.duplicate:
            reason = f"restated fact merged into {existing.memory_id if existing else '?'}"
        elif nov == 0.8:
            reason = "changed fact: new version"
        else:
            reason = f"score {score:g} ≥ threshold {policy.threshold:g}"
        verdict = Verdict.WRITTEN
    else:
        verdict, reason = Verdict.REFUSED, refusal_reason(cand, profile, score, policy)
    return Judgement(
        verdict, reason, score, breakdown, profile, imp, imp_breakdown, ttl, mentions
    )
