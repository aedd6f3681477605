"""Settings of the read path an operator may tune (env prefix ``MEMSTRATA_RECALL__``).

Nested in :class:`core.settings.Settings` as ``recall``: how much each layer hands the
pool and how long recall waits for the concurrent ones.  More candidates find more of
what a question needs and cost every routed recall its reads and ranking
(docs/QUALITY.md and docs/PERFORMANCE.md, "How many candidates a recall reads").
The routing rules and the pool's weights are code (``RecallSettings``), not settings.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RecallLimits(BaseModel):
    """Per-layer reads and the concurrent layers' time budget of one recall."""

    model_config = ConfigDict(frozen=True)

    stm_per_index: int = Field(
        20, ge=1, le=1000,
        description="STM items read from each of the session, task and recent indexes",
    )  # fmt: skip
    ltm_candidates: int = Field(
        20, ge=1, le=200,
        description="cards the long-term search hands the pool, or a call's top_k when it"
        " asks for more: LoCoMo dev Recall@10 0.722 at 20, 0.730 at 40, 0.743 at 100, for"
        " about 20 % (50) and 55 % (100) more hybrid recall time (docs/QUALITY.md)",
    )  # fmt: skip
    history_candidates: int = Field(
        20, ge=1, le=200,
        description="raw-history messages the fallback hands the pool, or a call's top_k"
        " when it asks for more",
    )  # fmt: skip
    ltm_timeout_s: float = Field(
        2.0, gt=0, le=60,
        description="one time budget (seconds) for the long-term and raw-history searches,"
        " which run concurrently; a layer not done by then is reported degraded",
    )  # fmt: skip
