"""Lexical index on Elasticsearch (production backend; elasticsearch-py of the server's
major version: 9.x for ES 9, 8.x for ES 8).

An index template fixes the mappings (no dynamic fields): ``bm25_text``,
``title_bm25`` and ``summary_bm25`` hold our normalised tokens under a whitespace
analyzer, so ES sees exactly the tokens Milvus sees (jieba segmentation included,
no ES plugin needed); ``title``/``summary``/``content`` are stored for returning card
text; filter fields are ``keyword``.  Writes use the bulk API; the query is BM25
``multi_match`` over the three token fields with ``bool.filter`` term clauses.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from memstrata.core.errors import missing_extra
from memstrata.core.ids import validate_id
from memstrata.core.ltm.card import LtmCard
from memstrata.core.ltm.errors import IndexRejected, IndexUnavailable
from memstrata.core.ltm.filters import CardFilter, es_filter, owner_filter
from memstrata.core.ltm.ports import Hit
from memstrata.core.ltm.rows import card_of, keys_for, validate_row_keys
from memstrata.core.ltm.text import normalise

_KEYWORDS = ("tenant_id", "user_id", "project_id", "memory_type", "status")

MAPPINGS: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "memory_id": {"type": "keyword"},
        **{name: {"type": "keyword"} for name in _KEYWORDS},
        "bm25_text": {"type": "text", "analyzer": "memstrata_tokens"},
        "title_bm25": {"type": "text", "analyzer": "memstrata_tokens"},
        "summary_bm25": {"type": "text", "analyzer": "memstrata_tokens"},
        "title": {"type": "text", "index": False},
        "summary": {"type": "text", "index": False},
        "content": {"type": "text", "index": False},
        "importance": {"type": "float"},
        "updated_at": {"type": "double"},
    },
}

SETTINGS: dict[str, Any] = {
    "number_of_shards": 1,
    "analysis": {"analyzer": {"memstrata_tokens": {"type": "custom", "tokenizer": "whitespace"}}},
}


@contextmanager
def es_errors(what: str) -> Iterator[None]:
    """Translate elasticsearch-py errors: unreachable/429/5xx transient, other 4xx not."""
    import elasticsearch

    try:
        yield
    except (elasticsearch.ConnectionError, elasticsearch.ConnectionTimeout) as exc:
        raise IndexUnavailable(f"elasticsearch {what}: {exc}") from exc
    except elasticsearch.ApiError as exc:
        status = int(getattr(exc, "status_code", 0) or getattr(exc.meta, "status", 0) or 0)
        if status == 429 or status >= 500:
            raise IndexUnavailable(f"elasticsearch {what}: {status} {exc}") from exc
        raise IndexRejected(f"elasticsearch {what}: {status} {exc}") from exc
    except elasticsearch.TransportError as exc:
        raise IndexUnavailable(f"elasticsearch {what}: {exc}") from exc


def connect(url: str, *, timeout_s: float = 5.0, api_key: str | None = None) -> Any:
    """An ``Elasticsearch`` client (no I/O until the first call)."""
    try:
        from elasticsearch import Elasticsearch
    except ImportError as exc:
        raise missing_extra("es", "the elasticsearch lexical backend", exc) from exc

    return Elasticsearch(url, api_key=api_key, request_timeout=timeout_s)


class ElasticsearchLexicalIndex:
    """BM25 on Elasticsearch; ``index`` is the index name, its template ``<index>-tpl``."""

    name = "lexical"

    def __init__(self, client: Any, *, index: str, timeout_s: float = 5.0) -> None:
        self.client = client
        self.index = validate_id(index, kind="index name").lower()
        self.timeout_s = timeout_s

    def ensure_schema(self) -> None:
        with es_errors("ensure schema"):
            self.client.indices.put_index_template(
                name=f"{self.index}-tpl",
                index_patterns=[self.index],
                template={"settings": SETTINGS, "mappings": MAPPINGS},
                priority=200,
            )
            if not self.client.indices.exists(index=self.index):
                self.client.indices.create(index=self.index)

    def _doc(self, card: LtmCard) -> dict[str, Any]:
        return {
            "memory_id": card.memory_id,
            "tenant_id": card.tenant_id,
            "user_id": card.user_id,
            "project_id": card.project_id or "",
            "memory_type": card.memory_type,
            "status": card.status.value,
            "bm25_text": card.bm25_text,
            "title_bm25": normalise(card.title),
            "summary_bm25": normalise(card.summary),
            "title": card.title,
            "summary": card.summary,
            "content": card.content,
            "importance": card.importance,
            "updated_at": card.updated_at,
        }

    def _bulk(self, actions: list[dict[str, Any]], what: str) -> None:
        from elasticsearch import helpers

        with es_errors(what):
            _, errors_or_count = helpers.bulk(
                self.client, actions, raise_on_error=False, request_timeout=self.timeout_s
            )
        errors = errors_or_count if isinstance(errors_or_count, list) else []
        real = [e for e in errors if next(iter(e.values())).get("status") != 404]
        if real:
            status = int(next(iter(real[0].values())).get("status", 0))
            error = IndexUnavailable if status == 429 or status >= 500 else IndexRejected
            raise error(f"elasticsearch {what}: {len(real)} failed, first: {real[0]}")

    def upsert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        """Each card as the document ``_id`` = its row key (``keys``) or its memory_id."""
        ids = keys_for(cards, keys)
        if cards:
            self._bulk(
                [
                    {
                        "_op_type": "index",
                        "_index": self.index,
                        "_id": key,
                        "_source": self._doc(c),
                    }
                    for c, key in zip(cards, ids, strict=True)
                ],
                "bulk upsert",
            )

    def insert(self, cards: Sequence[LtmCard], *, keys: Sequence[str] | None = None) -> None:
        """Elasticsearch indexes by ``_id`` at the same cost either way."""
        self.upsert(cards, keys=keys)

    def delete(self, memory_ids: Sequence[str]) -> None:
        ids = validate_row_keys(memory_ids)
        if ids:
            self._bulk(
                [{"_op_type": "delete", "_index": self.index, "_id": m} for m in ids], "bulk delete"
            )

    def search(self, normalised_query: str, flt: CardFilter, limit: int) -> list[Hit]:
        if not normalised_query.strip():
            return []
        query = {
            "bool": {
                "must": {
                    "multi_match": {
                        "query": normalised_query,
                        "fields": ["bm25_text", "title_bm25^2", "summary_bm25^1.5"],
                        "type": "most_fields",
                    }
                },
                "filter": es_filter(flt),
            }
        }
        with es_errors("search"):
            result = self.client.search(
                index=self.index,
                query=query,
                size=limit,
                source=["title", "summary", "importance", "updated_at"],
                request_timeout=self.timeout_s,
            )
        return [
            Hit(
                memory_id=card_of(str(hit["_id"])),
                score=float(hit["_score"]),
                importance=float(hit["_source"].get("importance", 0.0)),
                updated_at=float(hit["_source"].get("updated_at", 0.0)),
                title=str(hit["_source"].get("title", "")),
                summary=str(hit["_source"].get("summary", "")),
            )
            for hit in result["hits"]["hits"]
        ]

    def get(self, memory_ids: Sequence[str]) -> list[Hit]:
        ids = [validate_id(m, kind="memory_id") for m in memory_ids]
        if not ids:
            return []
        with es_errors("mget"):
            result = self.client.mget(
                index=self.index,
                ids=ids,
                source=["title", "summary", "importance", "updated_at"],
                request_timeout=self.timeout_s,
            )
        return [
            Hit(
                memory_id=card_of(str(doc["_id"])),
                score=0.0,
                importance=float(doc["_source"].get("importance", 0.0)),
                updated_at=float(doc["_source"].get("updated_at", 0.0)),
                title=str(doc["_source"].get("title", "")),
                summary=str(doc["_source"].get("summary", "")),
            )
            for doc in result["docs"]
            if doc.get("found")
        ]

    def count_owner(self, tenant_id: str, user_id: str) -> int:
        query = {"bool": {"filter": es_filter(owner_filter(tenant_id, user_id))}}
        with es_errors("count an owner"):
            if not self.client.indices.exists(index=self.index):
                return 0
            result = self.client.count(index=self.index, query=query,
                                       request_timeout=self.timeout_s)  # fmt: skip
        return int(result["count"])

    def delete_owner(self, tenant_id: str, user_id: str) -> None:
        query = {"bool": {"filter": es_filter(owner_filter(tenant_id, user_id))}}
        with es_errors("delete an owner"):
            if self.client.indices.exists(index=self.index):
                self.client.delete_by_query(index=self.index, query=query, refresh=True,
                                            conflicts="proceed",
                                            request_timeout=self.timeout_s)  # fmt: skip

    def refresh(self) -> None:
        """ES makes writes searchable after a refresh (1 s by default); tests force it."""
        with es_errors("refresh"):
            self.client.indices.refresh(index=self.index)

    def drop(self) -> None:
        with es_errors("drop"):
            self.client.indices.delete(index=self.index, ignore_unavailable=True)
