"""milvus-lite's BM25 over an empty collection: no failed search, no ERROR log per recall.

milvus-lite 2.5.1 computes BM25 with an average document length of 0 on an empty
collection and fails the search ("Invalid sparse row: NaN or Inf value"); pymilvus logs
an ERROR for each.  A fresh deployment's raw-history and card collections start empty, so
every recall logged two errors.  The adapter now asks the collection's size first while
it has not seen a row (at most once per ``EMPTY_RECHECK_S``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.lexical_milvus import EMPTY_RECHECK_S, MilvusLexicalIndex
from memstrata.core.ltm.milvus import MilvusConnection
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.ltm.text import normalise
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
OWNER = CardFilter(tenant_id="t_1", user_id="u_42")


@pytest.fixture
def pair(milvus_server: MilvusServer) -> Iterator[tuple[MilvusLexicalIndex, MilvusLexicalIndex]]:
    """Two adapters of one empty collection, as a recall process and a worker hold them."""
    name = f"empty_{uuid.uuid4().hex[:10]}"
    conns = [MilvusConnection(milvus_server.uri, timeout_s=5.0) for _ in range(2)]
    reader, writer = (MilvusLexicalIndex(c, collection=name) for c in conns)
    writer.ensure_schema()
    yield reader, writer
    writer.drop()
    for c in conns:
        c.close()


def _card(key: str) -> LtmCard:
    draft = ltm_env.card_draft("t_1", key, "deploy rollback", "the deploy failed on the canary")
    return LtmCard.from_draft(draft, now=time.time())


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def pymilvus_errors() -> Iterator[list[logging.LogRecord]]:
    """ERROR records of pymilvus's loggers (they do not propagate to pytest's caplog)."""
    handler = _Records()
    loggers = [logging.getLogger(n) for n in ("pymilvus", "pymilvus.milvus_client")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


def test_empty_collection_answers_empty_without_a_failed_search(
    pair: tuple[MilvusLexicalIndex, MilvusLexicalIndex],
    pymilvus_errors: list[logging.LogRecord],
) -> None:
    reader, writer = pair
    for _ in range(3):
        assert reader.search(normalise("deploy failed"), OWNER, 5) == []
    assert not pymilvus_errors, [r.getMessage()[:200] for r in pymilvus_errors]

    card = _card("case.empty1")
    writer.insert([card])  # another process projects a card
    assert [h.memory_id for h in writer.search(normalise("deploy failed"), OWNER, 5)] == [
        card.memory_id
    ]  # the writer saw its own insert: no size check, found at once
    time.sleep(EMPTY_RECHECK_S + 0.1)  # the reader asks the size again after the window
    assert [h.memory_id for h in reader.search(normalise("deploy failed"), OWNER, 5)] == [
        card.memory_id
    ]

    writer.delete([card.memory_id])  # emptied again: still an empty answer, never an error
    assert reader.search(normalise("deploy failed"), OWNER, 5) == []
