"""Long LTM jobs: ``ltm reindex`` builds a new generation of both indexes and swaps it in,
with progress, while search keeps answering from the old one (a write from another
process during the copy reaches the new one; a run that dies leaves the old one serving
and a rerun finishes); the dropping variant needs ``--yes`` and, refused, changes
nothing; a progress bar is drawn on a terminal only."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import delete

from memstrata.core.errors import Conflict
from memstrata.core.ltm import admin
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.reindex import rebuild_and_swap
from memstrata.core.ltm.rows import row_key
from memstrata.core.ltm.runtime import LtmRuntime
from memstrata.core.ltm.search import SearchMode
from memstrata.core.ltm.tables import cards
from memstrata.core.settings import load_settings
from tests.integration import ltm_env
from tests.integration.conftest import REPO_ROOT, process_env
from tests.integration.terminal import run_on_pty

pytestmark = pytest.mark.integration
milvus_server = ltm_env.milvus_server
ltm_pg_url = ltm_env.ltm_pg_url
embedder = ltm_env.embedder
ltm = ltm_env.ltm
tenant = ltm_env.tenant
QUERY = "ORA-00942 reporting job"


def test_a_reindex_builds_beside_and_swaps_while_search_keeps_answering(
    ltm: LtmRuntime, tenant: str, ltm_pg_url: str
) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    want = ids["case.ora00942"]
    old = (ltm.lexical.collection, ltm.vector.collection)
    flt = CardFilter(tenant_id=tenant)
    seen: list[bool] = []
    ticks: list[tuple[int, int]] = []
    done = threading.Event()
    # another process's runtime (a worker): it writes a card while the copy runs
    worker = ltm_env.runtime_for(ltm.settings, ltm_pg_url, ltm.embedder).start()
    late: list[str] = []

    def search_all_along() -> None:
        while not done.is_set():
            hits = ltm.search.search(QUERY, flt, mode=SearchMode.LEXICAL)
            seen.append(bool(hits) and hits[0].memory_id == want)

    def mid_copy(d: int, t: int) -> None:
        ticks.append((d, t))
        if not late:
            summary = "Consumer lag grew when the partition count doubled."
            draft = ltm_env.card_draft(tenant, "case.late", "Kafka consumer lag", summary)
            late.append(worker.ledger.write(draft).memory_id)
            assert worker.projector.project(late).indexed == 2

    searcher = threading.Thread(target=search_all_along)
    searcher.start()
    try:
        out = admin.reindex(ltm, on_progress=mid_copy)
    finally:
        done.set()
        searcher.join(30)
        worker.close()
        worker.engine.dispose()
    assert out["swapped"] == 1 and out["failed"] == 0 and out["transient"] == 0
    # every search during the rebuild found the card: the serving generation is untouched
    assert len(seen) >= 3 and all(seen), seen
    assert ticks and ticks[-1][0] == ticks[-1][1] >= len(ltm_env.CORPUS)
    new = (ltm.lexical.collection, ltm.vector.collection)
    assert new == (old[0] + "_g1", old[1] + "_g1") and sorted(out["dropped"]) == sorted(old)
    assert not any(ltm.milvus.client.has_collection(name) for name in old)
    # after the swap: every card, and the one written mid-copy by the other process
    assert ltm.vector.count() == len(ltm_env.CORPUS) + 1
    hits = ltm.search.search(QUERY, flt, mode=SearchMode.HYBRID)
    assert hits and hits[0].memory_id == want
    late_hits = ltm.search.search("Kafka consumer lag partition", flt, mode=SearchMode.LEXICAL)
    assert late_hits and late_hits[0].memory_id == late[0]


def test_a_reindex_that_dies_midway_leaves_the_old_serving_and_a_rerun_finishes(
    ltm: LtmRuntime, tenant: str
) -> None:
    ids = ltm_env.seed_corpus(ltm, tenant)
    flt = CardFilter(tenant_id=tenant)
    old = ltm.vector.collection

    def die(d: int, t: int) -> None:
        raise KeyboardInterrupt  # the operator's Ctrl-C, or a killed process, mid-copy

    # written to the ledger, not yet projected: only the serving generation counts
    pending = ltm.ledger.write(ltm_env.card_draft(tenant, "case.pending", "t", "s")).memory_id
    with pytest.raises(KeyboardInterrupt):
        admin.reindex(ltm, on_progress=die)
    assert ltm.vector.collection == old
    # the half-built generation is gone and no process is told to write to it any more
    assert not ltm.milvus.client.has_collection(old + "_g1")
    assert ltm.vector.names.current(force=True).secondary is None
    assert ltm.lexical.names.current(force=True).secondary is None
    # the copy wrote the pending card into the dropped generation only: still pending
    assert {p.state.value for p in ltm.ledger.projections([pending])} == {"pending"}
    hits = ltm.search.search(QUERY, flt, mode=SearchMode.HYBRID)
    assert hits and hits[0].memory_id == ids["case.ora00942"]
    ltm.ledger.delete(pending)
    out = admin.reindex(ltm)
    assert out["swapped"] == 1 and ltm.vector.collection == old + "_g1"
    assert not ltm.milvus.client.has_collection(old)
    assert ltm.vector.count() == len(ltm_env.CORPUS)
    hits = ltm.search.search(QUERY, flt, mode=SearchMode.HYBRID)
    assert hits and hits[0].memory_id == ids["case.ora00942"]
    # and again: generation 2 replaces generation 1
    assert admin.reindex(ltm)["serving"]["vector"] == old + "_g2"
    assert admin.status(ltm)["serving"]["vector"] == old + "_g2"


def _cli_env(ltm: LtmRuntime, pg_url: str) -> dict[str, str]:
    settings = load_settings(postgres_url=pg_url, ltm=ltm.settings)
    return process_env(settings)


def test_reindex_drop_without_yes_is_refused_and_changes_nothing(
    ltm: LtmRuntime, tenant: str, ltm_pg_url: str
) -> None:
    ltm_env.seed_corpus(ltm, tenant)
    out = subprocess.run(
        [sys.executable, "-m", "memstrata.ops.cli", "ltm", "reindex", "--drop"], cwd=REPO_ROOT,
        env=_cli_env(ltm, ltm_pg_url), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 1 and "pass --yes" in out.stderr and "Traceback" not in out.stderr
    assert ltm.vector.count() == len(ltm_env.CORPUS)


def test_progress_shows_on_a_terminal_and_not_in_json(
    ltm: LtmRuntime, tenant: str, ltm_pg_url: str
) -> None:
    ltm_env.seed_corpus(ltm, tenant)
    env = _cli_env(ltm, ltm_pg_url)
    argv = [sys.executable, "-m", "memstrata.ops.cli", "ltm", "reindex"]
    # a terminal on stderr: the bar (count, rate) is drawn there
    returncode, _out, text = run_on_pty(argv, env)
    assert returncode == 0
    assert "reindex" in text and "card" in text and f"{len(ltm_env.CORPUS)}/" in text
    # --json (or no terminal): nothing but the JSON line
    quiet = subprocess.run([*argv, "--json"], cwd=REPO_ROOT, env=env, capture_output=True,
                           text=True, timeout=180)  # fmt: skip
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout.count("\n") == 1 and '"indexed"' in quiet.stdout


def test_a_second_reindex_at_the_same_time_is_refused(ltm: LtmRuntime) -> None:
    names = ltm.lexical.names
    with names.store.exclusive(names.base), pytest.raises(Conflict, match="another reindex"):
        admin.reindex(ltm)
    assert ltm.lexical.collection == names.base  # nothing was started


def test_a_dropping_reindex_is_refused_while_another_reindex_runs(
    ltm: LtmRuntime, tenant: str
) -> None:
    ltm_env.seed_corpus(ltm, tenant)
    names = ltm.vector.names
    with names.store.exclusive(names.base), pytest.raises(Conflict, match="another reindex"):
        admin.reindex(ltm, drop=True)
    assert ltm.vector.count() == len(ltm_env.CORPUS)  # nothing was dropped


def test_changes_made_while_the_copy_runs_win_over_the_copy_after_the_swap(
    ltm: LtmRuntime, tenant: str, ltm_pg_url: str
) -> None:
    # Given a corpus, and another owner of the tenant who will be erased
    ids = ltm_env.seed_corpus(ltm, tenant)
    zebra = "The zebra crossing by the quarry gate."
    draft = ltm_env.card_draft(tenant, "pref.zebra", "Zebra crossing", zebra, user_id="u_erased")
    erased = ltm.ledger.write(draft).memory_id
    assert ltm.projector.project([erased]).indexed == 2
    updated, forgotten = ids["case.ora00942"], ids["pref.mango"]
    worker = ltm_env.runtime_for(ltm.settings, ltm_pg_url, ltm.embedder).start()
    raced: list[bool] = []

    def mid_copy(d: int, t: int) -> None:
        # When another process updates one card, forgets one and erases an owner while
        # the copy is under way, and the copy's slower writes of what it read before
        # land in the new generation after them
        if raced:
            return
        raced.append(True)
        before = list(worker.ledger.cards([updated, forgotten, erased]).values())
        fixed = "The nightly_report view was recreated."
        worker.ledger.write(ltm_env.card_draft(tenant, "case.ora00942", "ORA-00942 fixed", fixed))
        worker.ledger.delete(forgotten)
        assert not worker.projector.project([updated, forgotten]).retry
        worker.projector.purge_stale()  # the reconciler runs before the copy's late write
        with worker.engine.begin() as conn:  # core/erase.py: the ledger rows, then indexes
            conn.execute(delete(cards).where(cards.c.user_id == "u_erased"))
        worker.lexical.delete_owner(tenant, "u_erased")
        worker.vector.delete_owner(tenant, "u_erased")
        building = (worker.lexical.names.current(force=True).secondary,
                    worker.vector.names.current(force=True).secondary)  # fmt: skip
        assert building[0] and building[1]
        texts = [c.embedding_text(ltm.settings.max_embed_chars) for c in before]
        keys = [row_key(c.memory_id, c.version) for c in before]  # what the copy writes
        worker.lexical.at(building[0]).upsert(before, keys=keys)
        worker.vector.at(building[1]).upsert(before, ltm.embedder.embed_documents(texts),
                                             keys=keys)  # fmt: skip

    try:
        out = admin.reindex(ltm, on_progress=mid_copy)
    finally:
        worker.close()
        worker.engine.dispose()
    # Then the new generation serves the new version, not the forgotten or erased cards
    assert raced and out["swapped"] == 1, out
    flt = CardFilter(tenant_id=tenant)
    hits = ltm.search.search("nightly_report view recreated", flt, mode=SearchMode.LEXICAL)
    assert hits and hits[0].memory_id == updated
    found = {h.memory_id for h in ltm.search.search("mango ice cream zebra quarry", flt,
                                                     mode=SearchMode.HYBRID)}  # fmt: skip
    assert forgotten not in found and erased not in found
    # the copy's late row of the updated card's old version landed after the purge of
    # the rows the update replaced: the catch-up removed it from the generation it built
    assert ltm.vector.count() == len(ltm_env.CORPUS) - 1
    assert ltm.lexical.count_owner(tenant, "u_42") == len(ltm_env.CORPUS) - 1
    assert ltm.lexical.count_owner(tenant, "u_erased") == 0
    assert ltm.vector.count_owner(tenant, "u_erased") == 0


def test_the_replaced_generation_is_dropped_only_after_every_process_left_it(
    ltm: LtmRuntime, tenant: str
) -> None:
    ltm_env.seed_corpus(ltm, tenant)
    old = ltm.lexical.collection
    seen: list[tuple[str | None, bool]] = []

    def sleep(seconds: float) -> None:  # what each wait of the run saw
        pointer = ltm.lexical.names.store.read(ltm.lexical.names.base)
        seen.append((pointer.phase, ltm.milvus.client.has_collection(old)))
        time.sleep(seconds)

    swap = rebuild_and_swap(
        ledger=ltm.ledger,
        lexical=ltm.lexical,
        vector=ltm.vector,
        embedder=ltm.embedder,
        max_embed_chars=ltm.settings.max_embed_chars,
        settle_s=2 * ltm.settings.generation_refresh_s,
        sleep=sleep,
    )
    assert swap.swapped and old in swap.dropped
    # a process that cached ``retiring`` still writes to the old one for up to refresh_s
    # (Elasticsearch re-creates a deleted index on such a write): one wait with the
    # final pointer written, before the drop
    assert seen == [("building", True), ("retiring", True), (None, True)]
    assert not ltm.milvus.client.has_collection(old)
