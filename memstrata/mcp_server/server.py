"""``memstrata mcp``: memstrata as a Model Context Protocol server (the official SDK).

Tools (typed inputs, JSON Schema from pydantic, structured results):

* ``remember``: record a finished turn (or one fact, as a one-message user turn); it is
  durable in L0 and queued for the workers on return, extracted a moment later;
* ``recall``: the memory block to inject for a query, with every item's id and layer
  (``as_of``: as memory stood at that moment);
* ``forget``: retract one item (an STM item is deleted, an LTM card superseded) or, with
  no ``memory_id``, erase the user from every layer (``dry_run`` only counts);
* ``explain``: the write decisions of a session (or of one turn): why each candidate was
  stored or refused.

Resource templates ``memstrata://{tenant}/{user}/stm``: the user's current STM items;
``memstrata://{tenant}/{user}/ltm``: their active long-term cards (episodes, session
summaries, merged and entity cards).

User ids are external ids (emails, ``user:42``, ``张三``), mapped to key parts by
:func:`memstrata.core.ids.user_key` in the product client the tools call
(:mod:`.port`); in the resource URI they are percent-encoded (the SDK's template match
decodes them once, before mapping).

**Owner scoping.**  No tool takes a tenant.  Over stdio the tenant is the server's
(``--tenant`` or ``MEMSTRATA_MCP__TENANT``): one local user, one process.  Over
Streamable HTTP every request carries ``Authorization: Bearer <key>``; the key's tenant
(:mod:`memstrata.mcp_server.auth`) scopes every read and write of the call, the HTTP
layer refuses a request without a valid key (401) before the SDK sees it, and each tool
checks the key of its own message again, with the scope it needs (``read`` or
``write``).

**Errors** reach the client as MCP tool errors (``isError``) of one line, never a
traceback: bad input names the field, an unknown user or item says so, a store outage
says which store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memstrata.core.errors import MemstrataError, NotFound, StoreUnavailable
from memstrata.core.ids import validate_id
from memstrata.core.models.candidate import Verdict
from memstrata.core.recall.service import MAX_QUERY_CHARS
from memstrata.core.redact import redact
from memstrata.core.settings import McpSettings
from memstrata.mcp_server.auth import MAX_KEY_CHARS, Caller, KeyVerifier
from memstrata.mcp_server.port import MemoryPort

log = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
T = TypeVar("T")

ID_CHARS = 128
MAX_MESSAGES = 1000  # the schema's bound; MEMSTRATA_MAX_TURN_MESSAGES is the real one
MAX_CONTENT_CHARS = 1024 * 1024  # likewise; MEMSTRATA_MAX_MESSAGE_CHARS
STM_URI = "memstrata://{tenant}/{user}/stm"
LTM_URI = "memstrata://{tenant}/{user}/ltm"

UserId = Annotated[
    str, Field(min_length=1, max_length=ID_CHARS, description="the user's id (e.g. an email)")
]
SessionId = Annotated[str, Field(min_length=1, max_length=ID_CHARS, description="session id")]
OptId = Annotated[str | None, Field(max_length=ID_CHARS)]


# ---------------------------------------------------------------------------- models


class Message(BaseModel):
    """One message of a turn (tool calls are not taken over MCP: their text is enough)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "tool"]
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    name: str | None = Field(None, max_length=256)


class Remembered(BaseModel):
    turn_id: str
    message_ids: list[str]
    already_recorded: bool
    note: str = "durable and queued; extracted into memory by a worker within seconds"


class RecalledItem(BaseModel):
    memory_id: str
    layer: str  # redis_stm | ltm | raw_history
    memory_type: str
    text: str
    message_ids: list[str]  # the source messages (``<turn_id>.<n>``)
    at: float | None = None


class Recalled(BaseModel):
    text: str  # the block to put into the prompt as-is
    items: list[RecalledItem]
    degraded: dict[str, str]  # layers that did not answer, and why


class Forgot(BaseModel):
    action: Literal["retracted", "erased", "would_erase"]
    memory_id: str | None = None
    layer: str | None = None
    changed: bool | None = None
    counts: dict[str, int] = Field(default_factory=dict)  # per layer, for a user erase


class Decision(BaseModel):
    decision_id: str
    verdict: str
    reason: str
    score: float
    threshold: float
    memory_type: str
    summary: str
    memory_id: str | None
    message_ids: list[str]
    at: float


class Explained(BaseModel):
    session_id: str
    decisions: list[Decision]


class StmItem(BaseModel):
    memory_id: str
    memory_type: str
    summary: str
    session_id: str
    task_id: str | None
    importance: float
    updated_at: float
    expires_at: float


# ---------------------------------------------------------------------------- errors

_MODEL_PREFIX = re.compile(r"^[A-Z][A-Za-z]+\.(?=[a-z_]+: )")
_PYDANTIC_HEAD = re.compile(r"^\d+ validation errors? for \S+$")


def one_line(text: str, limit: int = 500) -> str:
    """A failure as one line: a pydantic report becomes ``<field>: <problem>``."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):  # "Error executing tool x: 1 validation error for ..."
        head, _, rest = ln.rpartition(": ")
        if _PYDANTIC_HEAD.match(rest.strip()) and i + 2 < len(lines):
            problem = lines[i + 2].strip().split(" [type=", 1)[0]
            lines = [f"{head}: invalid arguments: {lines[i + 1].strip()}: {problem}"]
            break
    flat = " ".join(" ".join(lines).split())
    return redact(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _failure(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False, include_input=False)[0]
        cause = first.get("ctx", {}).get("error")
        what = str(cause) if isinstance(cause, MemstrataError) else first["msg"]
        return f"{'.'.join(str(p) for p in first['loc']) or exc.title}: {what}"
    if isinstance(exc, StoreUnavailable):
        return f"memory store unavailable, try again shortly ({exc})"
    return _MODEL_PREFIX.sub("", str(exc), count=1)  # "RecallRequest.top_k: ..." → "top_k: ..."


@contextlib.contextmanager
def _as_tool_error(kind: type[ToolError] | type[ResourceError] = ToolError) -> Iterator[None]:
    """Typed memstrata errors (and bad input) become one-line MCP errors, nothing else."""
    try:
        yield
    except (MemstrataError, ValidationError) as exc:
        raise kind(one_line(_failure(exc))) from exc


class OneLineErrors(ServerMiddleware[Any]):
    """Every failed tool call answers with one line (the SDK's argument check is multi-line)."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if isinstance(result, CallToolResult) and result.is_error:
            texts = [c.text for c in result.content if isinstance(c, TextContent)]
            result = result.model_copy(
                update={"content": [TextContent(type="text", text=one_line(" ".join(texts)))]}
            )
        elif isinstance(result, dict) and result.get("isError") is True:
            parts = result.get("content") or []
            texts = [str(p.get("text", "")) for p in parts if isinstance(p, dict)]
            result = {**result, "content": [{"type": "text", "text": one_line(" ".join(texts))}]}
        return result


# ---------------------------------------------------------------------------- callers


class Owners:
    """Who a tool call acts for: the stdio tenant, or the caller of the HTTP key."""

    def __init__(self, *, transport: Transport, tenant: str, verifier: KeyVerifier | None) -> None:
        if transport == "http" and verifier is None:
            raise ValueError("the HTTP transport needs a key verifier (the tenants' API keys)")
        self.transport = transport
        self.local = Caller(validate_id(tenant, kind="tenant"), frozenset({"read", "write"}))
        self.verifier = verifier

    def caller(self, headers: Mapping[str, str] | None, scope: str) -> Caller:
        """The verified caller of one message, holding ``scope``; else a one-line error."""
        if self.transport == "stdio":
            return self.local
        assert self.verifier is not None
        key = bearer_key(headers)
        with _as_tool_error():  # a PostgreSQL outage is one line, not "unauthorized"
            caller = self.verifier.verify(key) if key else None
        if caller is None:
            raise ToolError("unauthorized: a valid API key is required (Authorization: Bearer)")
        if scope not in caller.scopes:
            raise ToolError(f"forbidden: this API key lacks the {scope!r} scope")
        return caller


def bearer_key(headers: Mapping[str, str] | None) -> str | None:
    if not headers:
        return None
    raw = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
    if raw is None or len(raw) > MAX_KEY_CHARS + 7:
        return None
    scheme, _, key = raw.partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


class BearerKeyAuth:
    """ASGI middleware: every HTTP request but ``/healthz`` needs a valid bearer key (401)."""

    def __init__(self, app: ASGIApp, verifier: KeyVerifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/healthz":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        key = bearer_key(headers)
        verify: Callable[[str], Caller | None] = self.verifier.verify
        try:
            caller = await anyio.to_thread.run_sync(verify, key) if key else None
        except StoreUnavailable as exc:  # the keys live in PostgreSQL: try again, not 401
            log.warning("API key check failed: %s", redact(str(exc)))
            down = JSONResponse(
                {"error": "unavailable", "detail": "the key store is unavailable, try again"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
            await down(scope, receive, send)
            return
        if caller is None:
            reply: Response = JSONResponse(
                {"error": "unauthorized", "detail": "a valid API key is required"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="memstrata"'},
            )
            await reply(scope, receive, send)
            return
        await self.app(scope, receive, send)


# ---------------------------------------------------------------------------- server


def _run(fn: Callable[[], T]) -> T:
    with _as_tool_error():
        return fn()


class MemoryTools:
    """The tools and the resource, each scoped by :class:`Owners` (registered by
    :func:`build_server`; the docstrings are what the client's model reads)."""

    def __init__(self, memory: MemoryPort, *, settings: McpSettings, owners: Owners) -> None:
        self.memory = memory
        self.settings = settings
        self.owners = owners

    def remember(
        self,
        ctx: Context,
        user_id: UserId,
        session_id: SessionId,
        messages: Annotated[
            list[Message] | None,
            Field(max_length=MAX_MESSAGES, description="the turn's messages, in order"),
        ] = None,
        fact: Annotated[
            str | None, Field(description="instead of messages: one thing the user said")
        ] = None,
        task_id: OptId = None,
        turn_id: Annotated[
            str | None, Field(max_length=ID_CHARS, description="retry-safe: same id, one turn")
        ] = None,
    ) -> Remembered:
        """Record a finished turn (or one fact) for the user; extraction follows on a worker."""
        caller = self.owners.caller(ctx.headers, "write")
        turn = self._turn(messages, fact)
        receipt = _run(lambda: self.memory.record_turn(
            tenant_id=caller.tenant_id, user_id=user_id, session_id=session_id,
            messages=turn, task_id=task_id, turn_id=turn_id,
        ))  # fmt: skip
        return Remembered(
            turn_id=receipt.turn_id,
            message_ids=receipt.message_ids,
            already_recorded=receipt.already_recorded,
        )

    def _turn(self, messages: list[Message] | None, fact: str | None) -> list[dict[str, Any]]:
        if (messages is None) == (fact is None):
            raise ToolError("give either messages or fact, not both and not neither")
        if fact is not None:
            if not fact.strip():
                raise ToolError("fact: must not be empty")
            if len(fact) > self.settings.max_fact_chars:
                raise ToolError(f"fact: longer than {self.settings.max_fact_chars} characters")
            return [{"role": "user", "content": fact}]
        if not messages:
            raise ToolError("messages: a turn needs at least one message")
        return [m.model_dump(exclude_none=True) for m in messages]

    def recall(
        self,
        ctx: Context,
        user_id: UserId,
        session_id: SessionId,
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)],
        task_id: OptId = None,
        top_k: Annotated[int, Field(ge=1, le=100)] = 8,
        token_budget: Annotated[
            int,
            Field(
                ge=32,
                le=32_000,
                description="cl100k tokens of the returned text as printed, the profile "
                "block included (a profile alone over it is returned whole)",
            ),
        ] = 600,
        as_of: Annotated[
            float | None,
            Field(description="memory as it stood at this time (seconds since the epoch)"),
        ] = None,
    ) -> Recalled:
        """What memory holds for this query: the block to inject, and each item's source."""
        caller = self.owners.caller(ctx.headers, "read")
        out = _run(lambda: self.memory.recall(
            query, tenant_id=caller.tenant_id, user_id=user_id, session_id=session_id,
            task_id=task_id, top_k=top_k, token_budget=token_budget, as_of=as_of,
        ))  # fmt: skip
        m = out.memory
        items = [
            RecalledItem(
                memory_id=ln.memory_id,
                layer=ln.source_type.value,
                memory_type=ln.memory_type,
                text=ln.text,
                message_ids=list(ln.message_ids),
                at=ln.at,
            )
            for ln in (*m.short_term, *m.long_term, *m.history)
        ]
        return Recalled(text=out.text, items=items, degraded=dict(out.degraded))

    def forget(
        self,
        ctx: Context,
        user_id: UserId,
        memory_id: Annotated[
            str | None,
            Field(max_length=ID_CHARS, description="one item (from recall); none: the user"),
        ] = None,
        reason: Annotated[str, Field(min_length=1, max_length=500)] = "forgotten over MCP",
        dry_run: Annotated[bool, Field(description="user erase: only count")] = False,
    ) -> Forgot:
        """Retract one memory item, or (no memory_id) erase the user from every layer."""
        caller = self.owners.caller(ctx.headers, "write")
        if memory_id is not None:
            if dry_run:
                raise ToolError("dry_run: only for erasing a user (no memory_id)")
            done = _run(lambda: self.memory.retract(
                tenant_id=caller.tenant_id, user_id=user_id, memory_id=memory_id, reason=reason,
            ))  # fmt: skip
            return Forgot(
                action="retracted", memory_id=done.memory_id, layer=done.layer,
                changed=done.changed,
            )  # fmt: skip
        report = _run(lambda: self.memory.erase(
            tenant_id=caller.tenant_id, user_id=user_id, dry_run=dry_run
        ))  # fmt: skip
        counts = report.found if dry_run else report.removed
        return Forgot(action="would_erase" if dry_run else "erased", counts=dict(counts))

    def explain(
        self,
        ctx: Context,
        user_id: UserId,
        session_id: SessionId,
        turn_id: Annotated[
            str | None, Field(max_length=ID_CHARS, description="only this turn's decisions")
        ] = None,
        verdict: Literal["written", "refused"] | None = None,
    ) -> Explained:
        """Why each candidate of a session (or turn) was stored in memory or refused."""
        caller = self.owners.caller(ctx.headers, "read")
        decisions = _run(lambda: self.memory.explain(
            tenant_id=caller.tenant_id, user_id=user_id, session_id=session_id
        ))  # fmt: skip
        if turn_id is not None:  # MCP turns have the default message ids <turn_id>.<n>
            prefix = _run(lambda: validate_id(turn_id, kind="turn_id")) + "."
            decisions = [d for d in decisions if any(m.startswith(prefix) for m in d.message_ids)]
        if verdict is not None:
            want = Verdict.WRITTEN if verdict == "written" else Verdict.REFUSED
            decisions = [d for d in decisions if d.verdict is want]
        out = [
            Decision(
                decision_id=d.decision_id,
                verdict=d.verdict.value,
                reason=d.reason,
                score=d.score,
                threshold=d.threshold,
                memory_type=d.memory_type.value,
                summary=d.summary,
                memory_id=d.memory_id,
                message_ids=list(d.message_ids),
                at=d.at,
            )
            for d in decisions
        ]
        return Explained(session_id=session_id, decisions=out)

    def _resource_owner(self, ctx: Context, tenant: str, user: str, uri: str) -> str:
        """The caller's tenant when ``tenant`` is it (the SDK percent-decoded the ids once);
        another tenant's data does not exist for the caller."""
        caller = self.owners.caller(ctx.headers, "read")
        if tenant != caller.tenant_id:
            raise NotFound(f"no resource {uri.format(tenant=tenant, user=user)}")
        return tenant

    def ltm_cards(self, tenant: str, user: str, ctx: Context) -> str:
        """The user's active long-term cards, most recently changed first."""
        with _as_tool_error(ResourceError):
            tenant_id = self._resource_owner(ctx, tenant, user, LTM_URI)
            found = self.memory.cards(
                user_id=user, tenant_id=tenant_id, limit=self.settings.stm_resource_limit
            )
        return json.dumps([c.model_dump(mode="json") for c in found], ensure_ascii=False)

    def stm_items(self, tenant: str, user: str, ctx: Context) -> str:
        """The user's current short-term memory items, newest first (ids percent-encoded)."""
        with _as_tool_error(ResourceError):
            tenant_id = self._resource_owner(ctx, tenant, user, STM_URI)
            items = self.memory.inspect(
                tenant_id=tenant_id, user_id=user, limit=self.settings.stm_resource_limit
            )
        out = [
            StmItem(
                memory_id=i.id,
                memory_type=i.memory_type.value,
                summary=i.summary,
                session_id=i.session_id,
                task_id=i.task_id,
                importance=i.importance,
                updated_at=i.updated_at,
                expires_at=i.expires_at,
            ).model_dump(mode="json")
            for i in items
        ]
        return json.dumps(out, ensure_ascii=False)


async def _healthz(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


def build_server(memory: MemoryPort, *, settings: McpSettings, owners: Owners) -> MCPServer[Any]:
    """The MCP server over ``memory``; every tool is scoped by ``owners``."""
    server: MCPServer[Any] = MCPServer(
        "memstrata",
        instructions=(
            "Layered memory for this user. Call `recall` before answering to get what is "
            "known (put its `text` into your context); call `remember` with each finished "
            "turn (or a single fact); `explain` says why something was (not) stored; "
            "`forget` retracts one item or erases the user."
        ),
        middleware=[OneLineErrors()],
    )
    tools = MemoryTools(memory, settings=settings, owners=owners)
    for fn in (tools.remember, tools.recall, tools.forget, tools.explain):
        server.tool(structured_output=True)(fn)
    server.resource(STM_URI, mime_type="application/json")(tools.stm_items)
    server.resource(LTM_URI, mime_type="application/json")(tools.ltm_cards)
    server.custom_route("/healthz", methods=["GET"])(_healthz)
    return server


def http_app(server: MCPServer[Any], *, settings: McpSettings, verifier: KeyVerifier) -> ASGIApp:
    """The Streamable HTTP app (``/mcp``), behind the bearer-key check."""
    app = server.streamable_http_app(
        max_request_body_size=settings.max_request_bytes, host=settings.host
    )
    return BearerKeyAuth(app, verifier)


__all__ = [
    "LTM_URI",
    "STM_URI",
    "BearerKeyAuth",
    "MemoryTools",
    "Owners",
    "build_server",
    "http_app",
    "one_line",
]
