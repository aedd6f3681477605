"""Episodic statements become LTM episode cards when their session ends (real stores)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from memstrata.core.lifecycle.episodes import EpisodeContext
from memstrata.core.lifecycle.finalise import finalise
from memstrata.core.lifecycle.runtime import Lifecycle
from memstrata.core.lifecycle.scan import scan_user
from memstrata.core.models.transcript import MessageIn
from memstrata.core.runtime import Runtime
from tests.integration.test_lifecycle_env import (
    NOW,
    Kicks,
    Tenant,
    kicks,
    lc,
    lc_engine,
    lifecycle_pg,
    settings,
    tenant,
    user_cards,
)

pytestmark = pytest.mark.integration
__all__ = ["kicks", "lc", "lc_engine", "lifecycle_pg", "settings", "tenant"]  # fixtures


def _turn(res: Runtime, t: Tenant, session: str, speaker: str, text: str, at: float) -> str:
    """One chat message through L0 and the real ingest pipeline; returns its message id."""
    turn = res.transcript.append_turn(
        user_id=t.user, tenant_id=t.id, session_id=session,
        messages=[MessageIn(role="user", content=text, name=speaker)], at=at,
    )  # fmt: skip
    res.pipeline.process([(turn.pointer, list(turn.records))])
    return turn.records[0].message_id


def test_a_statement_becomes_one_episode_card_with_its_context_and_provenance(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine, kicks: Kicks
) -> None:
    u, t = tenant.user, tenant.id
    _turn(res, tenant, "s1", "Melanie", "How was your weekend?", NOW)
    said = _turn(res, tenant, "s1", "Caroline",
                 "I went to an LGBTQ support group on Saturday and it was so powerful.",
                 NOW + 1)  # fmt: skip
    _turn(res, tenant, "s1", "Melanie", "Wow, what did they talk about there?", NOW + 2)
    # Given the promotion scan never routes an episodic statement to PG, a card or the batch
    report = scan_user(lc, u, tenant_id=t, now=NOW + 60, dry_run=True)
    assert report.routes["episode"] >= 1
    assert not any(report.routes[r] for r in ("path_a", "path_b", "batch"))
    # When the session ends
    done = finalise(lc, user_id=u, session_id="s1", now=NOW + 3600, tenant_id=t)
    # Then the statement is one episode card: its words rendered, its neighbours indexed
    episodes = [c for c in user_cards(lc_engine, t, u) if c.memory_type == "episode"]
    assert [c.memory_id for c in episodes] == list(done.episodes)
    [card] = [c for c in episodes if said in c.source_message_ids]
    assert "support group" in card.summary and card.title == card.summary[:80]
    assert card.content == ""  # the neighbours stay in L0: read when the card is indexed
    indexed = EpisodeContext(res.transcript)([card]).texts[card.memory_id]
    assert "How was your weekend?" in indexed and "what did they talk about" in indexed
    assert card.entities[0] == "Caroline" and card.source_type == "session_episode"
    assert card.source_message_ids == [said]
    assert card.memory_id in kicks.ids  # handed to the indexer
    # and finalising again (a retried Beat job) changes nothing and indexes nothing new
    kicked = len(kicks.ids)
    again = finalise(lc, user_id=u, session_id="s1", now=NOW + 3700, tenant_id=t)
    after = {c.memory_id: c.version for c in user_cards(lc_engine, t, u)}
    assert again.episodes == () and after[card.memory_id] == card.version
    assert len(kicks.ids) == kicked


def test_the_same_statement_in_two_sessions_updates_one_card(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    text = "My daughter started violin lessons at the community school."
    _turn(res, tenant, "s1", "Caroline", text, NOW)
    finalise(lc, user_id=u, session_id="s1", now=NOW + 3600, tenant_id=t)
    _turn(res, tenant, "s2", "Caroline", text, NOW + 86400)
    finalise(lc, user_id=u, session_id="s2", now=NOW + 90000, tenant_id=t)
    episodes = [c for c in user_cards(lc_engine, t, u) if c.memory_type == "episode"]
    assert len(episodes) == 1 and "violin" in episodes[0].summary


def test_episodes_can_be_switched_off_by_policy(
    res: Runtime, lc: Lifecycle, tenant: Tenant, lc_engine: Engine
) -> None:
    u, t = tenant.user, tenant.id
    pol = lc.settings.promotion.model_copy(update={"episode_subtypes": frozenset()})
    lc.settings = lc.settings.model_copy(update={"promotion": pol})
    _turn(res, tenant, "s1", "Caroline", "I painted a sunrise over the lake last week.", NOW)
    done = finalise(lc, user_id=u, session_id="s1", now=NOW + 3600, tenant_id=t)
    assert done.episodes == ()
    assert not [c for c in user_cards(lc_engine, t, u) if c.memory_type == "episode"]
