"""A LangGraph ``BaseStore`` backed by memstrata (``pip install 'memstrata[langgraph]'``).

    from memstrata.integrations.langgraph import MemstrataStore
    store = MemstrataStore.from_runtime(get_runtime(), tenant_id="acme")
    graph = builder.compile(store=store)            # nodes get it as `store`
    store.put(("alice", "memories"), "m1", {"text": "prefers dark mode"})
    store.search(("alice",), query="dark mode")

**Namespace ↔ owner.**  The store is bound to one tenant (and optionally one user); the
first label of every namespace is the **user id** (a safe id), the rest is free:
``(user_id, label, ...)`` ↔ tenant = the store's, user = ``namespace[0]``.  An erase of
the user (``memstrata erase``, the MCP ``forget`` tool) removes the user's documents.
LangGraph's own examples put the user first (``(user_id, "memories")``), so they work
unchanged.

**Where items live.**  LangGraph items are arbitrary JSON values by key, which the
extracted layers (STM items derived from turns, promoted LTM cards) cannot hold
verbatim; they are stored in PostgreSQL, table ``agent_store_items``
(:mod:`memstrata.core.agent_store`), and read back exactly as written.  ``search(query=)``
ranks by the share of query terms in the item's text (the tokenizer recall uses), not by
embeddings (``index`` and ``ttl`` are not supported); for memory extracted from the
conversation, use memstrata's ``recall``.

Operations of one ``batch`` run in order, in one transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from sqlalchemy import Connection, Engine

from memstrata.core.agent_store import AgentStore, StoredItem
from memstrata.core.runtime import Runtime


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _item(s: StoredItem) -> Item:
    return Item(value=s.value, key=s.key, namespace=s.namespace,
                created_at=_dt(s.created_at), updated_at=_dt(s.updated_at))  # fmt: skip


def _search_item(s: StoredItem) -> SearchItem:
    return SearchItem(namespace=s.namespace, key=s.key, value=s.value,
                      created_at=_dt(s.created_at), updated_at=_dt(s.updated_at),
                      score=s.score)  # fmt: skip


class MemstrataStore(BaseStore):
    """LangGraph's store interface over :class:`AgentStore` (PostgreSQL, owner-scoped)."""

    __slots__ = ("agent_store",)

    def __init__(self, agent_store: AgentStore) -> None:
        self.agent_store = agent_store

    @classmethod
    def from_runtime(
        cls, runtime: Runtime, *, tenant_id: str | None = None, user_id: str | None = None
    ) -> MemstrataStore:
        """On the process's PostgreSQL pool; ``user_id`` confines the store to one user."""
        return cls(AgentStore(runtime.engine, tenant_id=tenant_id, user_id=user_id))

    @classmethod
    def from_engine(
        cls, engine: Engine, *, tenant_id: str | None = None, user_id: str | None = None
    ) -> MemstrataStore:
        return cls(AgentStore(engine, tenant_id=tenant_id, user_id=user_id))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        todo = list(ops)
        with self.agent_store.engine.begin() as conn:
            return [self._one(op, conn) for op in todo]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        todo = list(ops)  # the blocking driver runs on a worker thread, not the event loop
        return await asyncio.to_thread(self.batch, todo)

    def _one(self, op: Op, conn: Connection) -> Result:
        s = self.agent_store
        if isinstance(op, GetOp):
            got = s.get(op.namespace, op.key, conn=conn)
            return None if got is None else _item(got)
        if isinstance(op, PutOp):
            if op.value is None:
                s.delete(op.namespace, op.key, conn=conn)
            else:
                s.put(op.namespace, op.key, op.value, conn=conn)
            return None
        if isinstance(op, SearchOp):
            found = s.search(op.namespace_prefix, query=op.query, filter=op.filter,
                             limit=op.limit, offset=op.offset, conn=conn)  # fmt: skip
            return [_search_item(i) for i in found]
        if isinstance(op, ListNamespacesOp):
            prefix = suffix = None
            for cond in op.match_conditions or ():
                if cond.match_type == "prefix":
                    prefix = tuple(cond.path)
                else:
                    suffix = tuple(cond.path)
            return s.list_namespaces(prefix=prefix, suffix=suffix, max_depth=op.max_depth,
                                     limit=op.limit, offset=op.offset, conn=conn)  # fmt: skip
        raise TypeError(f"unknown store operation {type(op).__name__}")


__all__ = ["MemstrataStore"]
