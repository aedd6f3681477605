"""One contract for every lexical backend: Milvus BM25 always, Elasticsearch when
``MEMSTRATA_ES_URL`` points at an ES 9 server (it cannot be installed on this machine)."""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Iterator

import pytest

from memstrata.core.ltm.card import CardStatus, LtmCard
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.lexical_es import ElasticsearchLexicalIndex
from memstrata.core.ltm.lexical_es import connect as es_connect
from memstrata.core.ltm.lexical_milvus import MilvusLexicalIndex
from memstrata.core.ltm.milvus import MilvusConnection
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.ltm.ports import LexicalIndex
from memstrata.core.ltm.text import normalise
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
ES_URL = os.environ.get("MEMSTRATA_ES_URL")


@pytest.fixture(params=["milvus", "elasticsearch"])
def lexical(request: pytest.FixtureRequest) -> Iterator[LexicalIndex]:
    suffix = uuid.uuid4().hex[:10]
    index: LexicalIndex
    if request.param == "milvus":
        server: MilvusServer = request.getfixturevalue("milvus_server")
        client = MilvusConnection(server.uri, timeout_s=5.0)
        index = MilvusLexicalIndex(client, collection=f"contract_{suffix}")
    else:
        if not ES_URL:
            pytest.skip("MEMSTRATA_ES_URL not set (Elasticsearch cannot run on this machine)")
        client = es_connect(ES_URL)
        index = ElasticsearchLexicalIndex(client, index=f"memstrata-contract-{suffix}")
    index.ensure_schema()
    index.ensure_schema()  # idempotent
    yield index
    index.drop()
    client.close()


def card(key: str, title: str, summary: str, **over: object) -> LtmCard:
    values: dict[str, object] = {"tenant_id": "t_1", "user_id": "u_42", "project_id": "p_pay"}
    values.update(over)
    draft = ltm_env.card_draft(str(values.pop("tenant_id")), key, title, summary, **values)
    return LtmCard.from_draft(draft, now=time.time())


CARDS = [
    card(
        "a",
        "createOrder timeout",
        "历史上多次出现 createOrder timeout，数据库正常时常见根因是线程池饱和",
    ),
    card("b", "ORA-00942 in reports", "The reporting job failed with ORA-00942 after a migration."),
    card("c", "payment-service rollback", "payment-service deploy rolled back on port 8443."),
    card("d", "mango", "The user loves mango ice cream.", user_id="u_7"),
    card("e", "createOrder in blog", "createOrder renamed", project_id="p_blog"),
    card("f", "other tenant createOrder", "createOrder timeout elsewhere", tenant_id="t_2"),
    card("g", "createOrder decision", "createOrder retries", memory_type="decision"),
]
FLT = CardFilter(tenant_id="t_1", user_id="u_42", project_id="p_pay")


def ids(index: LexicalIndex, query: str, flt: CardFilter = FLT, limit: int = 10) -> list[str]:
    return [h.memory_id for h in index.search(normalise(query), flt, limit)]


@pytest.fixture
def loaded(lexical: LexicalIndex) -> LexicalIndex:
    lexical.upsert(CARDS)
    lexical.upsert(CARDS[:2])  # idempotent: no duplicates
    lexical.refresh()
    return lexical


def test_error_codes_and_identifiers_are_found_by_their_words(loaded: LexicalIndex) -> None:
    assert ids(loaded, "ORA-00942") == [CARDS[1].memory_id]
    assert ids(loaded, "payment-service")[0] == CARDS[2].memory_id
    # camel case is split on both sides, so the lower-case word finds createOrder
    assert set(ids(loaded, "createorder")) == {CARDS[0].memory_id, CARDS[6].memory_id}


def test_chinese_words_match_after_segmentation(loaded: LexicalIndex) -> None:
    assert ids(loaded, "线程池为什么饱和") == [CARDS[0].memory_id]


def test_filters_confine_results_to_tenant_user_project_type_and_status(
    loaded: LexicalIndex,
) -> None:
    found = set(ids(loaded, "createOrder", CardFilter(tenant_id="t_1")))
    assert found == {CARDS[0].memory_id, CARDS[4].memory_id, CARDS[6].memory_id}
    assert ids(loaded, "createOrder timeout")[0] == CARDS[0].memory_id
    typed = CardFilter(tenant_id="t_1", memory_types=("decision",))
    assert ids(loaded, "createOrder", typed) == [CARDS[6].memory_id]
    assert ids(loaded, "mango", CardFilter(tenant_id="t_1", user_id="u_42")) == []
    assert ids(loaded, "createOrder", CardFilter(tenant_id="t_2")) == [CARDS[5].memory_id]


def test_results_carry_card_text_and_rerank_fields(loaded: LexicalIndex) -> None:
    hit = loaded.search(normalise("ORA-00942"), FLT, 5)[0]
    assert hit.title == "ORA-00942 in reports" and "migration" in hit.summary
    assert hit.importance == pytest.approx(0.5) and hit.updated_at > 0 and hit.score > 0


def test_status_change_and_delete_remove_cards_from_results(loaded: LexicalIndex) -> None:
    gone = CARDS[1].model_copy(update={"status": CardStatus.DELETED})
    loaded.upsert([gone])
    loaded.refresh()
    assert ids(loaded, "ORA-00942") == []
    loaded.delete([CARDS[2].memory_id, "ltm_absent"])  # absent ids are fine
    loaded.refresh()
    assert ids(loaded, "payment-service") == []


def test_an_empty_query_returns_nothing(loaded: LexicalIndex) -> None:
    assert loaded.search(normalise("，。!"), FLT, 5) == []


def _reference_bm25(
    query: str, docs: dict[str, str], k1: float = 1.2, b: float = 0.75
) -> dict[str, float]:
    """Textbook BM25 (Lucene/Milvus idf) over whitespace tokens, for the exactness check."""
    tokenised = {m: text.split() for m, text in docs.items()}
    n = len(tokenised)
    avgdl = sum(len(t) for t in tokenised.values()) / n
    scores: dict[str, float] = {}
    for term in set(query.split()):
        df = sum(term in t for t in tokenised.values())
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for m, toks in tokenised.items():
            tf = toks.count(term)
            if tf:
                norm = tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avgdl))
                scores[m] = scores.get(m, 0.0) + idf * norm
    return scores


@pytest.mark.parametrize(
    "query", ["createOrder timeout", "线程池 饱和 数据库", "payment-service 8443"]
)
def test_milvus_bm25_matches_a_reference_bm25(loaded: LexicalIndex, query: str) -> None:
    if not isinstance(loaded, MilvusLexicalIndex):
        pytest.skip("Elasticsearch scores title and summary fields too")
    everyone = CardFilter(tenant_id="t_1", statuses=(CardStatus.ACTIVE,))
    got = {h.memory_id: h.score for h in loaded.search(normalise(query), everyone, 10)}
    docs = {c.memory_id: c.bm25_text for c in CARDS}
    expected = {
        m: s
        for m, s in _reference_bm25(normalise(query), docs).items()
        if next(c for c in CARDS if c.memory_id == m).tenant_id == "t_1"
    }
    assert set(got) == set(expected)
    for memory_id, score in expected.items():
        assert got[memory_id] == pytest.approx(score, rel=1e-3)
