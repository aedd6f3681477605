"""Ledger -> projections -> search, on the real milvus-lite server and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from memstrata.core.ltm import admin
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.errors import EmbeddingDimensionMismatch
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.indexer import Projector, plan_reconcile, rebuild, reconcile
from memstrata.core.ltm.ledger import Ledger, Projection
from memstrata.core.ltm.ports import ContextRead
from memstrata.core.ltm.rows import row_key
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.ltm.search import SearchMode
from memstrata.core.ltm.text import normalise
from memstrata.core.ltm.vector import MilvusVectorIndex
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
ltm = ltm_env.ltm
tenant = ltm_env.tenant


def top(rt: LtmRuntime, query: str, flt: CardFilter, mode: SearchMode) -> list[str]:
    return [r.memory_id for r in rt.search.search(query, flt, mode=mode)]


def test_a_promoted_card_is_found_by_its_words_and_by_its_meaning(
    ltm: LtmRuntime, tenant: str
) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    assert top(ltm, "ORA-00942", flt, SearchMode.LEXICAL)[0] == ids["case.ora00942"]
    meaning = "what sweet food does the user like"
    assert top(ltm, meaning, flt, SearchMode.VECTOR)[0] == ids["pref.mango"]
    assert top(ltm, "缓存写不进去了", flt, SearchMode.VECTOR)[0] == ids["case.redis.oom"]
    hybrid = ltm.search.search("createOrder 超时 线程池", flt, mode=SearchMode.HYBRID)
    assert hybrid[0].memory_id == ids["case.createorder.timeout"]
    assert set(hybrid[0].sources) == {"lexical", "vector"}
    assert len(hybrid) <= 5


def test_re_promotion_does_not_duplicate_and_reindexing_is_idempotent(
    ltm: LtmRuntime, tenant: str
) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    again = ltm_env.card_draft(
        tenant, "case.ora00942", "ORA-00942 on the reporting job", "new text"
    )
    assert ltm.ledger.write(again).memory_id == ids["case.ora00942"]
    ltm.projector.project([ids["case.ora00942"]])
    ltm.projector.project([ids["case.ora00942"]], force=True)
    # the update inserted version 2's row; version 1's waits for the reconciler's purge
    assert ltm.vector.count() == len(ltm_env.CORPUS) + 1
    flt = CardFilter(tenant_id=tenant)
    hits = ltm.search.search("ORA-00942", flt, mode=SearchMode.LEXICAL)
    assert [h.summary for h in hits if h.memory_id == ids["case.ora00942"]] == ["new text"]
    # per index: version 1's key and the bare one (a row an earlier version may have left)
    assert ltm.projector.purge_stale() == 4
    assert ltm.vector.count() == len(ltm_env.CORPUS)
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    hits = ltm.search.search("ORA-00942", flt, mode=SearchMode.LEXICAL)
    assert [h.summary for h in hits if h.memory_id == ids["case.ora00942"]] == ["new text"]


def test_an_update_inserts_a_row_and_the_reconciler_purges_the_one_it_replaced(
    ltm: LtmRuntime, tenant: str
) -> None:
    """milvus-lite looks an id up before an upsert or a delete (~100 ms at 100k cards), so
    a versioned index takes an update as an insert of the new version's row; until the
    purge the old row may still find the card, which is then returned once, with its new
    text, and after it only the new words do."""
    ids = ltm_env.seed_corpus(ltm, tenant)
    mid = ids["case.ora00942"]
    assert ltm.projector.versioned == frozenset({"lexical", "vector"})
    draft = ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942 on the reporting job",
                               "the grant was missing on the reporting schema")  # fmt: skip
    version = ltm.ledger.write(draft).version
    ltm.projector.project([mid])
    assert {p.indexed_version for p in ltm.ledger.projections([mid])} == {version}
    assert ltm.ledger.count_stale() == 4  # per index: version 1's key and the bare one
    assert admin.status(ltm)["stale_rows"] == 4  # `memstrata ltm status` shows them
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    old_words = "view was dropped in a migration"  # said by version 1 only
    assert old_words in dict((k, t) for k, _, t in ltm_env.CORPUS)["case.ora00942"]
    for mode in SearchMode:
        found = ltm.search.search(f"ORA-00942 {old_words}", flt, mode=mode)
        mine = [h for h in found if h.memory_id == mid]
        assert len(mine) == 1, (mode, [h.memory_id for h in found])
        if mode is not SearchMode.VECTOR:  # the vector collection stores no text
            assert mine[0].summary == "the grant was missing on the reporting schema"
    assert ltm.projector.purge_stale() == 4
    assert ltm.ledger.count_stale() == 0
    assert ltm.projector.purge_stale() == 0
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    lexical = ltm.lexical.search(normalise(old_words), flt, 20)
    assert mid not in [h.memory_id for h in lexical]  # the old words are gone with the row
    assert top(ltm, "grant missing reporting schema", flt, SearchMode.LEXICAL)[0] == mid


def test_rows_written_before_versioned_keys_go_with_the_first_update(
    ltm: LtmRuntime, tenant: str
) -> None:
    """A collection filled by an earlier version holds each card under its bare
    memory_id: such a row is still found (once), and the card's first update schedules
    it with the replaced versions."""
    ids = ltm_env.seed_corpus(ltm, tenant)
    mid = ids["case.ora00942"]
    card = ltm.ledger.cards([mid])[mid]
    ltm.lexical.insert([card])  # as an earlier version wrote it: keyed by the memory_id
    ltm.vector.insert([card], ltm.embedder.embed_documents([card.embedding_text(2000)]))
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    for mode in SearchMode:
        assert top(ltm, "ORA-00942 reporting job", flt, mode).count(mid) == 1, mode
    ltm.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942", "v2"))
    ltm.projector.project([mid])
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) + 2
    assert ltm.projector.purge_stale() == 4  # the bare key and version 1, in both indexes
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)


def test_a_deleted_card_leaves_no_row_of_any_version(ltm: LtmRuntime, tenant: str) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    mid = ids["case.ora00942"]
    ltm.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942", "v2"))
    ltm.projector.project([mid])  # version 1's rows are stale, not purged yet
    ltm.ledger.delete(mid)
    assert ltm.projector.project([mid]).deleted == 2
    # no row of any version is left to find the deleted card before the purge runs
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) - 1
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) - 1
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    for mode in SearchMode:
        assert mid not in top(ltm, "ORA-00942 reporting job view dropped", flt, mode)
    assert ltm.projector.purge_stale() == 4  # already gone: the deletes are no-ops


def test_filters_keep_other_users_and_projects_out(ltm: LtmRuntime, tenant: str) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    other = ltm_env.card_draft(tenant, "pref.mango", "Favourite dessert", "mango", user_id="u_9")
    other_id = ltm.ledger.write(other).memory_id
    ltm.projector.project([other_id])
    for mode in SearchMode:
        found = top(ltm, "mango ice cream", CardFilter(tenant_id=tenant, user_id="u_9"), mode)
        assert found == [other_id]
        blog = CardFilter(tenant_id=tenant, project_id="p_blog")
        assert top(ltm, "mango ice cream", blog, mode) == []
    assert ids["pref.mango"] != other_id


def test_a_delete_propagates_to_both_indexes(ltm: LtmRuntime, tenant: str) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    ltm.ledger.delete(ids["case.ora00942"])
    report = ltm.projector.project([ids["case.ora00942"]])
    assert report.deleted == 2
    flt = CardFilter(tenant_id=tenant)
    for mode in SearchMode:
        assert ids["case.ora00942"] not in top(ltm, "ORA-00942 reporting job", flt, mode)
    assert {p.state.value for p in ltm.ledger.projections([ids["case.ora00942"]])} == {"indexed"}


def test_both_indexes_can_be_rebuilt_from_postgresql(ltm: LtmRuntime, tenant: str) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    report = rebuild(ltm.projector, drop=True)
    assert report.indexed == 2 * len(ids) and not report.transient
    assert ltm.vector.count() == len(ids)
    flt = CardFilter(tenant_id=tenant)
    assert top(ltm, "ORA-00942", flt, SearchMode.HYBRID)[0] == ids["case.ora00942"]


def test_a_collection_of_another_dimension_fails_start_up_clearly(ltm: LtmRuntime) -> None:
    other = MilvusVectorIndex(ltm.milvus, collection=ltm.vector.collection, dim=384)
    with pytest.raises(EmbeddingDimensionMismatch, match="holds 512-d vectors"):
        other.ensure_schema()


def test_a_rejected_projection_is_a_dead_letter_with_its_reason_until_reconciled(
    ltm: LtmRuntime, tenant: str
) -> None:
    ltm.lexical.drop()  # the index now refuses writes: a permanent error, not an outage
    draft = ltm_env.card_draft(tenant, "case.dl", "E5001 in checkout", "dead letter case")
    memory_id = ltm.ledger.write(draft).memory_id
    report = ltm.projector.project([memory_id])
    assert report.permanent == [memory_id] and report.indexed == 1  # the vector side worked
    rows = {p.index_name: p for p in ltm.ledger.projections([memory_id])}
    assert rows["lexical"].state.value == "failed"
    assert (rows["lexical"].last_error or "").startswith("IndexRejected")
    assert rows["vector"].state.value == "indexed"

    ltm.lexical.ensure_schema()  # the operator fixes the cause; the reconciler re-drives
    plan = plan_reconcile(ltm.ledger, now=time.time(), grace_s=0, max_attempts=8, limit=10)
    assert plan.memory_ids == (memory_id,)
    assert reconcile(ltm.projector, plan).indexed == 1
    hits = ltm.search.search("E5001", CardFilter(tenant_id=tenant), mode=SearchMode.LEXICAL)
    assert hits[0].memory_id == memory_id


def test_a_policy_given_per_search_sets_how_many_candidates_each_index_returns(
    ltm: LtmRuntime, tenant: str
) -> None:
    # the read path asks for as many cards as its caller wants (recall's top_k): the
    # per-call policy must reach the indexes, not only the final cut
    ltm_env.seed_corpus(ltm, tenant)
    flt = CardFilter(tenant_id=tenant)
    wide = ltm.search.policy.model_copy(update={"candidates": 50, "top_k": 50})
    narrow = ltm.search.policy.model_copy(update={"candidates": 2, "top_k": 50})
    n = len(ltm_env.CORPUS)
    assert n > 4
    assert len(ltm.search.search("timeout", flt, mode=SearchMode.VECTOR, policy=wide)) == n
    assert len(ltm.search.search("timeout", flt, mode=SearchMode.VECTOR, policy=narrow)) == 2


class _Late(Ledger):
    """The ledger as a slow projection saw it: ``work`` answers the snapshot read before
    another process wrote and projected a newer version (every other call is live)."""

    def __init__(self, ledger: Ledger, snapshot: tuple[dict[str, LtmCard], list[Projection]]):
        self.__dict__.update(ledger.__dict__)
        self.snapshot = snapshot

    def work(self, memory_ids: Sequence[str]) -> tuple[dict[str, LtmCard], list[Projection]]:
        return self.snapshot


def test_a_row_a_newer_version_overtook_before_it_settled_is_purged_too(
    ltm: LtmRuntime, tenant: str
) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    mid = ids["case.ora00942"]
    ltm.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942", "second words"))
    read_before = ltm.ledger.work([mid])  # a slow projection reads version 2 ...
    ltm.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942", "third words"))
    ltm.projector.project([mid])  # ... another projects version 3, and the purge runs
    ltm.projector.purge_stale()
    slow = Projector(ledger=_Late(ltm.ledger, read_before), lexical=ltm.lexical,
                     vector=ltm.vector, embedder=ltm.embedder,
                     versioned=ltm.projector.versioned)  # fmt: skip
    try:
        slow.project([mid])  # ... then its version 2 lands, after version 3
    finally:
        slow.close()
    assert {p.indexed_version for p in ltm.ledger.projections([mid])} == {3}
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) + 1
    ltm.projector.purge_stale()  # version 2's row was recorded when its run settled
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    assert mid not in [h.memory_id for h in ltm.lexical.search("second", flt, 20)]
    assert mid in [h.memory_id for h in ltm.lexical.search("third", flt, 20)]


def test_turning_versioned_rows_off_never_purges_the_row_that_serves(
    ltm: LtmRuntime, tenant: str
) -> None:
    """After versioned rows are turned off a card's row is its bare memory_id again: the
    rows it held while they were on are still purged, the bare key never is."""
    ids = ltm_env.seed_corpus(ltm, tenant)  # versioned: held as <id>@1
    mid = ids["case.ora00942"]
    ltm.projector.versioned = frozenset()
    try:
        ltm.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942", "upserted"))
        ltm.projector.project([mid])  # upserts the bare key; <id>@1 is left to the purge
        assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) + 1
        ltm.projector.purge_stale()
        assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
        assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
        flt = CardFilter(tenant_id=tenant, user_id="u_42")
        assert top(ltm, "upserted", flt, SearchMode.LEXICAL) == [mid]
        ltm.ledger.delete(mid)  # a delete names every key the card may have
        ltm.projector.project([mid])
        assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) - 1
    finally:
        ltm.projector.versioned = ltm.settings.versioned_indexes()


def test_a_version_written_but_never_settled_goes_with_the_next_update(
    ltm: LtmRuntime, tenant: str
) -> None:
    """Version 1 reached the indexes but its settle was lost, and the card was updated
    before a retry: the ledger still says never written, yet the row is there."""
    ids = ltm_env.seed_corpus(ltm, tenant)
    draft = ltm_env.card_draft(tenant, "case.lost", "ERR_LOST on the batch job", "first")
    mid = ltm.ledger.write(draft).memory_id
    card = ltm.ledger.cards([mid])[mid]
    key = row_key(mid, card.version)  # what the lost projection wrote
    ltm.lexical.insert([card], keys=[key])
    ltm.vector.insert([card], ltm.embedder.embed_documents([card.embedding_text(2000)]),
                      keys=[key])  # fmt: skip
    ltm.ledger.write(ltm_env.card_draft(tenant, "case.lost", "ERR_LOST on the batch job",
                                        "second"))  # fmt: skip
    ltm.projector.project([mid])
    ltm.projector.purge_stale()
    assert ltm.vector.count_owner(tenant, "u_42") == len(ids) + 1
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ids) + 1
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    assert mid not in [h.memory_id for h in ltm.lexical.search("first", flt, 20)]


def test_a_stale_row_recorded_again_during_a_purge_is_not_forgotten(
    ltm: LtmRuntime, tenant: str
) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    mid = ids["case.ora00942"]
    ltm.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942", "v2"))
    ltm.projector.project([mid])
    read = ltm.ledger.stale_rows(100)  # a purge reads the rows, deletes them ...
    assert read
    time.sleep(0.01)
    # ... while a late write of one of those versions lands and is recorded again
    ltm.ledger.settle(indexed=[], transient=[], permanent=[], now=time.time(), stale=read[:1])
    ltm.ledger.forget_stale(read)
    assert [r.row_key for r in ltm.ledger.stale_rows(100)] == [read[0].row_key]


def test_an_id_written_twice_by_a_crashed_projection_is_found_once_and_healed(
    ltm: LtmRuntime, tenant: str
) -> None:
    """A projection inserts (no upsert lookup); a crash between that insert and the
    ledger settle re-inserts on redelivery, so one row key is held twice for a while.  What
    the insert strategy relies on, pinned here: Milvus's searches reduce results by primary
    key, and deleting the key (the purge after the next update) removes every copy."""
    ids = ltm_env.seed_corpus(ltm, tenant)
    mid = ids["case.ora00942"]
    cards, rows = ltm.ledger.work([mid])
    card = cards[mid]
    key = row_key(mid, next(r.indexed_version for r in rows if r.index_name == "vector") or 0)
    ltm.lexical.insert([card], keys=[key])
    ltm.vector.insert([card], ltm.embedder.embed_documents([card.embedding_text(2000)]),
                      keys=[key])  # fmt: skip
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) + 1
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    for mode in SearchMode:
        found = top(ltm, "ORA-00942 reporting job", flt, mode)
        assert found.count(mid) == 1, (mode, found)
    lexical = ltm.lexical.search("ora-00942", flt, 20)
    vector = ltm.vector.search(ltm.embedder.embed_query("ORA-00942"), flt, 20)
    for hits in (lexical, vector):
        assert [h.memory_id for h in hits].count(mid) == 1
    again = ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942 on the reporting job", "v2")
    ltm.ledger.write(again)
    ltm.projector.project([mid])  # a new version: inserted; both copies of the old are stale
    ltm.projector.purge_stale()
    assert ltm.vector.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS)


class _Context:
    """An ``IndexContext`` of fixed texts; raises ``OSError`` when told to (a disk fault)."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self.fail = False
        self.unread: set[str] = set()  # canonical keys whose source "cannot be read"
        self.asked: list[str] = []

    def __call__(self, cards: Sequence[LtmCard]) -> ContextRead:
        self.asked += [c.memory_id for c in cards]
        if self.fail:
            raise OSError("L0 volume not mounted")
        return ContextRead(
            {c.memory_id: self.texts[c.canonical_key] for c in cards
             if c.canonical_key in self.texts and c.canonical_key not in self.unread},
            {c.memory_id: "L0: disk error" for c in cards if c.canonical_key in self.unread},
        )  # fmt: skip


def test_index_context_is_searched_but_never_stored_on_the_card(
    ltm: LtmRuntime, tenant: str
) -> None:
    # Given an episode whose neighbour (only in L0) holds the words a question uses
    context = _Context({"ep.group": "Melanie: How was your weekend in Stockholm?"})
    ltm.projector.context = context
    draft = ltm_env.card_draft(tenant, "ep.group", "I went to a support group",
                               "Caroline: I went to a support group.")  # fmt: skip
    mid = ltm.ledger.write(draft).memory_id
    # When it is projected
    assert ltm.projector.project([mid]).indexed == 2 and context.asked == [mid]
    # Then the neighbour's words find it in both indexes; the card itself holds none
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    assert top(ltm, "Stockholm weekend", flt, SearchMode.LEXICAL) == [mid]
    assert mid in top(ltm, "Stockholm weekend", flt, SearchMode.VECTOR)
    card = ltm.ledger.cards([mid])[mid]
    assert "stockholm" not in card.bm25_text and card.content == ""
    assert "Stockholm" not in " ".join(h.summary for h in ltm.lexical.get([mid]))


def test_a_card_whose_context_cannot_be_read_waits_instead_of_being_indexed_without(
    ltm: LtmRuntime, tenant: str
) -> None:
    context = _Context({"ep.hike": "Melanie: Did you go to Abisko?"})
    ltm.projector.context = context
    mid = ltm.ledger.write(
        ltm_env.card_draft(tenant, "ep.hike", "hiking", "Caroline: I went hiking.")
    ).memory_id
    context.fail = True
    report = ltm.projector.project([mid])
    assert report.transient == [mid, mid] and report.indexed == 0  # both indexes wait
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    assert top(ltm, "hiking", flt, SearchMode.LEXICAL) == []
    # the reconciler re-drives it once L0 is back, with its context
    context.fail = False
    plan = plan_reconcile(ltm.ledger, now=time.time() + 1, grace_s=0, max_attempts=5, limit=10)
    assert mid in plan.memory_ids
    assert reconcile(ltm.projector, plan).indexed == 2
    assert top(ltm, "Abisko", flt, SearchMode.LEXICAL) == [mid]


def test_only_the_cards_whose_context_is_unread_wait(ltm: LtmRuntime, tenant: str) -> None:
    context = _Context({"ep.a": "Melanie: Was it in Oslo?", "ep.b": "Jon: Was it in Bergen?"})
    context.unread = {"ep.b"}
    ltm.projector.context = context
    a = ltm.ledger.write(ltm_env.card_draft(tenant, "ep.a", "trip", "Caroline: I flew.")).memory_id
    b = ltm.ledger.write(ltm_env.card_draft(tenant, "ep.b", "trip", "Gina: I drove.")).memory_id
    report = ltm.projector.project([a, b])
    assert report.indexed == 2 and report.transient == [b, b]
    flt = CardFilter(tenant_id=tenant, user_id="u_42")
    assert top(ltm, "Oslo", flt, SearchMode.LEXICAL) == [a]
    assert top(ltm, "drove", flt, SearchMode.LEXICAL) == []
