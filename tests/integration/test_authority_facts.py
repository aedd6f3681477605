"""Stable facts in PostgreSQL: idempotent upserts, history on change, provenance, projections,
and typed errors with nothing written for bad input."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from memstrata.core.authority.domain import AuthorityLimits, FactDomain, FactOrigin
from memstrata.core.authority.errors import (
    FactValueTooLarge,
    InvalidFactKey,
    InvalidFactValue,
    UnknownDomain,
    UnknownProject,
    UnknownTenant,
    UnknownUser,
)
from memstrata.core.authority.facts import (
    apply_fact_write,
    fact_history,
    grant_role,
    promote_fact,
    retract_fact,
    save_explicit,
    upsert_fact,
)
from memstrata.core.authority.read import read_version
from memstrata.core.authority.schemas import FactWrite, PromotionRecord
from memstrata.core.authority.tables import FACTS, PREFERENCES, PROFILES, ROLES
from memstrata.core.errors import InvalidId, InvalidInput, NotFound, PayloadTooLarge
from tests.integration import authority_db
from tests.integration.authority_db import World

pytestmark = pytest.mark.integration

pg_url = authority_db.pg_url
engine = authority_db.engine
world = authority_db.world


def _upsert(engine: Engine, w: World, key: str, value: Any, **kw: Any) -> Any:
    with engine.begin() as conn:
        return upsert_fact(
            db=conn,
            tenant_id=w.tenant_id,
            user_id=w.alice,
            canonical_fact_key=key,
            domain=key.split(".", 1)[0],
            value=value,
            **kw,
        )


def _fact_rows(engine: Engine, w: World) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(FACTS).where(FACTS.c.tenant_id == w.tenant_id)
            ).scalar_one()
        )


def test_identical_value_is_idempotent(engine: Engine, world: World) -> None:
    # Given a fact written once
    first = _upsert(engine, world, "config.default_env", "prod-cn")
    before = _fact_rows(engine, world)
    # When the same value is written again (keys in another order for a dict, too)
    again = _upsert(engine, world, "config.default_env", "prod-cn")
    # Then nothing changes: same row, same version, no new row
    assert first.changed and not again.changed
    assert again.fact.id == first.fact.id
    assert again.version.version == first.version.version
    assert _fact_rows(engine, world) == before
    a = _upsert(engine, world, "preference.format", {"x": 1, "y": [1, 2]})
    b = _upsert(engine, world, "preference.format", {"y": [1, 2], "x": 1})
    assert a.changed and not b.changed


def test_changed_value_supersedes_and_keeps_history(engine: Engine, world: World) -> None:
    # Given a current value
    old = _upsert(engine, world, "preference.code_style", "type hints")
    # When a different value is written
    new = _upsert(engine, world, "preference.code_style", "docstrings")
    # Then the new row is current, the old one is history pointing at its successor
    assert new.changed and new.superseded_id == old.fact.id
    assert new.version.version > old.version.version
    with engine.connect() as conn:
        history = fact_history(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="preference.code_style",
        )
    assert [h.value for h in history] == ["type hints", "docstrings"]
    assert history[0].superseded_at is not None and history[0].superseded_by == new.fact.id
    assert history[1].superseded_at is None
    # And switching back is a change again (a third version), not a resurrection
    back = _upsert(engine, world, "preference.code_style", "type hints")
    assert back.changed and back.fact.id not in {old.fact.id, new.fact.id}


def test_explicit_save_and_promotion_keep_provenance(engine: Engine, world: World) -> None:
    with engine.begin() as conn:
        saved = save_explicit(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="config.default_project",
            domain="config",
            value="shop",
            message_ids=["msg_1", "msg_2"],
        )
        promoted = promote_fact(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="preference.format",
            domain=FactDomain.PREFERENCE,
            value="table",
            source_memory_ids=["m_abc"],
            source_message_ids=["msg_9"],
            promotion=PromotionRecord(
                rule="repeated_preference", score=0.92, mention_count=3, session_ids=("s1", "s2")
            ),
        )
    assert saved.fact.origin is FactOrigin.EXPLICIT
    assert saved.fact.source_message_ids == ("msg_1", "msg_2")
    assert saved.fact.promotion is not None and saved.fact.promotion["rule"] == "explicit_save"
    assert promoted.fact.origin is FactOrigin.PROMOTION
    assert promoted.fact.source_memory_ids == ("m_abc",)
    assert promoted.fact.promotion is not None
    assert promoted.fact.promotion["mention_count"] == 3
    assert promoted.fact.promotion["session_ids"] == ["s1", "s2"]


def test_well_known_keys_are_projected_into_typed_tables(engine: Engine, world: World) -> None:
    _upsert(engine, world, "profile.timezone", "Asia/Shanghai")
    _upsert(engine, world, "preference.format", ["table", "bullets"])
    with engine.begin() as conn:
        grant_role(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            project_id=world.blog,
            role="editor",
            scope="read_write",
        )
    with engine.connect() as conn:
        prof = conn.execute(
            select(PROFILES).where(
                PROFILES.c.tenant_id == world.tenant_id, PROFILES.c.user_id == world.alice
            )
        ).one()
        pref = conn.execute(
            select(PREFERENCES.c.value).where(
                PREFERENCES.c.tenant_id == world.tenant_id, PREFERENCES.c.name == "format"
            )
        ).scalar()
        roles = conn.execute(
            select(ROLES.c.project_id, ROLES.c.permission_scope).where(
                ROLES.c.tenant_id == world.tenant_id, ROLES.c.user_id == world.alice
            )
        ).all()
    assert (prof.language, prof.answer_style, prof.timezone) == (
        "zh-CN",
        "brief_first",
        "Asia/Shanghai",
    )
    assert pref == ["table", "bullets"]
    assert sorted(roles) == [("blog", "read_write"), ("shop", "read_only")]
    # Retracting a role removes the projection and keeps the fact as history
    with engine.begin() as conn:
        v = retract_fact(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="permission.project.blog",
        )
        nothing = retract_fact(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="permission.project.blog",
        )
    assert v is not None and nothing is None
    with engine.connect() as conn:
        left = (
            conn.execute(
                select(ROLES.c.project_id).where(
                    ROLES.c.tenant_id == world.tenant_id, ROLES.c.user_id == world.alice
                )
            )
            .scalars()
            .all()
        )
        hist = fact_history(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="permission.project.blog",
        )
    assert left == ["shop"]
    assert len(hist) == 1 and hist[0].superseded_at is not None


def test_repository_accepts_a_sqlmodel_session(engine: Engine, world: World) -> None:
    with Session(engine) as session:
        result = upsert_fact(
            db=session,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="constraint.no_friday_deploys",
            domain="constraint",
            value="no deploys on Friday",
        )
        session.commit()
    with Session(engine) as session:
        assert read_version(db=session, tenant_id=world.tenant_id, user_id=world.alice) == (
            result.version.version
        )


def test_caller_rollback_discards_the_write(engine: Engine, world: World) -> None:
    before = _fact_rows(engine, world)
    with engine.connect() as conn:
        upsert_fact(
            db=conn,
            tenant_id=world.tenant_id,
            user_id=world.alice,
            canonical_fact_key="config.theme",
            domain="config",
            value="dark",
        )
        conn.rollback()
    assert _fact_rows(engine, world) == before


BAD_INPUTS: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("unknown tenant", {"tenant_id": "no_such_tenant"}, UnknownTenant),
    ("unknown user", {"user_id": "nobody"}, UnknownUser),
    ("invalid tenant id", {"tenant_id": "a:b"}, InvalidId),
    ("invalid user id", {"user_id": "../etc"}, InvalidId),
    ("unknown domain", {"domain": "gossip", "canonical_fact_key": "gossip.x"}, UnknownDomain),
    ("key outside its domain", {"canonical_fact_key": "permission.x"}, InvalidFactKey),
    ("malformed key", {"canonical_fact_key": "config.a b"}, InvalidFactKey),
    ("oversized value", {"value": "x" * 70_000}, FactValueTooLarge),
    ("non-JSON value", {"value": {1, 2}}, InvalidFactValue),
    ("NaN value", {"value": float("nan")}, InvalidFactValue),
    ("too many sources", {"source_message_ids": [f"m{i}" for i in range(300)]}, PayloadTooLarge),
    ("invalid source id", {"source_memory_ids": ["bad id"]}, InvalidId),
    (
        "bad role value",
        {
            "canonical_fact_key": "permission.project.shop",
            "domain": "permission",
            "value": {"role": "dev", "scope": "root"},
        },
        InvalidFactValue,
    ),
    (
        "role on unknown project",
        {
            "canonical_fact_key": "permission.project.nope",
            "domain": "permission",
            "value": {"role": "dev", "scope": "read_only"},
        },
        UnknownProject,
    ),
    (
        "non-string language",
        {"canonical_fact_key": "profile.language", "domain": "profile", "value": 42},
        InvalidFactValue,
    ),
]


@pytest.mark.parametrize(("case", "override", "error"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_a_typed_error_and_writes_nothing(
    engine: Engine, world: World, case: str, override: dict[str, Any], error: type[Exception]
) -> None:
    # Given the state before
    rows = _fact_rows(engine, world)
    with engine.connect() as conn:
        version = read_version(db=conn, tenant_id=world.tenant_id, user_id=world.alice)
    args: dict[str, Any] = {
        "tenant_id": world.tenant_id,
        "user_id": world.alice,
        "canonical_fact_key": "config.default_env",
        "domain": "config",
        "value": "prod-cn",
    }
    args.update(override)
    # When a bad write is attempted (the caller's transaction rolls back on error)
    with pytest.raises(error) as info, engine.begin() as conn:
        upsert_fact(db=conn, limits=AuthorityLimits(max_value_bytes=65536), **args)
    # Then it is one of our typed errors, and nothing was written
    assert isinstance(info.value, InvalidInput | NotFound)
    assert _fact_rows(engine, world) == rows
    with engine.connect() as conn:
        assert read_version(db=conn, tenant_id=world.tenant_id, user_id=world.alice) == version


def test_index_refuses_a_second_current_row_even_bypassing_the_repository(
    engine: Engine, world: World
) -> None:
    _upsert(engine, world, "config.default_env", "prod-cn")
    row = {
        "tenant_id": world.tenant_id,
        "user_id": world.alice,
        "domain": "config",
        "canonical_fact_key": "config.default_env",
        "value": "x",
        "value_hash": "x",
        "origin": "admin",
        "source_memory_ids": [],
        "source_message_ids": [],
    }
    with pytest.raises(IntegrityError, match="uq_stable_memory_facts_current"), engine.begin() as c:
        c.execute(insert(FACTS).values(**row))


def test_a_validated_fact_write_payload_is_applied(engine: Engine, world: World) -> None:
    write = FactWrite.model_validate(
        {
            "canonical_fact_key": "preference.format",
            "domain": "preference",
            "value": "table",
            "origin": "promotion",
            "source_memory_ids": ["m_1"],
            "promotion": {"rule": "repeated_preference", "mention_count": 2},
        }
    )
    with engine.begin() as conn:
        result = apply_fact_write(
            db=conn, tenant_id=world.tenant_id, user_id=world.alice, write=write
        )
    assert result.changed and result.fact.origin is FactOrigin.PROMOTION
    assert result.fact.source_memory_ids == ("m_1",)
