"""``memstrata mcp``: the MCP server (stdio for a local client, Streamable HTTP with keys)."""

from __future__ import annotations

import argparse

from memstrata.ops.runtime import CliError


def _mcp(args: argparse.Namespace) -> int:
    from memstrata.core.settings import load_settings

    try:
        from memstrata.mcp_server import serve
    except ImportError as exc:  # the extra is not installed
        raise CliError(
            f"the MCP server needs the mcp extra: pip install 'memstrata[mcp]' ({exc})"
        ) from exc
    base = load_settings()
    overrides = {k: v for k, v in (("tenant", args.tenant), ("host", args.host),
                                   ("port", args.port)) if v is not None}  # fmt: skip
    settings = base.model_copy(
        update={"mcp": base.mcp.model_validate({**base.mcp.model_dump(), **overrides})}
    )
    try:
        serve(settings, transport=args.transport)
    except ValueError as exc:  # a missing or short key, a bad tenant
        raise CliError(str(exc)) from exc
    return 0


def add_mcp(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser(
        "mcp",
        help="serve memory to MCP clients (tools remember/recall/forget/explain)",
        description="Serve memory over the Model Context Protocol. stdio: for a local client "
        "(Claude Desktop, Cursor), one tenant (--tenant). http: Streamable HTTP at /mcp, "
        "every request needs Authorization: Bearer <a tenant's API key> (memstrata apikey create).",
    )
    m.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    m.add_argument("--tenant", help="stdio: the tenant of every call (MEMSTRATA_MCP__TENANT)")
    m.add_argument("--host", help="http: bind address (MEMSTRATA_MCP__HOST, 127.0.0.1)")
    m.add_argument("--port", type=int, help="http: port (MEMSTRATA_MCP__PORT, 8765)")
    m.set_defaults(func=_mcp)
