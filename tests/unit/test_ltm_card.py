"""Cards: deterministic ids, seed 七.2/七.3 fields, filters that refuse bad values."""

from __future__ import annotations

import pytest

from memstrata.core.errors import IllegalTransition, InvalidInput
from memstrata.core.ltm.card import CardDraft, CardStatus, LtmCard, card_id
from memstrata.core.ltm.filters import CardFilter, es_filter, milvus_expr
from memstrata.core.ltm.projection import ProjectionEvent, ProjectionState, next_state

SEED_FIELDS = {
    "memory_id", "user_id", "tenant_id", "project_id", "memory_type", "title", "summary",
    "content", "entities", "tags", "source_type", "bm25_text", "created_at", "updated_at",
    "importance", "confidence", "access_count", "status",
}  # fmt: skip


def draft(**over: object) -> CardDraft:
    values: dict[str, object] = {
        "tenant_id": "t_1",
        "user_id": "u_42",
        "project_id": "p_payment",
        "canonical_key": "case.createorder.timeout",
        "title": "createOrder timeout 常见排查经验",
        "summary": "历史上多次出现 createOrder timeout，数据库正常时常见根因是线程池饱和",
        "content": "完整的长期记忆正文",
        "entities": ["createOrder", "payment-service"],
        "tags": ["timeout", "case"],
        "importance": 0.88,
        "confidence": 0.91,
    }
    values.update(over)
    return CardDraft.model_validate(values)


def test_card_has_every_field_of_the_seed_document() -> None:
    card = LtmCard.from_draft(draft(), now=1713861000.0)
    assert set(card.model_dump()) >= SEED_FIELDS
    assert "createord" in card.bm25_text.split()
    assert "payment-service" in card.bm25_text.split()


def test_same_canonical_key_gives_the_same_id_and_other_owners_do_not() -> None:
    a = card_id("t_1", "u_42", "case.createorder.timeout")
    assert a == card_id("t_1", "u_42", " Case.CreateOrder.Timeout ")
    assert a != card_id("t_1", "u_43", "case.createorder.timeout")
    assert a != card_id("t_2", "u_42", "case.createorder.timeout")
    assert LtmCard.from_draft(draft(), now=1.0).memory_id == a


def test_content_hash_ignores_counters_and_times_but_not_content() -> None:
    card = LtmCard.from_draft(draft(), now=1.0)
    same = card.model_copy(update={"access_count": 9, "updated_at": 5.0, "version": 3})
    assert card.content_hash() == same.content_hash()
    other = LtmCard.from_draft(draft(summary="another root cause"), now=1.0)
    assert card.content_hash() != other.content_hash()


def test_vector_record_has_the_seed_fields() -> None:
    card = LtmCard.from_draft(draft(project_id=None), now=1.0)
    record = card.vector_record([0.1, 0.2])
    assert {
        "id",
        "vector",
        "user_id",
        "tenant_id",
        "project_id",
        "memory_type",
        "importance",
    } <= set(record)
    assert record["project_id"] == ""


def test_long_content_is_windowed_for_embedding() -> None:
    card = LtmCard.from_draft(draft(content="x" * 10_000), now=1.0)
    text = card.embedding_text(500)
    assert len(text) == 500 and text.startswith(card.title)


@pytest.mark.parametrize(
    "bad",
    [
        {"user_id": 'u" or tenant_id != "'},
        {"tenant_id": "t 1"},
        {"project_id": "p'); drop"},
        {"memory_types": ("Fact or 1==1",)},
        {"statuses": ("alive",)},
    ],
)
def test_filter_values_that_fail_validation_never_become_an_expression(
    bad: dict[str, object],
) -> None:
    values: dict[str, object] = {"tenant_id": "t_1", **bad}
    with pytest.raises(InvalidInput):
        CardFilter.parse(**values)


def test_filter_renders_for_milvus_and_elasticsearch() -> None:
    flt = CardFilter.parse(
        tenant_id="t_1", user_id="u_42", project_id="p_payment", memory_types=("semantic_fact",)
    )
    assert milvus_expr(flt) == (
        'tenant_id == "t_1" and user_id == "u_42" and project_id == "p_payment" and '
        'memory_type in ["semantic_fact"] and status in ["active"]'
    )
    assert {"term": {"user_id": "u_42"}} in es_filter(flt)


def test_projection_state_machine_allows_the_documented_moves_only() -> None:
    assert next_state(ProjectionState.PENDING, ProjectionEvent.INDEXED) is ProjectionState.INDEXED
    assert (
        next_state(ProjectionState.PENDING, ProjectionEvent.PERMANENT_ERROR)
        is ProjectionState.FAILED
    )
    assert next_state(ProjectionState.FAILED, ProjectionEvent.REQUEUE) is ProjectionState.PENDING
    with pytest.raises(IllegalTransition):
        next_state(ProjectionState.INDEXED, ProjectionEvent.PERMANENT_ERROR)


def test_status_values_are_the_seed_ones() -> None:
    assert {s.value for s in CardStatus} == {"active", "superseded", "deleted"}


def test_a_card_key_gives_back_the_canonical_key_of_the_item_it_came_from() -> None:
    from memstrata.core.models.identity import EPISODE, PROMOTED, card_key, memory_key

    # Given the canonical key of an STM item
    key = "bug456:excluded:database"
    # Then each route's card key is distinct and maps back to the item's key
    assert card_key(PROMOTED, key) != card_key(EPISODE, key)
    assert memory_key(card_key(PROMOTED, key)) == key
    assert memory_key(card_key(EPISODE, key)) == key
    # and cards made from no item keep their own key
    assert memory_key("session:s1") == "session:s1"
    assert memory_key("summary:timeouts") == "summary:timeouts"
