"""An empty Milvus collection is not searched: no failed search, no ERROR log per recall,
no vector search queued behind the others for nothing.

milvus-lite 2.5.1 computes BM25 with an average document length of 0 on an empty
collection and fails the search ("Invalid sparse row: NaN or Inf value"); pymilvus logs
an ERROR for each.  A fresh deployment's raw-history and card collections start empty, so
every recall logged two errors.  Its vector search of an empty collection succeeds but
waits its turn behind the card search (milvus-lite serves searches about one at a time).
Both adapters ask the collection's size first while they have not seen a row (at most
once per ``EMPTY_RECHECK_S``, ``core.ltm.milvus.RowPresence``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from memstrata.core.ltm import milvus
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.filters import CardFilter
from memstrata.core.ltm.lexical_milvus import MilvusLexicalIndex
from memstrata.core.ltm.milvus import EMPTY_RECHECK_S, MilvusConnection
from memstrata.core.ltm.milvus_server import MilvusServer
from memstrata.core.ltm.text import normalise
from memstrata.core.ltm.vector import MilvusVectorIndex
from tests.integration import ltm_env

pytestmark = pytest.mark.integration

milvus_server = ltm_env.milvus_server
OWNER = CardFilter(tenant_id="t_1", user_id="u_42")
DIM = 8
QUERY_VECTOR = np.ones(DIM, dtype=np.float32)


@dataclass
class Side:
    """One adapter kind as a recall process (reader) and a worker (writer) hold it."""

    reader: MilvusLexicalIndex | MilvusVectorIndex
    writer: MilvusLexicalIndex | MilvusVectorIndex
    search: Callable[[MilvusLexicalIndex | MilvusVectorIndex], list[str]]
    insert: Callable[[LtmCard], None]


def _lexical(conns: list[MilvusConnection], name: str) -> Side:
    reader, writer = (MilvusLexicalIndex(c, collection=name) for c in conns)

    def search(index: MilvusLexicalIndex | MilvusVectorIndex) -> list[str]:
        assert isinstance(index, MilvusLexicalIndex)
        return [h.memory_id for h in index.search(normalise("deploy failed"), OWNER, 5)]

    return Side(reader, writer, search, lambda card: writer.insert([card]))


def _vector(conns: list[MilvusConnection], name: str) -> Side:
    reader, writer = (MilvusVectorIndex(c, collection=name, dim=DIM) for c in conns)

    def search(index: MilvusLexicalIndex | MilvusVectorIndex) -> list[str]:
        assert isinstance(index, MilvusVectorIndex)
        return [h.memory_id for h in index.search(QUERY_VECTOR, OWNER, 5)]

    return Side(reader, writer, search, lambda card: writer.insert([card], QUERY_VECTOR[None, :]))


@pytest.fixture(params=[_lexical, _vector], ids=["lexical", "vector"])
def side(request: pytest.FixtureRequest, milvus_server: MilvusServer) -> Iterator[Side]:
    """Both adapters of one empty collection, each on its own connection."""
    name = f"empty_{uuid.uuid4().hex[:10]}"
    conns = [MilvusConnection(milvus_server.uri, timeout_s=5.0) for _ in range(2)]
    made: Side = request.param(conns, name)
    made.writer.ensure_schema()
    yield made
    made.writer.drop()
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
    side: Side, pymilvus_errors: list[logging.LogRecord]
) -> None:
    for _ in range(3):
        assert side.search(side.reader) == []
    assert not pymilvus_errors, [r.getMessage()[:200] for r in pymilvus_errors]

    card = _card("case.empty1")
    side.insert(card)  # another process projects a card
    # the writer saw its own insert: no size check, found at once
    assert side.search(side.writer) == [card.memory_id]
    time.sleep(EMPTY_RECHECK_S + 0.1)  # the reader asks the size again after the window
    assert side.search(side.reader) == [card.memory_id]

    side.writer.delete([card.memory_id])  # emptied again: still an empty answer, never an error
    assert side.search(side.reader) == []
    assert not pymilvus_errors, [r.getMessage()[:200] for r in pymilvus_errors]


def test_a_collection_found_empty_is_not_searched_within_the_window(
    side: Side, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What proves the search is skipped: a row another process wrote after the reader
    found the collection empty stays unseen by the reader until the window ends."""
    monkeypatch.setattr(milvus, "EMPTY_RECHECK_S", 600.0)  # no host is that slow
    assert side.search(side.reader) == []  # counted: empty
    card = _card("case.empty2")
    side.insert(card)
    assert side.search(side.writer) == [card.memory_id]
    assert side.search(side.reader) == []  # not searched, not counted again
