"""Vector index on Milvus (pymilvus 2.5.x ``MilvusClient``), one collection per deployment.

Schema (seed 七.3): ``id`` (primary key = memory_id), ``vector`` (FLOAT_VECTOR, dim of
the embedder), ``tenant_id``, ``user_id``, ``project_id`` ("" for none), ``memory_type``,
``status``, ``importance``, ``updated_at``.  The index is FLAT: exact, and the only
vector index milvus-lite 2.5.1 serves without losing filtered results (MEASURED.md); a
real Milvus may use HNSW through ``index_type``.  Its metric is the inner product (IP)
of unit vectors, which ranks and scores as cosine does: every embedder's rows are
normalised (``core.ltm.embedding``) and the index normalises again what it writes and
asks, so no provider can make the two differ.  milvus-lite's FLAT scan costs less CPU
with IP than with COSINE (docs/PERFORMANCE.md, 2026-12-07 third sitting).  A collection
made with COSINE before keeps it (read from its index) until it is rebuilt.  Nothing
touches the server in the constructor: :meth:`MilvusVectorIndex.ensure_schema` creates
or checks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from memstrata.core.errors import InvalidInput
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.embedding import Vectors, unit_rows
from memstrata.core.ltm.errors import EmbeddingDimensionMismatch
from memstrata.core.ltm.filters import CardFilter, milvus_expr
from memstrata.core.ltm.milvus import (
    MilvusConnection,
    RowPresence,
    count_owner,
    count_rows,
    delete_owner,
    milvus_errors,
    rpc_timeout,
)
from memstrata.core.ltm.ports import Hit
from memstrata.core.ltm.rows import card_of, keys_for, validate_row_keys

_OUT = ["importance", "updated_at"]
_TEXT_OUT = ["title", "summary"]
METRIC = "IP"
"""The metric of a new collection's index: inner product of unit vectors (= cosine)."""
METRICS = frozenset({"IP", "COSINE"})
"""Metrics a collection may hold: both rank unit vectors alike."""
MAX_VARCHAR_BYTES = 65_535
"""Milvus's limit of one VARCHAR value, in bytes."""

log = logging.getLogger(__name__)


def clip_bytes(text: str, limit: int = MAX_VARCHAR_BYTES) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8 (never inside a character)."""
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", errors="ignore")


def text_fields(card: LtmCard) -> dict[str, str]:
    """The text columns a collection stores to return a card's body with its hit:
    ``title`` (1,024 characters at most) and ``summary`` (2,000)."""
    return {"title": clip_bytes(card.title)[:1024], "summary": clip_bytes(card.summary)[:2000]}


def add_text_fields(schema: Any) -> None:
    """The columns of :func:`text_fields` (VARCHAR lengths are bytes: 4 per character)."""
    from pymilvus import DataType

    schema.add_field("title", DataType.VARCHAR, max_length=4096)
    schema.add_field("summary", DataType.VARCHAR, max_length=8192)


def add_scalar_fields(schema: Any) -> None:
    """Filter and rerank fields shared by the vector and the lexical collections."""
    from pymilvus import DataType

    schema.add_field("tenant_id", DataType.VARCHAR, max_length=128)
    schema.add_field("user_id", DataType.VARCHAR, max_length=128)
    schema.add_field("project_id", DataType.VARCHAR, max_length=128)
    schema.add_field("memory_type", DataType.VARCHAR, max_length=64)
    schema.add_field("status", DataType.VARCHAR, max_length=16)
    schema.add_field("importance", DataType.FLOAT)
    schema.add_field("updated_at", DataType.DOUBLE)


def hits_of(result: Any) -> list[Hit]:
    out = []
    for row in result[0] if result else []:
        entity = row.get("entity", {})
        out.append(
            Hit(
                memory_id=card_of(str(row["id"])),
                score=float(row["distance"]),
                importance=float(entity.get("importance", 0.0)),
                updated_at=float(entity.get("updated_at", 0.0)),
                title=str(entity.get("title", "")),
                summary=str(entity.get("summary", "")),
            )
        )
    return out


def _dim_of(fields: dict[str, dict[str, Any]], collection: str) -> int:
    field = fields.get("vector")
    if field is None:
        raise EmbeddingDimensionMismatch(f"collection {collection} has no vector field")
    return int(field.get("params", {}).get("dim", 0))


class MilvusVectorIndex:
    """Card vectors in Milvus; ``timeout_s`` bounds every call (seconds).

    With ``with_text`` the collection also stores each record's title and summary
    (:func:`text_fields`) and a hit returns them: the raw-history index asks for it, so
    a message found by its vector alone needs no second read of the lexical collection.
    A collection made before without them keeps working: :meth:`ensure_schema` finds
    the fields missing and the index neither writes nor asks for them (a hit then
    carries no text, as before) until the collection is rebuilt.
    """

    name = "vector"

    def __init__(
        self,
        conn: MilvusConnection,
        *,
        collection: str,
        dim: int,
        index_type: str = "FLAT",
        timeout_s: float = 5.0,
        with_text: bool = False,
    ) -> None:
        if dim < 1:
            raise InvalidInput("vector dim must be positive")
        self.conn = conn
        self.collection = collection
        self.dim = dim
        self.index_type = index_type
        self.timeout_s = timeout_s
        self._rpc_timeout = rpc_timeout(timeout_s)
        self.with_text = with_text
        self.stores_text = with_text  # what the collection holds: ensure_schema knows
        # the index's metric: set by ensure_schema, else read before the first search (an
        # adapter a routed index makes lazily for a generation someone else created)
        self.metric: str | None = None
        self._presence = RowPresence(conn, collection, "vectors", timeout=self._rpc_timeout)

    def ensure_schema(self) -> None:
        """Create the collection and its index if missing; check the dimension (and
        whether it stores text) if present."""
        with milvus_errors("ensure vector schema", self.conn):
            if self.conn.client.has_collection(self.collection, timeout=self._rpc_timeout):
                fields = self._fields()  # one describe for both checks
                self._check_dim(_dim_of(fields, self.collection))
                self._check_text(fields)
                self.metric = self._index_metric()
                self.conn.client.load_collection(self.collection, timeout=self._rpc_timeout)
                return
            from pymilvus import DataType

            schema = self.conn.client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
            schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
            add_scalar_fields(schema)
            if self.with_text:
                add_text_fields(schema)
            self.stores_text = self.with_text
            index = self.conn.client.prepare_index_params()
            index.add_index(field_name="vector", index_type=self.index_type, metric_type=METRIC)
            self.conn.client.create_collection(
                self.collection, schema=schema, index_params=index, timeout=self._rpc_timeout
            )
            self.metric = METRIC

    def _search_metric(self) -> str:
        if self.metric is None:
            with milvus_errors("describe vector index", self.conn):
                self.metric = self._index_metric()
        return self.metric

    def _index_metric(self) -> str:
        """The metric of the collection's vector index (COSINE in collections made before
        IP was the default); :data:`METRIC` when it has none yet."""
        client, timeout = self.conn.client, self._rpc_timeout
        for name in client.list_indexes(self.collection, field_name="vector", timeout=timeout):
            described = client.describe_index(self.collection, name, timeout=timeout)
            found = str(described.get("metric_type", "")).upper()
            if found not in METRICS:
                raise InvalidInput(
                    f"Milvus collection {self.collection!r}: its vector index's metric is "
                    f"{found or 'unknown'}; memstrata searches unit vectors by IP or COSINE "
                    "(rebuild it: `memstrata ltm reindex`; raw history: `ltm reindex-history "
                    "--drop --yes`)"
                )
            return found
        return METRIC

    def _fields(self) -> dict[str, dict[str, Any]]:
        with milvus_errors("describe vector collection", self.conn):
            info = self.conn.client.describe_collection(self.collection, timeout=self._rpc_timeout)
        return {str(f.get("name")): f for f in info.get("fields", [])}

    def collection_dim(self) -> int:
        return _dim_of(self._fields(), self.collection)

    def _check_text(self, fields: dict[str, dict[str, Any]]) -> None:
        held = set(_TEXT_OUT) <= set(fields)
        if self.with_text and not held:
            log.warning(
                "Milvus collection %r stores no text (made by an earlier version): a hit "
                "found by its vector alone is read again from the lexical index until the "
                "collection is rebuilt (`memstrata ltm reindex-history --drop --yes`)",
                self.collection,
            )
        self.stores_text = held

    def _check_dim(self, found: int) -> None:
        if found != self.dim:
            raise EmbeddingDimensionMismatch(
                f"Milvus collection {self.collection!r} holds {found}-d vectors but the "
                f"embedder makes {self.dim}-d ones: rebuild the collection or switch model"
            )

    def upsert(
        self, cards: Sequence[LtmCard], vectors: Vectors, *, keys: Sequence[str] | None = None
    ) -> None:
        rows = self._rows(cards, vectors, keys)
        if rows:
            with milvus_errors("upsert vectors", self.conn):
                self.conn.client.upsert(self.collection, rows, timeout=self._rpc_timeout)
            self._presence.filled()

    def insert(
        self, cards: Sequence[LtmCard], vectors: Vectors, *, keys: Sequence[str] | None = None
    ) -> None:
        """Rows the collection has never held: no lookup of the id (ports.py)."""
        rows = self._rows(cards, vectors, keys)
        if rows:
            with milvus_errors("insert vectors", self.conn):
                self.conn.client.insert(self.collection, rows, timeout=self._rpc_timeout)
            self._presence.filled()

    def _rows(
        self, cards: Sequence[LtmCard], vectors: Vectors, keys: Sequence[str] | None
    ) -> list[dict[str, Any]]:
        """One row per card, under ``keys`` when given (``core.ltm.rows``)."""
        if len(cards) != len(vectors):
            raise InvalidInput("one vector per card")
        ids = keys_for(cards, keys)
        if not cards:
            return []
        if vectors.shape[1] != self.dim:
            raise EmbeddingDimensionMismatch(
                f"vectors of {vectors.shape[1]}-d, index is {self.dim}-d"
            )
        rows = [
            {**card.vector_record(vec.tolist()), "id": key}
            for card, vec, key in zip(cards, unit_rows(vectors), ids, strict=True)
        ]
        if self.stores_text:
            for row, card in zip(rows, cards, strict=True):
                row.update(text_fields(card))
        return rows

    def delete(self, memory_ids: Sequence[str]) -> None:
        ids = validate_row_keys(memory_ids)
        if ids:
            with milvus_errors("delete vectors", self.conn):
                self.conn.client.delete(self.collection, ids=ids, timeout=self._rpc_timeout)

    def search(self, vector: Vectors, flt: CardFilter, limit: int) -> list[Hit]:
        if not self._presence.holds_rows():  # core.ltm.milvus.RowPresence
            return []
        metric = self._search_metric()
        with milvus_errors("vector search", self.conn):
            result = self.conn.client.search(
                self.collection,
                data=[unit_rows(vector.reshape(1, -1))[0].tolist()],
                anns_field="vector",
                filter=milvus_expr(flt),
                limit=limit,
                output_fields=_OUT + _TEXT_OUT if self.stores_text else _OUT,
                search_params={"metric_type": metric},
                timeout=self._rpc_timeout,
            )
        return hits_of(result)

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        return count_owner(self.conn, self.collection, tenant_id, user_id, "vectors")

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        delete_owner(self.conn, self.collection, tenant_id, user_id, "vectors")

    def count(self) -> int:
        return count_rows(self.conn, self.collection, "vectors", timeout=self._rpc_timeout)

    def drop(self) -> None:
        with milvus_errors("drop vector collection", self.conn):
            self.conn.client.drop_collection(self.collection, timeout=self._rpc_timeout)
