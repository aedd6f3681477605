"""uvicorn's HTTP protocol with TCP_NODELAY set on every accepted connection.

With ``--workers N`` uvicorn binds the listening socket itself (``Config.bind_socket``)
with ``proto`` left at 0; accepted sockets inherit it, and asyncio only sets TCP_NODELAY
when ``proto`` is ``IPPROTO_TCP``.  A response goes out as two writes (headers, body), so
Nagle holds the body until the client ACKs the headers, and the client delays that ACK:
~44 ms on every keep-alive request (measured by ``memstrata bench api``: 48 ms p50 with 2
workers against 0.7 ms with 1; Kludex/uvicorn#3149, open in uvicorn 0.54).  Setting the
option per connection fixes every way of binding, the single-worker path included.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

HTTP_PROTOCOL = "memstrata.ops.api.transport:NoDelayHTTPProtocol"  # uvicorn's ``http=``


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle off on a TCP transport (a Unix socket has no such option)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in {socket.AF_INET, socket.AF_INET6}:
        with contextlib.suppress(OSError):  # the peer may already be gone
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _NoDelay(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        set_nodelay(transport)
        super().connection_made(transport)


# httptools' protocol when it is installed, else h11's: the one uvicorn's "auto" picks
NoDelayHTTPProtocol = type("NoDelayHTTPProtocol", (_NoDelay, AutoHTTPProtocol), {})
