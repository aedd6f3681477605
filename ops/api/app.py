"""The REST service (``memstrata api``): the client's methods over HTTP, per-tenant API keys.

    POST   /v1/turns                record_turn (the service owns L0: no shared filesystem)
    POST   /v1/recall               recall
    GET    /v1/memories             inspect (STM items; session / task / entity / type)
    GET    /v1/decisions            explain (write decisions of a session)
    DELETE /v1/users/{user_id}      erase (``?dry_run=true`` only counts)
    POST   /v1/tenants              create a tenant (the deployment admin key only)
    GET    /v1/tenants              every tenant (admin key); a tenant key's own (admin scope)
    POST   /v1/tenants/{id}/apikeys make a tenant's API key (admin key; the secret once)
    GET    /v1/admin/users          the tenant's users; POST creates one
    GET    /v1/admin/users/{id}     one user
    GET    /healthz                 the process answers (no auth)
    GET    /readyz                  Redis and PostgreSQL answer (no auth)
    GET    /openapi.json            the schema

Every ``/v1`` route needs ``Authorization: Bearer msk_…`` (``core.apikeys``) with its
scope (read: recall, memories, decisions; write: turns; admin: users, erase); the tenant
is the key's, never a request field.  Tenants are above any tenant's key: the tenant
routes take the deployment's admin key (``MEMSTRATA_ADMIN_API_KEY``, compared by SHA-256
in constant time; unset, they answer 403 and tenants are made on the CLI).  Errors are
``application/problem+json`` whose ``type`` names the exception class (``memstrata.wire``),
so the remote client raises the same class the embedded one would; a 5xx never carries a
traceback or a store's message.
Bodies over ``MEMSTRATA_API_MAX_BODY_BYTES`` are refused with 413 before they are read
whole.  The stores' clients block, so the memory routes are async functions that hand
the store calls to the thread pool in one hop (a sync route costs FastAPI two: the call,
then the response validation; 0.1 ms p50 more on the shared 2 cores); one
:class:`memstrata.client.Embedded` serves every tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata import __version__
from memstrata.client import Embedded
from memstrata.core.apikeys import ApiKeyInfo
from memstrata.core.apikeys import Scope as KeyScope
from memstrata.core.collector import tune_collector
from memstrata.core.errors import (
    Forbidden,
    InvalidInput,
    MemstrataError,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    StoreUnavailable,
    Unauthorized,
)
from memstrata.core.exposition import metrics_asgi_app
from memstrata.core.ids import user_key
from memstrata.core.ltm.card import CardView
from memstrata.core.models.candidate import WriteDecision
from memstrata.core.models.memory import MemoryView
from memstrata.core.models.owners import NewApiKey, TenantInfo, UserInfo
from memstrata.core.models.transcript import TurnReceipt
from memstrata.core.recall.result import RecallResult
from memstrata.core.redact import redact
from memstrata.core.runtime import Runtime, get_runtime
from memstrata.wire import (
    ApiKeyIn,
    EraseResult,
    Problem,
    RecallIn,
    TenantIn,
    TurnIn,
    UserIn,
    Verdict,
    problem_of,
)

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {PROBLEM: {}}, "description": what}
    for code, what in [
        (401, "no or an unknown API key"),
        (403, "the key's scope does not allow this"),
        (404, "unknown user, tenant or route"),
        (413, "body over the size limit"),
        (422, "invalid input"),
        (503, "a store is unavailable: retry"),
    ]
}


def _problem(exc: MemstrataError) -> JSONResponse:
    body = problem_of(exc)
    if body.status >= 500 and not isinstance(exc, StoreUnavailable):
        body.detail = "internal error (logged by the service)"
    else:
        body.detail = redact(body.detail)
    headers = {"Retry-After": "1"} if body.status == 503 else None
    return JSONResponse(body.model_dump(), status_code=body.status, media_type=PROBLEM,
                        headers=headers)  # fmt: skip


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes (by Content-Length, then as they stream)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = PayloadTooLarge(f"request body over {self.limit} bytes")
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await _problem(too_big)(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise too_big
            return message

        try:
            await self.app(scope, limited, send)
        except PayloadTooLarge as exc:
            await _problem(exc)(scope, receive, send)


_bearer = HTTPBearer(auto_error=False, description="a memstrata API key: msk_<id>_<secret>")


async def _mem(request: Request) -> Embedded:
    memory: Embedded = request.app.state.memory
    return memory


def _key_with(scope: KeyScope) -> Callable[..., Awaitable[ApiKeyInfo]]:
    async def check(
        request: Request,
        cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> ApiKeyInfo:
        # async: a sync dependency costs a thread-pool hop per request; a verified key is
        # answered from memory, so only a cache miss (once per key and cache period) blocks
        # the loop on PostgreSQL, in a thread
        if cred is None:
            raise Unauthorized("an API key is required: Authorization: Bearer msk_…")
        keys = (await _mem(request)).rt.api_keys
        info = keys.cached(cred.credentials)
        if info is None:
            info = await run_in_threadpool(keys.verify, cred.credentials)
        if scope not in info.scopes:
            raise Forbidden(f"this key has scopes {info.scopes}; the call needs {scope!r}")
        return info

    return check


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _is_deployment_admin(request: Request, token: str) -> bool:
    wanted: bytes | None = request.app.state.admin_digest
    return wanted is not None and hmac.compare_digest(_digest(token), wanted)


async def _deployment_admin(
    request: Request,
    cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """The deployment admin key, or 401 (not a key) / 403 (a tenant's key, or the feature
    is off): a tenant's key, even with ``admin``, never reaches another tenant."""
    if cred is None:
        raise Unauthorized("an API key is required: Authorization: Bearer <admin key>")
    if _is_deployment_admin(request, cred.credentials):
        return
    keys = (await _mem(request)).rt.api_keys
    info = keys.cached(cred.credentials)
    if info is None:  # 401 when it is no key at all
        info = await run_in_threadpool(keys.verify, cred.credentials)
    off = request.app.state.admin_digest is None
    raise Forbidden(
        "tenant admin over REST is off: set MEMSTRATA_ADMIN_API_KEY on the service"
        if off
        else f"a key of tenant {info.tenant_id!r} cannot manage tenants: use the admin key"
    )


async def _admin_or_tenant_key(
    request: Request,
    cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKeyInfo | None:
    """None for the deployment admin key, else a tenant key with the ``admin`` scope."""
    if cred is not None and _is_deployment_admin(request, cred.credentials):
        return None
    return await _key_with("admin")(request, cred)


Mem = Annotated[Embedded, Depends(_mem)]
Read = Annotated[ApiKeyInfo, Depends(_key_with("read"))]
Write = Annotated[ApiKeyInfo, Depends(_key_with("write"))]
Admin = Annotated[ApiKeyInfo, Depends(_key_with("admin"))]
Id = Annotated[str | None, Query(min_length=1, max_length=128)]
UserQ = Annotated[str, Query(min_length=1, max_length=128)]
TenantPath = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")]
router = APIRouter()


@router.post("/v1/turns", response_model=TurnReceipt, tags=["memory"])
async def record_turn(body: TurnIn, key: Write, m: Mem) -> TurnReceipt:
    """Record a finished turn: durable in L0 and queued for extraction on return."""
    return await run_in_threadpool(m.record_turn, body, body.messages, tenant=key.tenant_id)


@router.post("/v1/recall", response_model=RecallResult, tags=["memory"])
async def recall(body: RecallIn, key: Read, m: Mem) -> RecallResult:
    """The memory block to inject before a model call."""
    return await run_in_threadpool(m.recall, body, tenant=key.tenant_id)


@router.get("/v1/memories", response_model=list[MemoryView], tags=["memory"])
async def memories(
    key: Read,
    m: Mem,
    user_id: UserQ,
    session_id: Id = None,
    task_id: Id = None,
    entity: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    type: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[MemoryView]:
    """A user's STM items, newest first (one of session, task, entity, type)."""
    return await run_in_threadpool(
        m.inspect, user_id, session_id=session_id, task_id=task_id, entity=entity,
        memory_type=type, limit=limit, tenant=key.tenant_id,
    )  # fmt: skip


@router.get("/v1/cards", response_model=list[CardView], tags=["memory"])
async def long_term_cards(
    key: Read,
    m: Mem,
    user_id: UserQ,
    type: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    superseded: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[CardView]:
    """A user's long-term cards, most recently changed first (``superseded``: those
    merged away, replaced or retracted too)."""
    return await run_in_threadpool(
        m.cards, user_id, memory_type=type, superseded=superseded, limit=limit,
        tenant=key.tenant_id,
    )  # fmt: skip


@router.get("/v1/decisions", response_model=list[WriteDecision], tags=["memory"])
async def decisions(
    key: Read, m: Mem, user_id: UserQ, session_id: UserQ, verdict: Verdict | None = None
) -> list[WriteDecision]:
    """Why each candidate of a session was stored or refused."""
    return await run_in_threadpool(m.explain, user_id, session_id, verdict, tenant=key.tenant_id)


@router.delete("/v1/users/{user_id:path}", response_model=EraseResult, tags=["memory"])
async def erase(user_id: str, key: Admin, m: Mem, dry_run: bool = False) -> EraseResult:
    """Remove one user's data from every layer (``dry_run``: only count it)."""
    return await run_in_threadpool(m.erase, _path_id(user_id), dry_run=dry_run,
                                   tenant=key.tenant_id)  # fmt: skip


DeploymentAdmin = Depends(_deployment_admin)


@router.post("/v1/tenants", response_model=TenantInfo, status_code=201, tags=["tenants"],
             dependencies=[DeploymentAdmin])  # fmt: skip
def create_tenant(body: TenantIn, m: Mem) -> TenantInfo:
    """Create a tenant (409 if it exists); then make its API key below."""
    return m.rt.owners.create_tenant(body.tenant_id, name=body.name)


@router.get("/v1/tenants", response_model=list[TenantInfo], tags=["tenants"])
def tenants(
    key: Annotated[ApiKeyInfo | None, Depends(_admin_or_tenant_key)], m: Mem
) -> list[TenantInfo]:
    """Every tenant for the admin key; a tenant's key sees its own tenant only."""
    if key is None:
        return m.rt.owners.list_tenants()
    return [m.rt.owners.get_tenant(key.tenant_id)]


@router.post("/v1/tenants/{tenant_id}/apikeys", response_model=NewApiKey, status_code=201,
             tags=["tenants"], dependencies=[DeploymentAdmin])  # fmt: skip
def create_api_key(tenant_id: TenantPath, body: ApiKeyIn, m: Mem) -> NewApiKey:
    """A new key of the tenant: ``secret`` is shown in this answer only (a hash is kept)."""
    return m.rt.api_keys.create(tenant_id, name=body.name, scopes=list(body.scopes))


@router.get("/v1/admin/users", response_model=list[UserInfo], tags=["admin"])
def users(key: Admin, m: Mem) -> list[UserInfo]:
    """The users of the key's tenant."""
    return m.rt.owners.list_users(key.tenant_id)


@router.post("/v1/admin/users", response_model=UserInfo, status_code=201, tags=["admin"])
def create_user(body: UserIn, key: Admin, m: Mem) -> UserInfo:
    """Register a user (``record_turn`` provisions unknown users by default)."""
    return m.rt.owners.create_user(
        key.tenant_id, user_key(body.user_id), display_name=body.display_name
    )


@router.get("/v1/admin/users/{user_id:path}", response_model=UserInfo, tags=["admin"])
def user(user_id: str, key: Admin, m: Mem) -> UserInfo:
    """One user of the key's tenant."""
    return m.rt.owners.get_user(key.tenant_id, user_key(_path_id(user_id)))


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, str]:
    """The process answers (no store is touched)."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"])
def readyz(m: Mem) -> dict[str, str]:
    """Redis and PostgreSQL answer; 503 otherwise."""
    try:
        m.rt.redis.ping()
    except Exception as exc:
        raise StoreUnavailable("Redis does not answer") from exc
    try:
        with m.rt.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        raise StoreUnavailable("PostgreSQL does not answer") from exc
    return {"status": "ready"}


def served_app() -> FastAPI:
    """The app ``memstrata api`` serves: :func:`create_app` on this process's runtime, then
    the collector's schedule of a server process (``core.collector``: a full collection of
    the runtime's heap, ~120k objects, took ~50 ms in the middle of whatever request it
    fell on).  Apps built for tests keep their process's schedule."""
    app = create_app()
    tune_collector(get_runtime().settings.gc_threshold)
    return app


def create_app(runtime: Runtime | None = None) -> FastAPI:
    """The ASGI app on ``runtime`` (default: the process's, built after fork by uvicorn)."""
    rt = runtime or get_runtime()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.memory = Embedded(rt, None, background_kicks=True)
        yield
        app.state.memory.close()

    app = FastAPI(
        title="memstrata",
        version=__version__,
        summary="Layered memory for LLM agents: record turns, recall memory, per tenant.",
        lifespan=lifespan,
        responses=_PROBLEMS,
    )
    admin_key = rt.settings.admin_api_key
    app.state.admin_digest = _digest(admin_key.get_secret_value()) if admin_key else None
    app.add_middleware(BodyLimit, limit=rt.settings.api_max_body_bytes)
    app.include_router(router)
    # the operator's scrape target (issue 16): memstrata's counters (the workers' too when
    # the metrics folder is shared) and the deployment's state; no key, like the health
    # routes: expose it on the internal network only (docs/OPERATIONS.md)
    app.mount("/metrics", metrics_asgi_app())
    _install_errors(app)
    return app


def _path_id(user_id: str) -> str:
    if not 1 <= len(user_id) <= 128:
        raise InvalidInput("user_id: expected 1-128 characters")
    return user_id


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(MemstrataError)
    async def typed(request: Request, exc: MemstrataError) -> JSONResponse:
        if problem_of(exc).status >= 500:
            log.error("%s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        return _problem(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in {"body", "query"})
        return _problem(InvalidInput(f"{where or 'request'}: {first.get('msg', 'invalid')}"))

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        cls: type[MemstrataError] = NotFound if exc.status_code == 404 else PermanentError
        body = problem_of(cls(str(exc.detail)))
        body.status = exc.status_code
        return JSONResponse(body.model_dump(), status_code=exc.status_code, media_type=PROBLEM)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return _problem(PermanentError("internal error"))
