"""Settings of the lifecycle layer (env prefix ``MEMSTRATA_LIFECYCLE__``).

Nested in :class:`core.settings.Settings` as ``lifecycle``: a process reads it as
``settings.lifecycle`` (variables ``MEMSTRATA_LIFECYCLE__<FIELD>``).  Intervals, ages and
time budgets are seconds.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from memstrata.core.lifecycle.batch import BatchPolicy
from memstrata.core.lifecycle.policy import PromotionPolicy


class ForgetPolicy(BaseModel):
    """Which LTM cards are forgotten: long inactive, unimportant and rarely recalled."""

    model_config = ConfigDict(frozen=True)

    inactive_s: float = Field(90 * 24 * 3600.0, gt=0)
    max_importance: float = Field(0.3, ge=0.0, le=1.0)
    max_access_count: int = Field(0, ge=0)
    keep_types: frozenset[str] = frozenset({"session_summary", "topic_summary"})


class ConsolidatePolicy(BaseModel):
    """Consolidation of an owner's LTM cards (``core.lifecycle.consolidate``)."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = True
    interval_s: float = Field(3600.0, gt=0)  # Beat; the job reads owners changed in 2 intervals
    max_owners: int = Field(500, ge=1, le=100_000)
    merge_min: int = Field(3, ge=2, le=1000)  # seed 2: >= 3 on one topic are merged
    summarise_over: int = Field(10, ge=2, le=10_000)  # seed 2: > 10 are summarised
    summary_chars: int = Field(800, ge=100, le=2000)  # extractive summary bound
    topic_min: float = Field(0.3, gt=0.0, le=1.0)  # term Jaccard to the cluster's first card
    min_shared: int = Field(2, ge=1, le=100)  # topical terms in common, at least
    duplicate_min: float = Field(0.8, gt=0.0, le=1.0)  # a near-duplicate pair is merged
    max_df: float = Field(0.1, gt=0.0, le=1.0)  # terms on more of the owner's cards: not topical
    # entity cards (core.lifecycle.entity_cards): a name on >= entity_min cards of
    # >= entity_sessions sessions (and on at most max_df of the cards) gets one
    entities: bool = True
    entity_min: int = Field(3, ge=2, le=1000)
    entity_sessions: int = Field(2, ge=1, le=1000)
    entity_max_cards: int = Field(100, ge=1, le=10_000)  # per owner, the most stated first

    def df_cap(self, cards: int) -> int:
        """On how many of a scope's ``cards`` a term or name may be and still say what a
        card is about: ``max_df`` of them, but never fewer than one summarised topic holds
        (``summarise_over`` + 1), so a small scope keeps its words."""
        return max(self.summarise_over + 1, int(self.max_df * cards))


class LifecycleSettings(BaseSettings):
    """Promotion, batch queue, sessions and LTM maintenance knobs."""

    model_config = SettingsConfigDict(
        env_prefix="MEMSTRATA_LIFECYCLE__", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    promotion: PromotionPolicy = PromotionPolicy()
    batch: BatchPolicy = BatchPolicy()
    forget: ForgetPolicy = ForgetPolicy()
    consolidate: ConsolidatePolicy = ConsolidatePolicy()

    # Beat intervals (seconds); every job also has a batch bound and a time bound
    scan_interval_s: float = Field(300.0, gt=0)
    scan_max_items: int = Field(200_000, ge=1, le=10_000_000)
    batch_interval_s: float = Field(300.0, gt=0)  # seed 2: every 5 minutes
    batch_max_entries: int = Field(10_000, ge=1, le=1_000_000)
    idle_check_s: float = Field(300.0, gt=0)
    session_idle_s: float = Field(1800.0, gt=0)  # seed 2: a session lasts ~30 minutes
    idle_batch: int = Field(100, ge=1, le=10_000)
    maintain_interval_s: float = Field(3600.0, gt=0)
    forget_interval_s: float = Field(24 * 3600.0, gt=0)
    forget_apply: bool = False  # the Beat job only reports unless this is set
    max_run_s: float = Field(50.0, gt=0, le=3600)
    # how long an explicit command (retract, end a session, consolidate one owner) waits
    # for the owner's lock held by another lifecycle job (core.lifecycle.owner_lock);
    # Beat jobs never wait, they skip the owner
    owner_lock_wait_s: float = Field(10.0, gt=0, le=600)

    # LTM maintenance and sessions
    summarise_over: int = Field(10, ge=2, le=10_000)  # seed 2: > 10 cards on one topic
    preload_limit: int = Field(5, ge=0, le=100)  # seed 2: TOP_K = 5
    preload_ttl_s: int = Field(1800, ge=60)
    session_summary_items: int = Field(50, ge=1, le=1000)  # seed 2: getRecentMemories(50)
    # what recall injects of a session summary (its FINALISE audit row names every item): a summary
    # as long as the session would cost more prompt than the memories it stands for
    session_summary_chars: int = Field(400, ge=80, le=2000)
