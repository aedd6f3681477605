"""What a recall returns, as its own module: the remote client rebuilds these from JSON
without the recall service's stores (its imports are rule and model modules only)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from memstrata.core.authority.blocks import AuthorityBlocks
from memstrata.core.authority.domain_authority import AuthorityDecision
from memstrata.core.recall.pool import Scored
from memstrata.core.recall.profile import QueryProfile
from memstrata.core.recall.render import Lang, RenderedMemory
from memstrata.core.recall.route import Route


class BudgetSplit(BaseModel):
    """How the request's token budget (cl100k, the block as printed) was spent: the
    profile block first, the rest is what the memory lines' verdicts were weighed against."""

    requested: int
    profile: int
    lines: int


class Explain(BaseModel):
    profile: QueryProfile
    route: Route
    cache: str
    candidates: list[Scored]
    authority: list[AuthorityDecision]
    timings_ms: dict[str, float]
    budget: BudgetSplit | None = None


class RecallResult(BaseModel):
    """The typed answer; ``text`` is the block to inject as-is."""

    text: str
    language: Lang
    blocks: AuthorityBlocks | None
    memory: RenderedMemory
    route: Route
    degraded: dict[str, str] = Field(default_factory=dict)
    explain: Explain | None = None
