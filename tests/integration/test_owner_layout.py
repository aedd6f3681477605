"""Data written before one owner identity is adopted into the default tenant, once."""

from __future__ import annotations

from typing import cast

import pytest

from memstrata.core.models.transcript import MessageIn
from memstrata.core.owner_layout import adopt_redis, adopt_transcripts
from memstrata.core.runtime import Runtime
from tests.integration.test_stm_store import T0, item

pytestmark = pytest.mark.integration


def _to_legacy_layout(res: Runtime, user: str) -> list[str]:
    """Move the user's default-tenant keys to the pre-2026-12-01 scope ``{<user>}``."""
    ns = res.settings.key_namespace
    moved = []
    for key in list(res.redis.scan_iter(match=f"{ns}:user:{{default/{user}}}:*")):
        legacy = key.replace(f"{{default/{user}}}", f"{{{user}}}")
        res.redis.rename(key, legacy)
        moved.append(legacy)
    hint = res.stm.gkeys.sweep_users
    score = res.redis.zscore(hint, f"default/{user}")
    assert score is not None
    res.redis.zrem(hint, f"default/{user}")
    res.redis.zadd(hint, {user: score})
    return moved


def test_no_tenant_stm_keys_of_the_old_layout_are_adopted_by_the_default_tenant(
    res: Runtime,
) -> None:
    # Given items a user wrote without a tenant under the old scope {u_1}
    res.stm.upsert_many([item("m_1", ttl=600), item("m_2", summary="keep prod as is")])
    legacy = _to_legacy_layout(res, "u_1")
    assert legacy and res.stm.get("u_1", "m_1") is None  # invisible to today's readers
    # When the layout is adopted
    report = adopt_redis(res.redis, res.settings.key_namespace)
    # Then every key moved into the default tenant's scope and reads back as before
    assert report.keys == len(legacy) and report.conflicts == []
    assert report.members == 1
    got = res.stm.get("u_1", "m_1")
    assert got is not None and got.summary == item("m_1").summary
    assert {i.id for i in res.stm.by_session("u_1", "s_1", now=T0)} == {"m_1", "m_2"}
    hinted = res.redis.zrange(res.stm.gkeys.sweep_users, 0, -1, withscores=True)
    assert {str(m) for m, _score in cast(list[tuple[str, float]], hinted)} == {"default/u_1"}
    # and the sweep finds the expired one where it now lives
    assert res.stm.sweep(now=T0 + 700, max_items=10).removed == 1
    # And running it again changes nothing
    again = adopt_redis(res.redis, res.settings.key_namespace)
    assert (again.keys, again.members, again.conflicts) == (0, 0, [])


def test_a_key_both_layouts_hold_is_left_alone_and_reported(res: Runtime) -> None:
    # Given the same owner's key in both layouts
    res.stm.upsert(item("m_1"))
    ns = res.settings.key_namespace
    res.redis.set(f"{ns}:user:{{u_1}}:recent", "old")
    # When adopted
    report = adopt_redis(res.redis, ns)
    # Then the new key is untouched and the old one is named for the operator
    assert report.conflicts == [f"{ns}:user:{{u_1}}:recent"]
    assert res.redis.get(f"{ns}:user:{{u_1}}:recent") == "old"
    assert res.stm.recent("u_1", now=T0)[0].id == "m_1"


def test_no_tenant_transcripts_move_into_the_default_tenant_folder(res: Runtime) -> None:
    # Given a session file at the old no-tenant path and one already at the new path
    store = res.transcript
    turn = store.append_turn(
        user_id="u_1", session_id="s_1", messages=[MessageIn(role="user", content="hello")], at=T0
    )
    new_path = store.path(user_id="u_1", session_id="s_1")
    old_path = store.root / "u" / "u_1" / "s_1.jsonl"
    old_path.parent.mkdir(parents=True)
    new_path.rename(old_path)
    (store.root / "u" / "u_1" / "s_2.jsonl").write_text("")
    store.path(user_id="u_1", session_id="s_2").write_text("")
    # When adopted
    report = adopt_transcripts(store.root)
    # Then the session is where every reader looks, and the clash is reported, not merged
    assert report.files == 1
    assert report.conflicts == [str(store.root / "u" / "u_1" / "s_2.jsonl")]
    records = list(store.read_session(user_id="u_1", session_id="s_1"))
    assert [r.message_id for r in records] == [turn.records[0].message_id]
    assert not old_path.exists()
