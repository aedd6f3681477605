"""The one client: :class:`Memory` (sync) and :class:`AsyncMemory`.

    from memstrata import Memory
    memory = Memory()                                   # embedded: Redis/PG/L0 in-process
    memory = Memory(url="http://host:8300", api_key="msk_…")  # the REST service
    memory.record_turn(user_id="alice@example.com", session_id="s1", messages=[...])
    memory.recall("what did we rule out?", user_id="alice@example.com", session_id="s1")

Both modes have the same methods, arguments, result models (``memstrata.wire`` and the
core models) and exception classes (``memstrata.core.errors``; the remote client rebuilds
them from the service's problem+json bodies).  User ids are external ids (emails,
``user:42``, ``张三``): the embedded client maps them to key parts with
:func:`memstrata.core.ids.user_key`, the remote one sends them as they are and the service
maps them.  The tenant is the ``tenant`` argument (default ``MEMSTRATA_TENANT``) in
embedded mode and the API key's tenant remotely.

Embedded mode builds everything from the process's :class:`memstrata.core.runtime.Runtime`
(or the one passed in); build the client after fork, once per process, and ``close()``
it (or use it as a context manager).  ``record_turn`` applies the unknown-owner policy
(``MEMSTRATA_UNKNOWN_OWNER``, :mod:`memstrata.core.owners`) first.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from memstrata.core.errors import MemstrataError, StoreUnavailable, missing_extra
from memstrata.core.ids import owner_tenant, user_key
from memstrata.core.ltm.card import CardView
from memstrata.core.models.candidate import WriteDecision
from memstrata.core.models.memory import MemoryView
from memstrata.core.models.owners import NewApiKey, Scope, TenantInfo, UserInfo
from memstrata.core.models.transcript import MessageIn, TurnReceipt
from memstrata.core.recall.result import RecallResult
from memstrata.wire import (
    ApiKeyIn,
    EraseResult,
    RecallIn,
    TenantIn,
    TurnIn,
    UserIn,
    Verdict,
    error_from,
)

if TYPE_CHECKING:
    from memstrata.core.api import Kicker, MemoryClient
    from memstrata.core.recall.service import Recaller
    from memstrata.core.runtime import Runtime

P = ParamSpec("P")
T = TypeVar("T")
Messages = Sequence[MessageIn | Mapping[str, Any]]
_ITEMS = TypeAdapter(list[MemoryView])
_CARDS = TypeAdapter(list[CardView])
_DECISIONS = TypeAdapter(list[WriteDecision])
_TENANTS = TypeAdapter(list[TenantInfo])
_USERS = TypeAdapter(list[UserInfo])


def _messages_json(messages: Messages) -> list[Any]:
    if not isinstance(messages, list | tuple):
        return messages  # type: ignore[return-value]  # the service names the problem
    return [m.model_dump(mode="json") if isinstance(m, MessageIn) else m for m in messages]


def _drop_none(params: Mapping[str, object]) -> dict[str, str]:
    """Query parameters without the unset ones; booleans as ``true``/``false``."""
    out: dict[str, str] = {}
    for k, v in params.items():
        if v is not None:
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


# --------------------------------------------------------------------------- embedded


class Embedded:
    """The in-process implementation, tenant per call (:class:`Memory` and the REST service
    share it); every method maps external user ids with ``user_key``."""

    def __init__(
        self,
        runtime: Runtime | None,
        tenant: str | None,
        background_kicks: bool,
        kicker: Kicker | None = None,
    ) -> None:
        try:
            from memstrata.core.runtime import get_runtime
        except ImportError as exc:  # `pip install memstrata`: the remote client only
            raise missing_extra("server", "embedded mode (Memory() without url)", exc) from exc

        self.rt = runtime or get_runtime()
        self.tenant = owner_tenant(tenant if tenant is not None else self.rt.settings.tenant)
        self._background_kicks = background_kicks
        self._writer: MemoryClient | None = None
        if kicker is not None:
            from memstrata.core.api import MemoryClient

            self._writer = MemoryClient(
                transcript=self.rt.transcript, queue=self.rt.queue, kicker=kicker
            )
        self._recaller: Recaller | None = None
        self._lock = threading.Lock()

    def writer(self) -> MemoryClient:
        if self._writer is None:
            from memstrata.tasks.client import connect

            self._writer = connect(background_kicks=self._background_kicks, runtime=self.rt)
        return self._writer

    def recaller(self) -> Recaller:
        with self._lock:
            if self._recaller is None:
                self.rt.warm_ltm()  # load LTM outside the first recall's time budget
                self._recaller = self.rt.recaller()
            return self._recaller

    def record_turn(self, body: TurnIn, messages: Messages, *, tenant: str) -> TurnReceipt:
        key = user_key(body.user_id)
        self.rt.owners.ensure(tenant, key)
        return self.writer().record_turn(
            user_id=key,
            session_id=body.session_id,
            messages=messages,
            task_id=body.task_id,
            tenant_id=tenant,
            turn_id=body.turn_id,
            at=body.at,
        )

    def recall(self, body: RecallIn, *, tenant: str) -> RecallResult:
        from memstrata.core.recall.service import RecallRequest

        req = RecallRequest(
            tenant_id=tenant,
            user_id=user_key(body.user_id),
            session_id=body.session_id,
            query=body.query,
            task_id=body.task_id,
            project_id=body.project_id,
            workspace_id=body.workspace_id,
            top_k=body.top_k,
            token_budget=body.token_budget,
            explain=body.explain,
            as_of=body.as_of,
        )
        return self.recaller().recall(req)

    def inspect(
        self,
        user_id: str,
        *,
        session_id: str | None,
        task_id: str | None,
        entity: str | None,
        memory_type: str | None,
        limit: int,
        tenant: str,
    ) -> list[MemoryView]:
        stm, key, t = self.rt.stm, user_key(user_id), tenant
        if session_id is not None:
            items = stm.by_session(key, session_id, limit=limit, tenant_id=t)
        elif task_id is not None:
            items = stm.by_task(key, task_id, limit=limit, tenant_id=t)
        elif entity is not None:
            items = stm.by_entity(key, entity, limit=limit, tenant_id=t)
        elif memory_type is not None:
            items = stm.by_type(key, memory_type, limit=limit, tenant_id=t)
        else:
            items = stm.recent(key, limit=limit, tenant_id=t)
        return [MemoryView.of(i) for i in items]

    def cards(
        self, user_id: str, *, memory_type: str | None, superseded: bool, limit: int,
        tenant: str,
    ) -> list[CardView]:  # fmt: skip
        found = self.rt.ledger.owned(
            tenant, user_key(user_id), memory_type=memory_type, active_only=not superseded,
            limit=limit,
        )  # fmt: skip
        return [CardView.of(c) for c in found]

    def explain(
        self, user_id: str, session_id: str, verdict: Verdict | None, *, tenant: str
    ) -> list[WriteDecision]:
        from memstrata.core.ingest.pipeline import read_decisions

        rows = read_decisions(self.rt, user_key(user_id), session_id, tenant_id=tenant)
        if verdict is not None:
            rows = [d for d in rows if d.verdict.value == verdict]
        return rows

    def erase(self, user_id: str, *, dry_run: bool, tenant: str) -> EraseResult:
        from memstrata.core.erase import erase_owner

        key = user_key(user_id)
        report = erase_owner(self.rt, user_id=key, tenant_id=tenant, dry_run=dry_run)
        if not dry_run:
            self.rt.owners.forget(tenant, key)
        return EraseResult(
            tenant_id=report.tenant_id,
            user_id=user_id,
            key=key,
            dry_run=report.dry_run,
            found=report.found,
            removed=report.removed,
            skipped=report.skipped,
            resumed=report.resumed,
            finished=report.finished,
        )

    def close(self) -> None:
        if self._recaller is not None:
            self._recaller.close()
            self._recaller = None


# ----------------------------------------------------------------------------- remote


def _raise_for(resp: httpx.Response) -> None:
    if resp.is_success:
        return
    try:
        body: Any = resp.json()
    except ValueError:
        body = None
    raise error_from(resp.status_code, body)


def _unreachable(url: str, exc: httpx.HTTPError) -> StoreUnavailable:
    return StoreUnavailable(f"memstrata service at {url} unreachable: {type(exc).__name__}: {exc}")


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


# ---------------------------------------------------------------------------- public


class _Admin:
    """``Memory.admin``: tenants and users (see :mod:`memstrata.core.owners`)."""

    def __init__(self, memory: Memory) -> None:
        self._m = memory

    def create_tenant(self, tenant_id: str, *, name: str | None = None) -> TenantInfo:
        """Create a tenant: embedded, or remotely with the deployment admin key
        (``MEMSTRATA_ADMIN_API_KEY`` of the service; a tenant's key gets Forbidden)."""
        body = TenantIn(tenant_id=tenant_id, name=name)
        if (e := self._m._embedded) is not None:
            return e.rt.owners.create_tenant(body.tenant_id, name=body.name)
        return TenantInfo.model_validate(self._m._call("POST", "/v1/tenants", json=body))

    def list_tenants(self) -> list[TenantInfo]:
        """Every tenant (embedded, admin key); with a tenant's ``admin`` key, its own."""
        if (e := self._m._embedded) is not None:
            return e.rt.owners.list_tenants()
        return _TENANTS.validate_python(self._m._call("GET", "/v1/tenants"))

    def create_api_key(
        self, tenant_id: str, *, name: str = "default", scopes: Sequence[Scope] = ("read", "write")
    ) -> NewApiKey:
        """A REST key of ``tenant_id`` (embedded, or with the admin key): its ``secret`` is
        returned this once, only a hash is kept."""
        body = ApiKeyIn(name=name, scopes=list(scopes))
        if (e := self._m._embedded) is not None:
            return e.rt.api_keys.create(tenant_id, name=body.name, scopes=list(body.scopes))
        path = f"/v1/tenants/{quote(tenant_id, safe='')}/apikeys"
        return NewApiKey.model_validate(self._m._call("POST", path, json=body))

    def create_user(self, user_id: str, *, display_name: str | None = None) -> UserInfo:
        """Register a user of the client's tenant (``record_turn`` may do it for you)."""
        body = UserIn(user_id=user_id, display_name=display_name)
        if (e := self._m._embedded) is not None:
            return e.rt.owners.create_user(e.tenant, user_key(user_id), display_name=display_name)
        return UserInfo.model_validate(self._m._call("POST", "/v1/admin/users", json=body))

    def get_user(self, user_id: str) -> UserInfo:
        if (e := self._m._embedded) is not None:
            return e.rt.owners.get_user(e.tenant, user_key(user_id))
        path = "/v1/admin/users/" + quote(user_id, safe="")
        return UserInfo.model_validate(self._m._call("GET", path))

    def list_users(self) -> list[UserInfo]:
        if (e := self._m._embedded) is not None:
            return e.rt.owners.list_users(e.tenant)
        return _USERS.validate_python(self._m._call("GET", "/v1/admin/users"))

    def erase_user(self, user_id: str, *, dry_run: bool = False) -> EraseResult:
        """The same as :meth:`Memory.erase`."""
        return self._m.erase(user_id, dry_run=dry_run)


class Memory:
    """Memory for one agent process: embedded (no ``url``) or over HTTP (``url``)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        tenant: str | None = None,
        runtime: Runtime | None = None,
        timeout_s: float = 30.0,
        background_kicks: bool = True,
        kicker: Kicker | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """``url``/``api_key``: the REST service (its key fixes the tenant); else embedded
        on ``runtime`` (default: this process's) in ``tenant`` (default ``MEMSTRATA_TENANT``).

        ``kicker`` replaces the Celery drain kick (embedded; the REST service and tests);
        ``http_client`` a preconfigured ``httpx.Client`` (remote).
        """
        self.url = url
        self._embedded: Embedded | None = None
        self._http: httpx.Client | None = None
        if url is None:
            self._embedded = Embedded(runtime, tenant, background_kicks, kicker)
        else:
            self._http = http_client or httpx.Client(
                base_url=url, headers=_headers(api_key), timeout=timeout_s
            )
        self.admin = _Admin(self)

    @property
    def tenant(self) -> str | None:
        """The tenant of every call (embedded); remotely the key's, not known client-side."""
        return self._embedded.tenant if self._embedded is not None else None

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: BaseModel | None = None,
        params: Mapping[str, object] | None = None,
        raw: Any = None,
    ) -> Any:
        assert self._http is not None
        payload = raw if raw is not None else (json.model_dump(mode="json") if json else None)
        try:
            resp = self._http.request(method, path, json=payload, params=_drop_none(params or {}))
        except httpx.HTTPError as exc:
            raise _unreachable(str(self.url), exc) from exc
        _raise_for(resp)
        return resp.json()

    def record_turn(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Messages,
        task_id: str | None = None,
        turn_id: str | None = None,
        at: float | None = None,
    ) -> TurnReceipt:
        """Record a finished turn: durable in L0 and queued on return (docs/RELIABILITY.md).

        Retry with the same ``turn_id`` after a :class:`StoreUnavailable`: it is recorded
        once.  Bad input raises :class:`memstrata.core.errors.InvalidInput` naming the field.
        """
        if (e := self._embedded) is not None:
            body = TurnIn.model_construct(
                user_id=user_id, session_id=session_id, messages=[], task_id=task_id,
                turn_id=turn_id, at=at,
            )  # fmt: skip  # record_turn validates every field itself
            return e.record_turn(body, messages, tenant=e.tenant)
        raw = {
            "user_id": user_id, "session_id": session_id, "messages": _messages_json(messages),
            "task_id": task_id, "turn_id": turn_id, "at": at,
        }  # fmt: skip
        return TurnReceipt.model_validate(self._call("POST", "/v1/turns", raw=raw))

    def recall(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str,
        task_id: str | None = None,
        project_id: str | None = None,
        workspace_id: str | None = None,
        top_k: int = 8,
        token_budget: int = 600,
        explain: bool = False,
        as_of: float | None = None,
    ) -> RecallResult:
        """The memory block to inject before a model call (``.text``), typed (``.memory``).

        ``token_budget``: cl100k tokens of ``.text`` as printed, the profile block included
        (a profile alone over it is printed whole, with no memory line).
        ``as_of`` (seconds since the epoch): memory as it stood then, not now: what was
        written by then, each statement as it read then (docs/LIFECYCLE.md, "As of a
        moment")."""
        body = _recall_body(locals())
        if (e := self._embedded) is not None:
            return e.recall(body, tenant=e.tenant)
        return RecallResult.model_validate(self._call("POST", "/v1/recall", json=body))

    def inspect(
        self,
        *,
        user_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        entity: str | None = None,
        memory_type: str | None = None,
        limit: int = 50,
    ) -> list[MemoryView]:
        """A user's STM items, newest first, by session, task, entity or type (one of them)."""
        if (e := self._embedded) is not None:
            return e.inspect(
                user_id, session_id=session_id, task_id=task_id, entity=entity,
                memory_type=memory_type, limit=limit, tenant=e.tenant,
            )  # fmt: skip
        params = {
            "user_id": user_id, "session_id": session_id, "task_id": task_id,
            "entity": entity, "type": memory_type, "limit": limit,
        }  # fmt: skip
        return _ITEMS.validate_python(self._call("GET", "/v1/memories", params=params))

    def cards(
        self,
        *,
        user_id: str,
        memory_type: str | None = None,
        superseded: bool = False,
        limit: int = 50,
    ) -> list[CardView]:
        """A user's long-term cards, most recently changed first: episodes, session
        summaries, merged and entity cards (``memory_type``: one kind); ``superseded``:
        also those merged away, replaced or retracted."""
        if (e := self._embedded) is not None:
            return e.cards(user_id, memory_type=memory_type, superseded=superseded,
                           limit=limit, tenant=e.tenant)  # fmt: skip
        params = {"user_id": user_id, "type": memory_type, "superseded": superseded,
                  "limit": limit}  # fmt: skip
        return _CARDS.validate_python(self._call("GET", "/v1/cards", params=params))

    def explain(
        self, *, user_id: str, session_id: str, verdict: Verdict | None = None
    ) -> list[WriteDecision]:
        """Every write decision of a session (why each candidate was stored or refused)."""
        if (e := self._embedded) is not None:
            return e.explain(user_id, session_id, verdict, tenant=e.tenant)
        params = {"user_id": user_id, "session_id": session_id, "verdict": verdict}
        return _DECISIONS.validate_python(self._call("GET", "/v1/decisions", params=params))

    def erase(self, user_id: str, *, dry_run: bool = False) -> EraseResult:
        """Remove one user's data from every layer (``dry_run``: only count it)."""
        if (e := self._embedded) is not None:
            return e.erase(user_id, dry_run=dry_run, tenant=e.tenant)
        path = "/v1/users/" + quote(user_id, safe="")
        return EraseResult.model_validate(self._call("DELETE", path, params={"dry_run": dry_run}))

    def close(self) -> None:
        """Release the recaller's threads (embedded) or the HTTP connections (remote)."""
        if self._embedded is not None:
            self._embedded.close()
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _recall_body(args: Mapping[str, Any]) -> RecallIn:
    from memstrata.core.models.inputs import invalid_input

    fields = {k: args[k] for k in RecallIn.model_fields}
    try:
        return RecallIn.model_validate(fields)
    except Exception as exc:  # pydantic.ValidationError: one InvalidInput naming the field
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            raise invalid_input(exc) from exc
        raise


class _AsyncAdmin:
    def __init__(self, memory: AsyncMemory) -> None:
        self._m = memory

    async def create_tenant(self, tenant_id: str, *, name: str | None = None) -> TenantInfo:
        return await self._m._run(self._m._sync.admin.create_tenant, tenant_id, name=name)

    async def list_tenants(self) -> list[TenantInfo]:
        return await self._m._run(self._m._sync.admin.list_tenants)

    async def create_api_key(
        self, tenant_id: str, *, name: str = "default", scopes: Sequence[Scope] = ("read", "write")
    ) -> NewApiKey:
        return await self._m._run(
            self._m._sync.admin.create_api_key, tenant_id, name=name, scopes=scopes
        )

    async def create_user(self, user_id: str, *, display_name: str | None = None) -> UserInfo:
        return await self._m._run(
            self._m._sync.admin.create_user, user_id, display_name=display_name
        )

    async def get_user(self, user_id: str) -> UserInfo:
        return await self._m._run(self._m._sync.admin.get_user, user_id)

    async def list_users(self) -> list[UserInfo]:
        return await self._m._run(self._m._sync.admin.list_users)

    async def erase_user(self, user_id: str, *, dry_run: bool = False) -> EraseResult:
        return await self._m.erase(user_id, dry_run=dry_run)


class AsyncMemory:
    """:class:`Memory` for asyncio code: the same methods, awaited.

    Embedded calls run the sync client in a worker thread (``asyncio.to_thread``: the
    stores' clients are blocking); remote calls use ``httpx.AsyncClient`` directly.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        tenant: str | None = None,
        runtime: Runtime | None = None,
        timeout_s: float = 30.0,
        background_kicks: bool = True,
        kicker: Kicker | None = None,
    ) -> None:
        self.url = url
        # embedded: every call runs this client in a thread; remote: admin calls only
        self._sync = Memory(
            url, api_key=api_key, tenant=tenant, runtime=runtime, timeout_s=timeout_s,
            background_kicks=background_kicks, kicker=kicker,
        )  # fmt: skip
        self._http: httpx.AsyncClient | None = None
        if url is not None:
            self._http = httpx.AsyncClient(
                base_url=url, headers=_headers(api_key), timeout=timeout_s
            )
        self.admin = _AsyncAdmin(self)

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        raw: Any = None,
        params: Mapping[str, object] | None = None,
    ) -> Any:
        assert self._http is not None
        try:
            resp = await self._http.request(method, path, json=raw, params=_drop_none(params or {}))
        except httpx.HTTPError as exc:
            raise _unreachable(str(self.url), exc) from exc
        _raise_for(resp)
        return resp.json()

    async def record_turn(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Messages,
        task_id: str | None = None,
        turn_id: str | None = None,
        at: float | None = None,
    ) -> TurnReceipt:
        kw: dict[str, Any] = {
            "user_id": user_id, "session_id": session_id, "task_id": task_id,
            "turn_id": turn_id, "at": at,
        }  # fmt: skip
        if self._http is None:
            return await self._run(self._sync.record_turn, messages=messages, **kw)
        raw = {**kw, "messages": _messages_json(messages)}
        return TurnReceipt.model_validate(await self._call("POST", "/v1/turns", raw=raw))

    async def recall(
        self,
        query: str,
        *,
        user_id: str,
        session_id: str,
        task_id: str | None = None,
        project_id: str | None = None,
        workspace_id: str | None = None,
        top_k: int = 8,
        token_budget: int = 600,
        explain: bool = False,
        as_of: float | None = None,
    ) -> RecallResult:
        body = _recall_body(locals())
        if self._http is None:
            return await self._run(self._sync.recall, **body.model_dump())
        out = await self._call("POST", "/v1/recall", raw=body.model_dump(mode="json"))
        return RecallResult.model_validate(out)

    async def inspect(
        self,
        *,
        user_id: str,
        session_id: str | None = None,
        task_id: str | None = None,
        entity: str | None = None,
        memory_type: str | None = None,
        limit: int = 50,
    ) -> list[MemoryView]:
        if self._http is None:
            return await self._run(
                self._sync.inspect, user_id=user_id, session_id=session_id, task_id=task_id,
                entity=entity, memory_type=memory_type, limit=limit,
            )  # fmt: skip
        params = {
            "user_id": user_id, "session_id": session_id, "task_id": task_id,
            "entity": entity, "type": memory_type, "limit": limit,
        }  # fmt: skip
        return _ITEMS.validate_python(await self._call("GET", "/v1/memories", params=params))

    async def cards(
        self,
        *,
        user_id: str,
        memory_type: str | None = None,
        superseded: bool = False,
        limit: int = 50,
    ) -> list[CardView]:
        if self._http is None:
            return await self._run(self._sync.cards, user_id=user_id, memory_type=memory_type,
                                   superseded=superseded, limit=limit)  # fmt: skip
        params = {"user_id": user_id, "type": memory_type, "superseded": superseded,
                  "limit": limit}  # fmt: skip
        return _CARDS.validate_python(await self._call("GET", "/v1/cards", params=params))

    async def explain(
        self, *, user_id: str, session_id: str, verdict: Verdict | None = None
    ) -> list[WriteDecision]:
        if self._http is None:
            return await self._run(
                self._sync.explain, user_id=user_id, session_id=session_id, verdict=verdict
            )
        params = {"user_id": user_id, "session_id": session_id, "verdict": verdict}
        return _DECISIONS.validate_python(await self._call("GET", "/v1/decisions", params=params))

    async def erase(self, user_id: str, *, dry_run: bool = False) -> EraseResult:
        if self._http is None:
            return await self._run(self._sync.erase, user_id, dry_run=dry_run)
        path = "/v1/users/" + quote(user_id, safe="")
        out = await self._call("DELETE", path, params={"dry_run": dry_run})
        return EraseResult.model_validate(out)

    async def aclose(self) -> None:
        self._sync.close()
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["AsyncMemory", "Memory", "MemstrataError"]
