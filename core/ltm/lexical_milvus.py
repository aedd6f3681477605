"""Lexical index on Milvus's built-in BM25 full-text function, in its own collection.

The card's ``bm25_text`` is already normalised by :mod:`core.ltm.text`, so the analyzer
is a plain whitespace tokenizer: Milvus sees exactly the tokens Elasticsearch sees, and
the Chinese segmentation is jieba's in both.  Title, summary and content are stored for
returning card text (seed 七.2: the lexical index returns the body).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstrata.core.errors import MemstrataError
from memstrata.core.ids import validate_id
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.filters import CardFilter, milvus_expr
from memstrata.core.ltm.milvus import (
    MilvusConnection,
    RowPresence,
    count_owner,
    delete_owner,
    milvus_errors,
    rpc_timeout,
)
from memstrata.core.ltm.ports import Hit
from memstrata.core.ltm.rows import card_of, keys_for, validate_row_keys
from memstrata.core.ltm.vector import (
    MAX_VARCHAR_BYTES,
    add_scalar_fields,
    clip_bytes,
    hits_of,
    text_fields,
)

_OUT = ["importance", "updated_at", "title", "summary"]


def _rows(cards: Sequence[LtmCard], keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The collection's rows of ``cards`` (text fields clipped to the VARCHAR limits),
    under ``keys`` when given (``core.ltm.rows``), else their memory_ids."""
    return [
        {
            "id": key,
            "bm25_text": clip_bytes(card.bm25_text),
            **text_fields(card),
            "content": clip_bytes(card.content),
            "tenant_id": card.tenant_id,
            "user_id": card.user_id,
            "project_id": card.project_id or "",
            "memory_type": card.memory_type,
            "status": card.status.value,
            "importance": card.importance,
            "updated_at": card.updated_at,
        }
        for card, key in zip(cards, keys_for(cards, keys), strict=True)
    ]


class MilvusLexicalIndex:
    """BM25 over ``bm25_text`` with scalar filters; ``timeout_s`` bounds every call."""

    name = "lexical"

    def __init__(self, conn: MilvusConnection, *, collection: str, timeout_s: float = 5.0) -> None:
        self.conn = conn
        self.collection = collection
        self.timeout_s = timeout_s
        self._rpc_timeout = rpc_timeout(timeout_s)
        # milvus-lite 2.5.1 computes BM25 over an empty corpus as NaN and fails the search
        # (logging an ERROR each time): until the collection is known to hold rows, its
        # size is asked first, at most once per EMPTY_RECHECK_S
        self._presence = RowPresence(conn, collection, "lexical", timeout=self._rpc_timeout)

    def ensure_schema(self) -> None:
        with milvus_errors("ensure lexical schema", self.conn):
            if self.conn.client.has_collection(self.collection, timeout=self._rpc_timeout):
                self.conn.client.load_collection(self.collection, timeout=self._rpc_timeout)
                return
            from pymilvus import DataType, Function, FunctionType

            schema = self.conn.client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
            schema.add_field(
                "bm25_text",
                DataType.VARCHAR,
                max_length=MAX_VARCHAR_BYTES,
                enable_analyzer=True,
                analyzer_params={"tokenizer": "whitespace"},
            )
            schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
            schema.add_field("title", DataType.VARCHAR, max_length=1024)
            schema.add_field("summary", DataType.VARCHAR, max_length=8192)
            schema.add_field("content", DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES)
            add_scalar_fields(schema)
            schema.add_function(
                Function(
                    name="bm25",
                    function_type=FunctionType.BM25,
                    input_field_names=["bm25_text"],
                    output_field_names=["sparse"],
                )
            )
            index = self.conn.client.prepare_index_params()
            index.add_index(
                field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
            )
            self.conn.client.create_collection(
                self.collection, schema=schema, index_params=index, timeout=self._rpc_timeout
            )

    def upsert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        if cards:
            rows = _rows(cards, keys)
            with milvus_errors("upsert lexical", self.conn):
                self.conn.client.upsert(self.collection, rows, timeout=self._rpc_timeout)
            self._presence.filled()

    def insert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        """Rows the collection has never held: no lookup of the id (ports.py)."""
        if cards:
            rows = _rows(cards, keys)
            with milvus_errors("insert lexical", self.conn):
                self.conn.client.insert(self.collection, rows, timeout=self._rpc_timeout)
            self._presence.filled()

    def delete(self, memory_ids: Sequence[str]) -> None:
        ids = validate_row_keys(memory_ids)
        if ids:
            with milvus_errors("delete lexical", self.conn):
                self.conn.client.delete(self.collection, ids=ids, timeout=self._rpc_timeout)

    def search(self, normalised_query: str, flt: CardFilter, limit: int) -> list[Hit]:
        if not normalised_query.strip() or not self._presence.holds_rows():
            return []
        try:
            with milvus_errors("lexical search", self.conn):
                result = self.conn.client.search(
                    self.collection,
                    data=[normalised_query],
                    anns_field="sparse",
                    filter=milvus_expr(flt),
                    limit=limit,
                    output_fields=_OUT,
                    search_params={"metric_type": "BM25"},
                    timeout=self._rpc_timeout,
                )
        except MemstrataError as exc:
            # milvus-lite 2.5.1 computes BM25 over an empty corpus as NaN and refuses the
            # query: an empty collection simply has no lexical hits
            if "NaN or Inf" in str(exc):  # emptied since (every row deleted)
                self._presence.emptied()
                return []
            raise
        return hits_of(result)

    def get(self, memory_ids: Sequence[str]) -> list[Hit]:
        ids = [validate_id(m, kind="memory_id") for m in memory_ids]
        if not ids:
            return []
        with milvus_errors("lexical get", self.conn):
            rows = self.conn.client.get(
                self.collection, ids=ids, output_fields=_OUT, timeout=self._rpc_timeout
            )
        return [
            Hit(
                memory_id=card_of(str(row["id"])),
                score=0.0,
                importance=float(row.get("importance", 0.0)),
                updated_at=float(row.get("updated_at", 0.0)),
                title=str(row.get("title", "")),
                summary=str(row.get("summary", "")),
            )
            for row in rows
        ]

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        return count_owner(self.conn, self.collection, tenant_id, user_id, "lexical")

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        delete_owner(self.conn, self.collection, tenant_id, user_id, "lexical")

    def refresh(self) -> None:
        """Milvus serves unflushed rows to search; nothing to do."""

    def drop(self) -> None:
        with milvus_errors("drop lexical collection", self.conn):
            self.conn.client.drop_collection(self.collection, timeout=self._rpc_timeout)
