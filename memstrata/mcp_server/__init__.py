"""memstrata over the Model Context Protocol: ``memstrata mcp`` (see :mod:`.server`).

Needs the ``mcp`` extra (``pip install 'memstrata[mcp]'``).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

from memstrata.core.settings import Settings

Transport = Literal["stdio", "http"]


def serve(settings: Settings, *, transport: Transport) -> None:
    """Run the server in the foreground until stdin closes (stdio) or SIGINT/SIGTERM (http).

    The process's runtime (``get_runtime``) holds every client; record_turn kicks the
    workers through Celery (``tasks.client.connect``, as ``memstrata.Memory`` does), so
    workers must run for what is remembered to reach recall.
    """
    import anyio
    import uvicorn

    from memstrata.core.runtime import get_runtime
    from memstrata.mcp_server.auth import ApiKeyVerifier
    from memstrata.mcp_server.port import EmbeddedMemory
    from memstrata.mcp_server.server import Owners, build_server, http_app

    # stdout is the protocol channel of the stdio transport: logs go to stderr only
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cfg = settings.mcp
    runtime = get_runtime()
    # HTTP: each request's tenant and scopes come from its key (memstrata apikey create)
    verifier = ApiKeyVerifier(runtime.api_keys) if transport == "http" else None
    runtime.warm_ltm()  # the embedder loads now, not inside the first recall's budget
    memory = EmbeddedMemory(runtime)  # the product's Embedded client; kicks through Celery
    owners = Owners(transport=transport, tenant=cfg.tenant, verifier=verifier)
    server = build_server(memory, settings=cfg, owners=owners)
    try:
        if transport == "stdio":
            anyio.run(server.run_stdio_async)
            return
        assert verifier is not None
        app = http_app(server, settings=cfg, verifier=verifier)
        config = uvicorn.Config(
            app, host=cfg.host, port=cfg.port, log_level="warning", lifespan="on",
            timeout_graceful_shutdown=5,
        )  # fmt: skip
        uvicorn.Server(config).run()
    finally:
        memory.close()


__all__ = ["Transport", "serve"]
