"""Domain authority (seed 十五.3) as a pure function: PG wins in its domains, with reasons."""

from __future__ import annotations

from memstrata.core.authority.domain_authority import (
    Action,
    AuthorityCandidate,
    AuthorityPolicy,
    Reason,
    arbitrate,
    authority_key,
)
from memstrata.core.models.memory import MemoryItem, MemoryType
from tests.unit.authority_snapshots import snapshot

SNAP = snapshot(
    profile__language="zh-CN", profile__answer_style="brief_first", config__default_env="prod-cn"
)


def _cand(cid: str, key: str, value: object = None, **kw: object) -> AuthorityCandidate:
    return AuthorityCandidate.model_validate(
        {"id": cid, "canonical_fact_key": key, "value": value, **kw}
    )


def test_candidate_disagreeing_with_pg_is_overridden_with_pgs_value() -> None:
    out = arbitrate([_cand("m1", "profile.language", "en")], SNAP)
    d = out.decisions[0]
    assert (d.action, d.reason) == (Action.OVERRIDDEN, Reason.CONFLICTS_WITH_AUTHORITY)
    assert d.candidate_value == "en" and d.authority_value == "zh-CN"
    assert d.authority_fact_id == SNAP.facts["profile.language"].id
    assert out.kept[0].value == "zh-CN" and out.kept[0].source_type == "pg_authority"


def test_conflict_policy_drop_removes_the_candidate() -> None:
    out = arbitrate(
        [_cand("m1", "profile.language", "en")], SNAP, policy=AuthorityPolicy(on_conflict="drop")
    )
    assert out.kept == () and out.decisions[0].action is Action.DROPPED


def test_candidate_agreeing_with_pg_is_a_duplicate_of_the_block() -> None:
    out = arbitrate([_cand("m1", "config.default_env", "prod-cn")], SNAP)
    assert out.kept == ()
    assert out.decisions[0].reason is Reason.DUPLICATE_OF_AUTHORITY
    kept = arbitrate(
        [_cand("m1", "config.default_env", "prod-cn")],
        SNAP,
        policy=AuthorityPolicy(keep_agreeing=True),
    )
    assert kept.decisions[0].reason is Reason.AGREES_WITH_AUTHORITY and len(kept.kept) == 1


def test_candidate_without_a_comparable_value_yields_to_pg() -> None:
    out = arbitrate([_cand("m1", "profile.answer_style", None, summary="用户喜欢详细回答")], SNAP)
    assert out.decisions[0].action is Action.OVERRIDDEN
    assert out.kept[0].value == "brief_first" and out.kept[0].summary == "用户喜欢详细回答"


def test_pg_silent_keeps_the_candidate_except_for_permissions() -> None:
    out = arbitrate(
        [
            _cand("m1", "profile.timezone", "UTC"),
            _cand("m2", "permission.project.blog", {"role": "admin", "scope": "admin"}),
        ],
        SNAP,
    )
    assert [d.reason for d in out.decisions] == [
        Reason.NO_AUTHORITY_VALUE,
        Reason.PERMISSION_NOT_GRANTED,
    ]
    assert [c.id for c in out.kept] == ["m1"]


def test_claimed_permission_is_checked_against_the_role_table() -> None:
    claim = _cand("m1", "permission.project.shop", {"role": "developer", "scope": "read_write"})
    out = arbitrate([claim], SNAP)
    assert out.decisions[0].action is Action.OVERRIDDEN
    assert out.kept[0].value == {"role": "developer", "scope": "read_only"}


def test_tenant_level_defaults_are_authoritative_too() -> None:
    out = arbitrate(
        [
            _cand("m1", "config.max_tokens", 4000),
            _cand("m2", "project_metadata.shop.default_env", "prod-us"),
        ],
        SNAP,
    )
    assert [c.value for c in out.kept] == [800, "prod-cn"]


def test_other_domains_are_left_to_redis_and_ltm() -> None:
    cands = [
        _cand("m1", "task_state.bug456.next_step", "check pool"),
        _cand("m2", "preference.format", "table"),
        _cand("m3", "bug456:createOrder:db_excluded"),
    ]
    out = arbitrate(cands, SNAP)
    assert [c.id for c in out.kept] == ["m1", "m2", "m3"]
    assert {d.reason for d in out.decisions} == {Reason.NOT_AUTHORITATIVE}


def test_order_is_preserved_and_every_candidate_has_a_decision() -> None:
    cands = [
        _cand(f"m{i}", k, v)
        for i, (k, v) in enumerate(
            [
                ("task_state.x", 1),
                ("profile.language", "en"),
                ("config.default_env", "prod-cn"),
                ("similar_case.y", 2),
            ]
        )
    ]
    out = arbitrate(cands, SNAP)
    assert [d.candidate_id for d in out.decisions] == ["m0", "m1", "m2", "m3"]
    assert [c.id for c in out.kept] == ["m0", "m1", "m3"]
    assert out.decision_for("m2") is not None


def test_stm_keys_map_onto_authority_keys() -> None:
    assert authority_key("user:pref:language") == "profile.language"
    assert authority_key("user:pref:format") == "preference.format"
    assert authority_key("bug456:constraint:permission", project_id="shop") == (
        "permission.project.shop"
    )
    assert authority_key("bug456:constraint:permission") == "permission.unscoped"
    # the extractor qualifies constraint keys with their main entity
    assert authority_key("bug456:constraint:permission:prod", project_id="shop") == (
        "permission.project.shop"
    )
    assert authority_key("bug456:constraint:no_restart:database") == (
        "bug456:constraint:no_restart:database"
    )
    assert authority_key("bug456:excluded:database") == "bug456:excluded:database"


def test_stm_item_with_a_preference_is_arbitrated() -> None:
    item = MemoryItem(
        id="m_1",
        user_id="alice",
        session_id="s1",
        memory_type=MemoryType.PREFERENCE,
        summary="请用英文回答",
        detail={"value": "en"},
        confidence=0.9,
        importance=0.8,
        created_at=0,
        updated_at=0,
        last_access_at=0,
        expires_at=1,
        fingerprint="f" * 16,
        canonical_fact_key="user:pref:language",
    )
    cand = AuthorityCandidate.from_memory_item(item)
    out = arbitrate([cand], SNAP)
    assert cand.canonical_fact_key == "profile.language"
    assert out.decisions[0].action is Action.OVERRIDDEN and out.kept[0].value == "zh-CN"


def test_unscoped_permission_claims_are_dropped() -> None:
    out = arbitrate([_cand("m1", "permission.unscoped", None, summary="我有写权限")], SNAP)
    assert out.kept == () and out.decisions[0].reason is Reason.PERMISSION_NOT_GRANTED
