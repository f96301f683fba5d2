"""The model server's HTTP protocol: uvicorn's httptools protocol, with each response's head and body given
to the socket in one write.

uvicorn writes a response's head when the app starts it and its body when the app sends it: two system
calls and, with TCP_NODELAY, two segments that wake the client twice. For an answer of a few hundred bytes
that second write was a quarter of the event loop's time under load. Here the head is held until the body
(or the response's end, for HEAD and bodiless answers) comes, then both go at once. An interim answer
(`100 Continue`) is never held: the client waits for it before it sends the body.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast


class _HeldHead:
    """A connection's transport that holds a response's head until the next write, the response's end or
    the connection's close; everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._head is not None:
            data, self._head = self._head + data, None
        elif data.startswith(b"HTTP/1.1 ") and data[9:10] != b"1" and data.endswith(b"\r\n\r\n"):
            self._head = data   # a final answer's head (status line and headers, no body yet)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def protocol_class() -> type[asyncio.Protocol] | str:
    """uvicorn's httptools protocol with the held head; "httptools" as it is where its parts are not where
    this expects them (another uvicorn), "h11" without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return "h11"
    if not all(callable(getattr(HttpToolsProtocol, name, None)) for name in ("connection_made",
                                                                               "on_response_complete")):
        return "httptools"

    class OneWriteProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(cast(asyncio.Transport, _HeldHead(transport)))

        def on_response_complete(self) -> None:
            cast(_HeldHead, self.transport).flush()   # a head with no body after it (HEAD, 204, 304)
            super().on_response_complete()

    return OneWriteProtocol
