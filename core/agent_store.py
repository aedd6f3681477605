"""The agent store: JSON documents by (namespace, key), owned by a tenant and a user.

What framework stores (LangGraph's ``BaseStore``: ``put/get/search/delete`` of arbitrary
JSON values under a namespace path) need does not fit the extracted layers: STM items
are derived from turns, capped and expire, and an LTM card is promoted, never written
verbatim.  So these documents live in PostgreSQL, the layer that keeps what it is given
until it is deleted, in one table, ``agent_store_items``:

* the namespace is a path of labels whose **first label is the user id** (a safe id,
  validated): ``("alice", "memories")``; the row's ``user_id`` is that label, so the
  owner's erase (:mod:`memstrata.core.erase`) removes the user's documents with the rest;
* every statement is scoped by the store's tenant, and by its user when it is bound to
  one (a store bound to ``alice`` cannot read or write under ``("bob", ...)``);
* search: namespace prefix in SQL, newest first; a ``filter`` (equality, nested dicts,
  ``$eq $ne $gt $gte $lt $lte``) and a text ``query`` are applied to at most
  ``scan_limit`` candidates; the query's score is the share of its terms found in the
  document's text (the tokenizer recall uses for STM: words, camelCase parts, CJK
  bigrams), highest first.  No embeddings: a semantic search is recall's job.

No Celery, no framework import: the LangGraph adapter (``memstrata.integrations``) maps
its operations onto :class:`AgentStore`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    and_,
    cast,
    delete,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, array
from sqlalchemy.dialects.postgresql import insert as pg_insert

from memstrata.core.adapters.pg import pg_errors
from memstrata.core.errors import InvalidInput, PayloadTooLarge
from memstrata.core.ids import owner_tenant, validate_id
from memstrata.core.recall.text import coverage, terms

store_metadata = MetaData()

AGENT_ITEMS = Table(
    "agent_store_items",
    store_metadata,
    Column("tenant_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),  # = namespace[1] (PostgreSQL is 1-based)
    Column("namespace", ARRAY(Text), nullable=False),
    Column("key", Text, nullable=False),
    Column("value", JSONB, nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
    Column("updated_at", Float(precision=53), nullable=False),
    PrimaryKeyConstraint("tenant_id", "namespace", "key", name="pk_agent_store_items"),
    Index("ix_agent_store_items_owner", "tenant_id", "user_id"),
)

MAX_DEPTH = 16
MAX_LABEL_CHARS = 256
MAX_KEY_CHARS = 1024
MAX_VALUE_BYTES = 256 * 1024
MAX_LIMIT = 1000
OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


@dataclass(frozen=True)
class StoredItem:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    score: float | None = None


def _label(label: object, i: int) -> str:
    if not isinstance(label, str) or not label:
        raise InvalidInput(f"namespace label {i}: must be a non-empty string")
    if len(label) > MAX_LABEL_CHARS:
        raise PayloadTooLarge(f"namespace label {i}: longer than {MAX_LABEL_CHARS} characters")
    if "." in label or "\x00" in label:  # LangGraph's own rule: labels hold no periods
        raise InvalidInput(f"namespace label {i}: must not contain '.'")
    return label


def matches(value: Any, wanted: Any) -> bool:
    """JSONB-like match of one filter value (nested dicts, lists, ``$`` operators)."""
    if isinstance(wanted, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_apply(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _apply(value: Any, op: str, arg: Any) -> bool:
    if op not in OPERATORS:
        raise InvalidInput(f"filter: unsupported operator {op!r} (use {sorted(OPERATORS)})")
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    try:
        a, b = float(value), float(arg)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric value matches no comparison
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


class AgentStore:
    """Documents of one tenant (and, if ``user_id`` is given, of that user only)."""

    def __init__(
        self,
        engine: Engine,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        scan_limit: int = 5000,
        clock: Any = time.time,
    ) -> None:
        self.engine = engine
        self.tenant_id = owner_tenant(tenant_id)
        self.user_id = None if user_id is None else validate_id(user_id, kind="user_id")
        self.max_value_bytes = max_value_bytes
        self.scan_limit = scan_limit
        self.clock = clock

    # ------------------------------------------------------------------ checks
    def namespace(self, namespace: Sequence[str]) -> tuple[str, ...]:
        """A full item namespace, checked: ``(user_id, label, ...)``, owned by this store."""
        ns = self.prefix(namespace)
        if not ns:
            raise InvalidInput("namespace: must start with the user id, e.g. ('alice', 'notes')")
        return ns

    def prefix(self, namespace: Sequence[str]) -> tuple[str, ...]:
        """A namespace prefix (may be empty), checked like :meth:`namespace`."""
        if not isinstance(namespace, tuple | list):
            raise InvalidInput("namespace: expected a tuple of strings")
        if len(namespace) > MAX_DEPTH:
            raise InvalidInput(f"namespace: at most {MAX_DEPTH} labels")
        ns = tuple(_label(label, i) for i, label in enumerate(namespace))
        if ns:
            validate_id(ns[0], kind="user_id (namespace label 0)")
            if self.user_id is not None and ns[0] != self.user_id:
                raise InvalidInput(f"namespace: this store is bound to user {self.user_id!r}")
        return ns

    def _key(self, key: object) -> str:
        if not isinstance(key, str) or not key:
            raise InvalidInput("key: must be a non-empty string")
        if len(key) > MAX_KEY_CHARS or "\x00" in key:
            raise InvalidInput(f"key: at most {MAX_KEY_CHARS} characters, no NUL")
        return key

    def _value(self, value: object) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise InvalidInput("value: must be a JSON object (a dict)")
        try:
            raw = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"value: not JSON ({exc})") from exc
        if len(raw.encode("utf-8")) > self.max_value_bytes or "\\u0000" in raw:
            raise PayloadTooLarge(f"value: larger than {self.max_value_bytes} bytes, or has NUL")
        out: dict[str, Any] = json.loads(raw)
        return out

    def _scope(self, prefix: tuple[str, ...]) -> Any:
        t = AGENT_ITEMS
        cond = [t.c.tenant_id == self.tenant_id]
        if self.user_id is not None:
            cond.append(t.c.user_id == self.user_id)
        if prefix:
            cond.append(t.c.user_id == prefix[0])
            cond.append(func.cardinality(t.c.namespace) >= len(prefix))
            cond.append(t.c.namespace[1 : len(prefix)] == cast(array(prefix), ARRAY(Text)))
        return and_(*cond)

    # ------------------------------------------------------------------ operations
    def get(
        self, namespace: Sequence[str], key: str, *, conn: Connection | None = None
    ) -> StoredItem | None:
        ns, k = self.namespace(namespace), self._key(key)
        t = AGENT_ITEMS
        stmt = select(t).where(self._scope(ns), func.cardinality(t.c.namespace) == len(ns),
                               t.c.key == k)  # fmt: skip
        with pg_errors("agent store get"), self._conn(conn) as c:
            row = c.execute(stmt).mappings().first()
        return None if row is None else _item(row)

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        conn: Connection | None = None,
    ) -> None:
        ns, k, v = self.namespace(namespace), self._key(key), self._value(value)
        now = float(self.clock())
        t = AGENT_ITEMS
        stmt = pg_insert(t).values(tenant_id=self.tenant_id, user_id=ns[0], namespace=list(ns),
                                   key=k, value=v, created_at=now, updated_at=now)  # fmt: skip
        stmt = stmt.on_conflict_do_update(
            constraint="pk_agent_store_items",
            set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
        )
        with pg_errors("agent store put"), self._begin(conn) as c:
            c.execute(stmt)

    def delete(self, namespace: Sequence[str], key: str, *, conn: Connection | None = None) -> int:
        ns, k = self.namespace(namespace), self._key(key)
        t = AGENT_ITEMS
        stmt = delete(t).where(self._scope(ns), func.cardinality(t.c.namespace) == len(ns),
                               t.c.key == k)  # fmt: skip
        with pg_errors("agent store delete"), self._begin(conn) as c:
            return int(c.execute(stmt).rowcount)

    def search(
        self,
        prefix: Sequence[str],
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,  # LangGraph's name
        limit: int = 10,
        offset: int = 0,
        conn: Connection | None = None,
    ) -> list[StoredItem]:
        ns = self.prefix(prefix)
        if not (1 <= limit <= MAX_LIMIT) or offset < 0:
            raise InvalidInput(f"limit must be within 1..{MAX_LIMIT}, offset >= 0")
        if query is not None and len(query) > 4000:
            raise PayloadTooLarge("query: longer than 4000 characters")
        t = AGENT_ITEMS
        stmt = select(t).where(self._scope(ns)).order_by(t.c.updated_at.desc(), t.c.key)
        ranked = bool(query) or bool(filter)
        stmt = stmt.limit(self.scan_limit) if ranked else stmt.offset(offset).limit(limit)
        with pg_errors("agent store search"), self._conn(conn) as c:
            items = [_item(r) for r in c.execute(stmt).mappings()]
        if filter:
            items = [i for i in items if all(matches(i.value.get(k), v) for k, v in filter.items())]
        if query:
            q = terms(query)
            scored = [(coverage(q, terms(json.dumps(i.value, ensure_ascii=False))), i)
                      for i in items]  # fmt: skip
            scored.sort(key=lambda si: -si[0])  # stable: newest first among equal scores
            items = [_with_score(i, s) for s, i in scored]
        return items[offset : offset + limit] if ranked else items

    def list_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
        conn: Connection | None = None,
    ) -> list[tuple[str, ...]]:
        """Distinct namespaces (``*`` in a prefix or suffix matches any one label)."""
        if not (1 <= limit <= MAX_LIMIT) or offset < 0:
            raise InvalidInput(f"limit must be within 1..{MAX_LIMIT}, offset >= 0")
        if max_depth is not None and max_depth < 1:
            raise InvalidInput("max_depth must be >= 1")
        pre = tuple(prefix or ())
        fixed = self.prefix(pre) if pre and pre[0] != "*" else ()
        t = AGENT_ITEMS
        stmt = select(t.c.namespace).where(self._scope(fixed)).distinct().limit(self.scan_limit)
        with pg_errors("agent store namespaces"), self._conn(conn) as c:
            found = [tuple(r[0]) for r in c.execute(stmt)]
        back = tuple(suffix or ())[::-1]
        out = [ns for ns in found if _matches_path(ns, pre) and _matches_path(ns[::-1], back)]
        if max_depth is not None:
            out = list({ns[:max_depth] for ns in out})
        return sorted(set(out))[offset : offset + limit]

    # ------------------------------------------------------------------ helpers
    def _conn(self, conn: Connection | None) -> Any:
        return _Borrowed(conn) if conn is not None else self.engine.connect()

    def _begin(self, conn: Connection | None) -> Any:
        return _Borrowed(conn) if conn is not None else self.engine.begin()


class _Borrowed:
    """A caller's connection as a context manager that neither commits nor closes it."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __enter__(self) -> Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        return None


def _matches_path(ns: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(ns) >= len(path) and all(p in ("*", n) for n, p in zip(ns, path, strict=False))


def _item(row: Mapping[str, Any]) -> StoredItem:
    return StoredItem(
        namespace=tuple(row["namespace"]),
        key=str(row["key"]),
        value=dict(row["value"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def _with_score(item: StoredItem, score: float) -> StoredItem:
    return StoredItem(item.namespace, item.key, item.value, item.created_at, item.updated_at,
                      score)  # fmt: skip


__all__ = ["AGENT_ITEMS", "AgentStore", "StoredItem", "matches", "store_metadata"]
