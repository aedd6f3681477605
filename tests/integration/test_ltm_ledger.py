"""The card ledger in PostgreSQL: migration, one-transaction writes, projection states."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    Engine,
    String,
    cast,
    create_engine,
    func,
    insert,
    inspect,
    literal,
    select,
    text,
    true,
)

from memstrata.core import migrations
from memstrata.core.errors import CorruptRecord, NotFound, PayloadTooLarge
from memstrata.core.ltm.card import CardStatus
from memstrata.core.ltm.ledger import CURATED, Ledger
from memstrata.core.ltm.projection import ProjectionState
from memstrata.core.ltm.tables import cards, ltm_metadata
from tests.integration import ltm_env
from tests.integration.authority_db import scratch_database

pytestmark = pytest.mark.integration

ltm_pg_url = ltm_env.ltm_pg_url
tenant = ltm_env.tenant


@pytest.fixture
def engine(ltm_pg_url: str) -> Iterator[Engine]:
    eng = create_engine(ltm_pg_url)
    yield eng
    with eng.begin() as conn:
        conn.execute(text("DELETE FROM ltm_cards"))
    eng.dispose()


@pytest.fixture
def ledger(engine: Engine) -> Ledger:
    return Ledger(engine, max_content_chars=1000)


def states(ledger: Ledger, memory_id: str) -> dict[str, tuple[str, int, int]]:
    return {
        p.index_name: (p.state.value, p.target_version, p.attempts)
        for p in ledger.projections([memory_id])
    }


def test_migration_branch_upgrades_beside_the_authority_and_downgrades_cleanly() -> None:
    with scratch_database("memstrata_ltm_mig_") as url:
        migrations.upgrade(url, "ltm@head")
        eng = create_engine(url)
        try:
            tables = set(inspect(eng).get_table_names())
            assert {"ltm_cards", "ltm_projections"} <= tables
            assert "tenants" not in tables  # the authority branch was not dragged along
            migrations.upgrade(url, "heads")  # every branch together, as `migrate` runs it
            assert "tenants" in set(inspect(eng).get_table_names())
            migrations.downgrade(url, "ltm@base")
            tables = set(inspect(eng).get_table_names())
            assert "ltm_cards" not in tables and "tenants" in tables
        finally:
            eng.dispose()


def test_migrated_ledger_matches_the_table_definitions(ltm_pg_url: str) -> None:
    eng = create_engine(ltm_pg_url)
    try:
        with eng.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), ltm_metadata)
            checks = set(
                conn.execute(
                    text(
                        "SELECT conname FROM pg_constraint"
                        " WHERE conrelid::regclass::text LIKE 'ltm_%'"
                    )
                ).scalars()
            )
    finally:
        eng.dispose()
    ours = [d for d in diff if "ltm_" in repr(d)]
    assert ours == []
    assert checks == {
        "pk_ltm_cards",
        "ck_ltm_cards_status",
        "pk_ltm_projections",
        "fk_ltm_projections_memory_id_ltm_cards",
        "ck_ltm_projections_index_name",
        "ck_ltm_projections_state",
        "pk_ltm_index_generations",
        "ck_ltm_index_generations_phase",
        "pk_ltm_stale_rows",
        "fk_ltm_stale_rows_memory_id_ltm_cards",
        "ck_ltm_stale_rows_index_name",
    }


def test_a_new_card_and_both_pending_projections_are_written_together(
    ledger: Ledger, tenant: str
) -> None:
    draft = ltm_env.card_draft(tenant, "k1", "createOrder timeout", "thread pool saturated")
    result = ledger.write(draft, now=100.0)
    assert result.op == "inserted" and result.version == 1
    assert states(ledger, result.memory_id) == {
        "lexical": ("pending", 1, 0),
        "vector": ("pending", 1, 0),
    }
    card = ledger.cards([result.memory_id])[result.memory_id]
    assert card.created_at == 100.0 and "createord" in card.bm25_text.split()


def test_re_promotion_updates_the_same_card_and_identical_content_changes_nothing(
    ledger: Ledger, tenant: str
) -> None:
    first = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s1"), now=100.0)
    ledger.indexed([(first.memory_id, "lexical", 1), (first.memory_id, "vector", 1)], now=101.0)
    same = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s1"), now=200.0)
    assert (same.op, same.version) == ("unchanged", 1)
    assert states(ledger, first.memory_id)["vector"][0] == "indexed"
    newer = ledger.write(ltm_env.card_draft(tenant, "K1", "t", "s2"), now=300.0)
    assert (newer.memory_id, newer.op, newer.version) == (first.memory_id, "updated", 2)
    assert states(ledger, first.memory_id)["vector"] == ("pending", 2, 0)
    card = ledger.cards([first.memory_id])[first.memory_id]
    assert (card.created_at, card.updated_at, card.summary) == (100.0, 300.0, "s2")


def test_a_late_mark_for_an_old_version_does_not_hide_the_new_one(
    ledger: Ledger, tenant: str
) -> None:
    first = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s1"), now=100.0)
    ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s2"), now=101.0)
    ledger.indexed([(first.memory_id, "vector", 1)], now=102.0)
    assert states(ledger, first.memory_id)["vector"] == ("pending", 2, 0)


def test_errors_count_attempts_and_permanent_ones_become_dead_letters(
    ledger: Ledger, tenant: str
) -> None:
    mid = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s"), now=100.0).memory_id
    ledger.errored([(mid, "vector", 1)], error="milvus down", permanent=False, now=110.0)
    ledger.errored([(mid, "lexical", 1)], error="IndexRejected: bad", permanent=True, now=110.0)
    rows = {p.index_name: p for p in ledger.projections([mid])}
    assert rows["vector"].state is ProjectionState.PENDING and rows["vector"].attempts == 1
    assert rows["vector"].last_error == "milvus down"
    assert rows["lexical"].state is ProjectionState.FAILED
    assert ledger.due(now=120.0, grace_s=5.0, max_attempts=3, limit=10) == [mid]
    assert ledger.due(now=120.0, grace_s=60.0, max_attempts=3, limit=10) == []
    assert ledger.counts()["lexical"] == {"failed": 1}


def test_delete_is_a_tombstone_that_re_pends_both_projections(ledger: Ledger, tenant: str) -> None:
    mid = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s"), now=100.0).memory_id
    ledger.indexed([(mid, "lexical", 1), (mid, "vector", 1)], now=101.0)
    assert ledger.delete(mid, now=102.0) == 2
    assert states(ledger, mid)["lexical"] == ("pending", 2, 0)
    assert ledger.cards([mid])[mid].status.value == "deleted"
    with pytest.raises(NotFound):
        ledger.delete("ltm_missing")


def test_a_card_read_again_unchanged_is_not_validated_again_and_any_change_is_read(
    ledger: Ledger, engine: Engine, tenant: str
) -> None:
    # Given a card read once
    mid = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s1"), now=100.0).memory_id
    first = ledger.cards([mid])[mid]
    # When it is read again unchanged: the card validated the first time (the same object)
    assert ledger.cards([mid])[mid] is first
    # Then each change of the row is read: a field the content hash leaves out ...
    with engine.begin() as conn:
        conn.execute(text("UPDATE ltm_cards SET access_count = 3 WHERE memory_id = :m"),
                     {"m": mid})  # fmt: skip
    counted = ledger.cards([mid])[mid]
    assert counted is not first and counted.access_count == 3 and counted.summary == "s1"
    # ... a re-promotion with new content, and a status change
    ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s2"), now=200.0)
    assert ledger.cards([mid])[mid].summary == "s2"
    ledger.delete(mid, now=300.0)
    assert ledger.cards([mid])[mid].status is CardStatus.DELETED
    # And a row that does not validate is still refused, whatever was read before
    with engine.begin() as conn:
        conn.execute(text("UPDATE ltm_cards SET importance = 5, content_hash = 'x' "
                          "WHERE memory_id = :m"), {"m": mid})  # fmt: skip
    with pytest.raises(CorruptRecord, match=mid):
        ledger.cards([mid])


def test_oversized_content_is_refused_before_anything_is_written(
    ledger: Ledger, tenant: str
) -> None:
    with pytest.raises(PayloadTooLarge):
        ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s", content="x" * 1001))
    assert ledger.ids() == []


def test_a_promotion_batch_is_written_in_one_transaction(ledger: Ledger, tenant: str) -> None:
    drafts = [ltm_env.card_draft(tenant, f"k{i}", "t", f"s{i}") for i in range(3)]
    results = ledger.write_many(drafts, now=100.0)
    assert [r.op for r in results] == ["inserted"] * 3
    ids = [r.memory_id for r in results]
    ledger.settle(
        indexed=[(ids[0], "lexical", 1), (ids[0], "vector", 1), (ids[1], "vector", 9)],
        transient=[((ids[1], "lexical", 1), "down")],
        permanent=[((ids[2], "vector", 1), "IndexRejected: bad")],
        now=101.0,
    )
    assert states(ledger, ids[0]) == {"lexical": ("indexed", 1, 0), "vector": ("indexed", 1, 0)}
    assert states(ledger, ids[1]) == {"lexical": ("pending", 1, 1), "vector": ("pending", 1, 0)}
    assert states(ledger, ids[2])["vector"] == ("failed", 1, 1)


def test_promoting_a_deleted_card_again_brings_it_back(ledger: Ledger, tenant: str) -> None:
    mid = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s"), now=100.0).memory_id
    ledger.delete(mid, now=101.0)
    again = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s"), now=102.0)
    assert (again.op, again.version) == ("updated", 3)
    assert ledger.cards([mid])[mid].status.value == "active"


def test_curated_names_the_messages_an_active_card_of_the_owner_holds(
    ledger: Ledger, tenant: str
) -> None:
    # Given the owner's cards: an active one holding m1 and m2, a superseded one holding
    # m3, a raw-history record of m4; and another user's card holding m5
    held = ledger.write(ltm_env.card_draft(tenant, "k1", "t", "s", source_message_ids=["m1", "m2"]),
                        now=100.0)  # fmt: skip
    gone = ledger.write(ltm_env.card_draft(tenant, "k2", "t", "s", source_message_ids=["m3"]),
                        now=100.0)  # fmt: skip
    ledger.set_status(gone.memory_id, CardStatus.SUPERSEDED, now=101.0)
    ledger.write(ltm_env.card_draft(tenant, "k3", "t", "s", source_message_ids=["m4"],
                                    source_type="raw_history"), now=100.0)  # fmt: skip
    ledger.write(ltm_env.card_draft(tenant, "k4", "t", "s", source_message_ids=["m5"],
                                    user_id="u_other"), now=100.0)  # fmt: skip
    assert held.op == "inserted"
    # When recall asks which of its raw-history hits are curated
    asked = ["m1", "m3", "m4", "m5", "m6", "m1"]
    # Then only the active curated card of this owner counts
    assert ledger.curated(tenant, "u_42", asked) == {"m1"}
    assert ledger.curated(tenant, "u_42", []) == set()


def test_curated_finds_the_messages_through_their_index_whatever_the_statistics_say(
    ledger: Ledger, engine: Engine, tenant: str
) -> None:
    # Given an owner with 10,000 cards, one message each, loaded at once (copies of one
    # card) and not analysed: autovacuum is off on this machine, and a deployment's may
    # not have run since a bulk load
    first = ledger.write(ltm_env.card_draft(tenant, "k", "t", "s", source_message_ids=["m"]),
                         now=100.0)  # fmt: skip
    n = func.generate_series(1, 10_000).table_valued("i").render_derived(name="n")
    copied = {
        "memory_id": literal("c") + cast(n.c.i, String),
        "canonical_key": literal("k") + cast(n.c.i, String),
        "source_message_ids": func.jsonb_build_array(literal("m") + cast(n.c.i, String)),
    }
    columns = [c.name for c in cards.c]
    rows = select(*[copied.get(c, cards.c[c]) for c in columns]).where(
        cards.c.memory_id == first.memory_id
    )
    with engine.begin() as conn:
        conn.execute(insert(cards).from_select(columns, rows.select_from(cards.join(n, true()))))
    # When recall asks which of twenty messages a curated card holds, as it runs it
    asked = [f"m{i}" for i in range(2, 42, 2)]
    compiled = CURATED.params(ids=asked, tenant_id=tenant, user_id="u_42").compile(engine)
    run = compiled.construct_expanded_state()
    with engine.connect() as conn:
        explained = conn.exec_driver_sql(f"EXPLAIN {run.statement}", run.parameters)
        plan = "\n".join(row[0] for row in explained)
    # Then the message ids are looked up in their GIN index, not in every card of the owner
    assert "ix_ltm_cards_sources" in plan, plan
    assert ledger.curated(tenant, "u_42", asked) == set(asked)
