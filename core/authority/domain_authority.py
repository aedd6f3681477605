"""Domain authority (seed 十五.3): PG has the final word on profile / permission / config /
project metadata, whatever Redis STM or LTM recalled.

:func:`arbitrate` is pure: candidates + snapshot + policy in, a verdict per candidate
out, each with the reason recorded, so "why did the agent ignore what I said earlier?"
has an answer.  The rules, for a candidate whose domain is authoritative:

* PG knows the key and agrees       → dropped (``duplicate_of_authority``): the profile /
  constraints blocks already say it; ``policy.keep_agreeing`` keeps it instead.
* PG knows the key and disagrees   → overridden with PG's value (``conflicts_with_authority``;
                                      ``policy.on_conflict="drop"`` drops it instead).
* PG knows the key, the candidate carries no comparable value (recalled text)
                                    → overridden with PG's value (``covered_by_authority``:
                                      PG's block says it in its place, agreeing or not).
* PG does not know the key          → kept (``no_authority_value``), except
  ``permission.*``: a permission PG did not grant is dropped (``permission_not_granted``).

Candidates of other domains (task_state, session_state, similar_case, ...) are kept
(``not_authoritative``): there Redis or LTM decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from memstrata.core.authority.domain import (
    AUTHORITATIVE_DOMAINS,
    PERMISSION_PROJECT_PREFIX,
    FactDomain,
    domain_of_key,
    encode_value,
)
from memstrata.core.authority.errors import InvalidFactValue
from memstrata.core.authority.snapshot import DEFAULT_AGENT, AuthoritySnapshot
from memstrata.core.models.memory import MemoryItem

_PROFILE_TOPICS = frozenset({"language", "answer_style", "timezone", "display_name"})


class Action(StrEnum):
    KEPT = "kept"
    OVERRIDDEN = "overridden"
    DROPPED = "dropped"


class Reason(StrEnum):
    NOT_AUTHORITATIVE = "not_authoritative"
    NO_AUTHORITY_VALUE = "no_authority_value"
    AGREES_WITH_AUTHORITY = "agrees_with_authority"
    DUPLICATE_OF_AUTHORITY = "duplicate_of_authority"
    CONFLICTS_WITH_AUTHORITY = "conflicts_with_authority"
    COVERED_BY_AUTHORITY = "covered_by_authority"
    PERMISSION_NOT_GRANTED = "permission_not_granted"


class AuthorityPolicy(BaseModel):
    """Tunable parts of the rule; the domain list itself is the seed's and fixed by default."""

    model_config = ConfigDict(frozen=True)

    authoritative_domains: frozenset[FactDomain] = AUTHORITATIVE_DOMAINS
    on_conflict: Literal["override", "drop"] = "override"
    keep_agreeing: bool = False


DEFAULT_POLICY = AuthorityPolicy()


class AuthorityCandidate(BaseModel):
    """A recalled memory as the rule sees it: a canonical key, maybe a domain and a value."""

    model_config = ConfigDict(frozen=True)

    id: str
    source_type: str = Field("redis_stm", max_length=32)
    canonical_fact_key: str = Field(max_length=256)
    domain: FactDomain | None = None
    value: JsonValue = None
    summary: str = ""

    @property
    def effective_domain(self) -> FactDomain | None:
        return self.domain or domain_of_key(self.canonical_fact_key)

    @classmethod
    def from_memory_item(
        cls, item: MemoryItem, *, source_type: str = "redis_stm", project_id: str | None = None
    ) -> AuthorityCandidate:
        """Map an STM item onto the authority key space (``detail.value`` is its value)."""
        key = authority_key(item.canonical_fact_key, project_id=project_id)
        return cls(
            id=item.id,
            source_type=source_type,
            canonical_fact_key=key,
            value=item.detail.get("value"),
            summary=item.summary,
        )


def authority_key(stm_key: str, *, project_id: str | None = None) -> str:
    """Translate the extractor's STM keys into canonical authority keys.

    ``user:pref:language`` → ``profile.language``; ``user:pref:<topic>`` →
    ``preference.<topic>``; ``<scope>:constraint:permission[:<entity>]`` →
    ``permission.project.<project_id>`` when the query has a project; dotted keys stay.
    """
    parts = stm_key.split(":")
    if len(parts) == 3 and parts[:2] == ["user", "pref"]:
        topic = parts[2]
        return f"profile.{topic}" if topic in _PROFILE_TOPICS else f"preference.{topic}"
    # constraint keys are "<scope>:constraint:<topic>[:<main entity>]"
    if "constraint" in parts[1:-1] and parts[parts.index("constraint", 1) + 1] == "permission":
        return f"{PERMISSION_PROJECT_PREFIX}{project_id}" if project_id else "permission.unscoped"
    return stm_key


class AuthorityDecision(BaseModel):
    """What happened to one candidate, and why."""

    model_config = ConfigDict(frozen=True)

    candidate_id: str
    canonical_fact_key: str
    domain: FactDomain | None
    action: Action
    reason: Reason
    candidate_value: JsonValue = None
    authority_value: JsonValue = None
    authority_fact_id: int | None = None


class AuthorityOutcome(BaseModel):
    """Candidates to keep (overridden ones carry PG's value) and every decision made."""

    model_config = ConfigDict(frozen=True)

    kept: tuple[AuthorityCandidate, ...]
    decisions: tuple[AuthorityDecision, ...]

    def decision_for(self, candidate_id: str) -> AuthorityDecision | None:
        return next((d for d in self.decisions if d.candidate_id == candidate_id), None)


def _same(a: JsonValue, b: JsonValue) -> bool:
    try:
        return encode_value(a).digest == encode_value(b).digest
    except InvalidFactValue:
        return False


def _decide(
    cand: AuthorityCandidate,
    snapshot: AuthoritySnapshot,
    policy: AuthorityPolicy,
    agent_id: str,
) -> tuple[AuthorityDecision, AuthorityCandidate | None]:
    domain = cand.effective_domain
    key = cand.canonical_fact_key
    base = {"candidate_id": cand.id, "canonical_fact_key": key, "domain": domain,
            "candidate_value": cand.value}  # fmt: skip
    if domain is None or domain not in policy.authoritative_domains:
        return AuthorityDecision(**base, action=Action.KEPT, reason=Reason.NOT_AUTHORITATIVE), cand
    pg_value = snapshot.value(key, agent_id=agent_id)
    fact = snapshot.fact(key)
    pg = {"authority_value": pg_value, "authority_fact_id": fact.id if fact else None}
    if pg_value is None:
        if domain is FactDomain.PERMISSION:
            return AuthorityDecision(
                **base, action=Action.DROPPED, reason=Reason.PERMISSION_NOT_GRANTED
            ), None
        return AuthorityDecision(**base, action=Action.KEPT, reason=Reason.NO_AUTHORITY_VALUE), cand
    if cand.value is not None and _same(cand.value, pg_value):
        if policy.keep_agreeing:
            return AuthorityDecision(
                **base, **pg, action=Action.KEPT, reason=Reason.AGREES_WITH_AUTHORITY
            ), cand
        return AuthorityDecision(
            **base, **pg, action=Action.DROPPED, reason=Reason.DUPLICATE_OF_AUTHORITY
        ), None
    if policy.on_conflict == "drop" and cand.value is not None:
        return AuthorityDecision(
            **base, **pg, action=Action.DROPPED, reason=Reason.CONFLICTS_WITH_AUTHORITY
        ), None
    replaced = cand.model_copy(update={"value": pg_value, "source_type": "pg_authority",
                                       "domain": domain})  # fmt: skip
    reason = Reason.COVERED_BY_AUTHORITY if cand.value is None else Reason.CONFLICTS_WITH_AUTHORITY
    return AuthorityDecision(**base, **pg, action=Action.OVERRIDDEN, reason=reason), replaced


def arbitrate(
    candidates: Sequence[AuthorityCandidate],
    snapshot: AuthoritySnapshot,
    *,
    policy: AuthorityPolicy = DEFAULT_POLICY,
    agent_id: str = DEFAULT_AGENT,
) -> AuthorityOutcome:
    """Apply seed 十五.3 to recalled candidates; order of the kept ones is preserved."""
    kept: list[AuthorityCandidate] = []
    decisions: list[AuthorityDecision] = []
    for cand in candidates:
        decision, survivor = _decide(cand, snapshot, policy, agent_id)
        decisions.append(decision)
        if survivor is not None:
            kept.append(survivor)
    return AuthorityOutcome(kept=tuple(kept), decisions=tuple(decisions))
