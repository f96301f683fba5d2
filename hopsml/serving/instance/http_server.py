"""The model server's HTTP/1.1: asyncio (uvloop where installed) and httptools' parser, calling the app once
per request with the whole body, and writing each answer, head and body, in one write.

Written for this one job rather than run under a general ASGI server: uvicorn's request cycle (the scope,
the receive and send messages, a timer per request, a head and a body written apart) cost 23 us of CPU
per request against 9 us here, for the same fixed answer, and a serving's event loop is what it spends
most on after the model. It keeps what HTTP clients rely on: keep-alive (HTTP/1.1, and 1.0 when asked), pipelined
requests answered in order, chunked bodies, `Expect: 100-continue`, HEAD, a 400 for what does not parse, a
413 as soon as a body is known to be over the limit, idle connections closed after `keep_alive_s`, and on
SIGTERM a graceful stop: no new connections, requests being answered finish (up to `grace_s`).

A client may be hostile: `Limits` bounds what one request and one instance hold, as nginx and uvicorn do. A
head over its limits gets 431 (header count, line or total size) or 414 (URL), counted as the bytes come (the
parser keeps a header whole, so the bytes are fed to it a slice at a time while a head is open); a request must
arrive whole, head and body, within `request_timeout_s` of its first byte (408), however its bytes trickle; an
idle connection's keep-alive time is not reset by stray bytes; and past `max_connections` the oldest idle
connection is closed to make room (else the one whose request has waited longest; else the newcomer gets 503).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, NamedTuple, Protocol
from urllib.parse import unquote

import httptools

log = logging.getLogger(__name__)

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_FULL = b'{"error": "this serving instance has as many connections open as it takes; try again"}'
_PIPELINE_DEPTH = 16     # parsed requests queued on one connection before it stops reading
_HEAD_SLICE = 8192       # bytes fed to the parser at a time while a head is open: the head is counted per slice
_CLOSE_GRACE_S = 5.0     # a closed connection whose client reads nothing is aborted after this long
DRAIN_IDLE_S = 1.0       # draining, a connection idle this long is closed (its client sent nothing more)


class Request(NamedTuple):
    """One whole request: the method, the path (percent-decoded, without the query) and the body (a named
    tuple: made for every request, in half the time a frozen dataclass takes); `json_length`: the
    Inference-Header-Content-Length header of KServe v2's binary tensor extension (-1 without one)."""

    method: str
    path: str
    body: bytes
    json_length: int = -1


class BinaryBody(bytes):
    """An answer's body of KServe v2's binary tensor extension: a JSON head of `json_length` bytes, then raw
    tensor bytes (sent as application/octet-stream with the Inference-Header-Content-Length header)."""

    json_length: int

    def __new__(cls, head: bytes, data: bytes) -> BinaryBody:
        body = super().__new__(cls, head + data)
        body.json_length = len(head)
        return body


Answer = tuple[int, bytes]          # status, JSON body (or a BinaryBody)
Handler = Callable[[Request], Awaitable[Answer]]


class App(Protocol):
    """What an instance serves: a model version, a canary split, several models, or a wrapper around one."""

    async def handle(self, request: Request) -> Answer: ...


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


@dataclass(frozen=True)
class Limits:
    """What one request and one instance may hold (the `serving_*` settings; defaults as nginx's and uvicorn's
    order of magnitude)."""

    max_headers: int = 100
    max_header_bytes: int = 8192
    max_url_bytes: int = 8192
    max_head_bytes: int = 65536
    request_timeout_s: float = 30.0
    max_connections: int = 1000

    def __post_init__(self) -> None:
        for name in ("max_headers", "max_header_bytes", "max_url_bytes", "max_head_bytes", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be positive, not {self.request_timeout_s!r}")


class _Server:
    """What the connections share: the handler, the limits, the clock for the Date header, the open ones."""

    def __init__(self, handler: Handler, max_body_bytes: int, keep_alive_s: float,
                 loop: asyncio.AbstractEventLoop, limits: Limits, meter: Meter | None = None) -> None:
        self.handler = handler
        self.meter = meter
        self.loop = loop   # kept: asyncio.get_running_loop() costs a getpid() system call each time
        self.max_body_bytes = max_body_bytes
        self.keep_alive_s = keep_alive_s
        self.limits = limits
        self.connections: set[_Connection] = set()
        self.stopping = False
        self.date = b""
        self.heads: dict[tuple[int, int, bool], bytes] = {}   # this second's heads: answers repeat their sizes
        self.tick()

    def tick(self) -> None:
        """Once a second: the Date header's text, and the connections idle or stalled too long closed."""
        self.date = formatdate(usegmt=True).encode()
        self.heads = {}
        now = time.monotonic()
        for connection in list(self.connections):
            connection.check(now)

    def make_room(self) -> bool:
        """At the connection cap: close the oldest idle connection, else the one whose request has waited
        longest for its bytes; False when every connection is being answered (the newcomer is refused)."""
        idle = [c for c in self.connections if c.idle()]
        if idle:
            victim = min(idle, key=lambda c: c.idle_since)
        else:
            waiting = [c for c in self.connections if c.in_message and c.running is None and not c.queue]
            if not waiting:
                return False
            victim = min(waiting, key=lambda c: c.began)
        self.connections.discard(victim)
        victim.transport.abort()
        return True

    def head(self, status: int, length: int, close: bool) -> bytes:
        key = (status, length, close)
        head = self.heads.get(key)
        if head is None:
            if len(self.heads) > 1000:
                self.heads.clear()
            head = self.heads[key] = (
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\ndate: %s\r\n%s\r\n" % (
                    status, _REASONS.get(status, b"Unknown"), length, self.date,
                    b"connection: close\r\n" if close else b""))
        return head


class Meter(Protocol):
    """What counts the requests in flight (autoscale.LoadMeter)."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


@dataclass(slots=True)
class _Parsed:
    """A parsed request waiting for its turn, or an answer the connection gives itself (a refusal)."""

    request: Request | None
    keep_alive: bool
    head_only: bool
    answer: Answer | None = None


class _Connection(asyncio.Protocol):
    """One client connection: parses requests as bytes come, answers them one at a time, in order."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made
        self.queue: deque[_Parsed] = deque()
        self.running: asyncio.Task[None] | None = None
        self.writing_paused = False
        self.reading_paused = False
        self.broken = False            # a request could not be parsed: nothing after it is read
        self.idle_since = time.monotonic()   # the connection opened or its last answer went out
        self.began = 0.0               # when the request being read began (its deadline counts from here)
        self.closing_since = 0.0
        self.in_message = False
        self.head_open = False         # a request's head is being read
        self.head_bytes = 0            # bytes fed while it was open (counted per slice: at most a slice over)
        self.header_count = 0
        self.continue_due = False      # a 100 Continue to send once the answers before it are out
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self._size = 0
        self._refused: Answer | None = None
        self._answered = False         # the refusal went out already (the request was first in line)

    # --- the transport's calls ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.server.connections) >= self.server.limits.max_connections and not self.server.make_room():
            self.broken = True
            self.transport.write(self.server.head(503, len(_FULL), True) + _FULL)
            self.transport.close()
            return
        self.server.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # an answer leaves at once, whole

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.server.meter is not None:
            for parsed in self.queue:
                if parsed.request is not None:
                    self.server.meter.end()
        self.queue.clear()

    def data_received(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            if self.in_message and not self.head_open:   # a body: fed whole (its size is counted as it comes)
                self.parser.feed_data(data)
                return
            limit = self.server.limits.max_head_bytes
            start = 0
            while start < len(data) and not self.broken:
                piece = data if start == 0 and len(data) <= _HEAD_SLICE else data[start:start + _HEAD_SLICE]
                started_open = self.head_open
                self.parser.feed_data(piece)
                start += len(piece)
                if self.head_open:
                    # a head that began inside this slice counts the whole slice: an overcount of less than one
                    # slice, so the refusal below means the head is truly over the limit
                    self.head_bytes = self.head_bytes + len(piece) if started_open else len(piece)
                    if self.head_bytes > limit + _HEAD_SLICE:
                        self._break(431, f"the request's head is over this serving's limit of {limit} bytes")
                elif self.in_message and start < len(data):   # the head ended and a body follows: fed whole
                    self.parser.feed_data(data[start:])
                    return
        except httptools.HttpParserUpgrade:
            self._break(400, "protocol upgrades are not served here: send plain HTTP/1.1 requests")
        except httptools.HttpParserError as exc:
            self._break(400, f"the request is not valid HTTP/1.1 ({exc})")

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._next()

    def idle(self) -> bool:
        return not self.in_message and self.running is None and not self.queue and not self.broken

    def check(self, now: float) -> None:
        """Close the connection when it has been idle past keep-alive, or its request is not whole within the
        deadline (408); abort it when its client has read nothing of the last answer for a while."""
        if self.transport.is_closing():
            if not self.closing_since:
                self.closing_since = now
            elif now - self.closing_since > _CLOSE_GRACE_S:
                self.transport.abort()
            return
        if self.running is not None or self.queue:
            return
        if self.in_message:
            timeout = self.server.limits.request_timeout_s
            if now - self.began > timeout:
                self._break(408, f"the request did not arrive whole within {timeout:g} s of its first byte")
        elif now - self.idle_since > self.server.keep_alive_s:
            self.transport.close()

    # --- httptools' calls -----------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.in_message = True
        self.head_open = True
        self.began = time.monotonic()
        self.head_bytes = self.header_count = 0
        self._url, self._headers, self._chunks, self._size = b"", [], [], 0
        self._refused, self._answered = None, False

    def on_url(self, url: bytes) -> None:
        if self.broken:
            return
        if len(self._url) + len(url) > self.server.limits.max_url_bytes:
            self._break(414, f"the URL is over this serving's limit of {self.server.limits.max_url_bytes} bytes; "
                             "send the inputs in the body")
            return
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.broken:
            return
        limits = self.server.limits
        self.header_count += 1
        if self.header_count > limits.max_headers:
            self._break(431, f"the request has more than this serving's limit of {limits.max_headers} headers")
        elif len(name) + len(value) > limits.max_header_bytes:
            self._break(431, f"the header {name[:40].decode('latin-1')!r} is over this serving's limit of "
                             f"{limits.max_header_bytes} bytes")
        else:
            self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_open = False
        if self.broken:
            return
        limit = self.server.max_body_bytes
        length, expect = None, False
        for name, value in self._headers:
            if name == b"content-length" and value.strip().isdigit():
                length = int(value)
            elif name == b"expect":
                expect = value.strip().lower() == b"100-continue"
        if length is not None and length > limit:
            message = f"the body has {length} bytes, over this serving's limit of {limit}; send fewer rows per request"
            if expect:   # the client waits for a word before it sends the body: the refusal, then close
                self._break(413, message)
            else:
                self._refuse(message)
        elif expect:
            if self._first_in_line():
                self.transport.write(_CONTINUE)
            else:
                self.continue_due = True

    def on_body(self, body: bytes) -> None:
        if self._refused is not None or self.broken:
            return
        self._size += len(body)
        if self._size > self.server.max_body_bytes:
            self._chunks = []
            self._refuse(f"the body is over this serving's limit of {self.server.max_body_bytes} bytes; send "
                         "fewer rows per request")
        else:
            self._chunks.append(body)

    def on_message_complete(self) -> None:
        self.in_message = False
        if self.broken:
            return
        method = self.parser.get_method().decode("latin-1")
        keep_alive = bool(self.parser.should_keep_alive())
        if self._refused is not None:
            if not self._answered:
                self.queue.append(_Parsed(None, keep_alive, method == "HEAD", self._refused))
            elif not keep_alive:   # refused at once; now that its body is read, the connection can end
                self.transport.close()
        else:
            body = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
            request = Request(method, _path(self._url), body)
            if method == "POST":   # a binary v2 request names the length of its JSON head
                for name, value in self._headers:
                    if name == b"inference-header-content-length":
                        request = request._replace(json_length=_length(value))
            self.queue.append(_Parsed(request, keep_alive, method == "HEAD"))
            if self.server.meter is not None:
                self.server.meter.begin()
        self._chunks = []
        if len(self.queue) >= _PIPELINE_DEPTH and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._next()

    # --- answering ------------------------------------------------------------------------------------
    def _first_in_line(self) -> bool:
        return self.running is None and not self.queue

    def _refuse(self, message: str) -> None:
        """A 413: at once when nothing is answered before it (the rest of the body is read and dropped)."""
        self._refused = (413, error_body(message))
        if self._first_in_line():
            self._write(413, self._refused[1], close=False, head_only=self.parser.get_method() == b"HEAD")
            self._answered = True

    def _break(self, status: int, message: str) -> None:
        """The bytes are not HTTP (or over a limit): answer after what is queued, then close; nothing more is
        read, and what was gathered of the request is let go."""
        if self.broken:
            return
        self.broken = True
        self.head_open = False
        self._url, self._headers, self._chunks = b"", [], []
        self.queue.append(_Parsed(None, False, False, (status, error_body(message))))
        self._next()

    def _next(self) -> None:
        while self.queue and self.running is None and not self.writing_paused:
            parsed = self.queue.popleft()
            if parsed.request is None:
                assert parsed.answer is not None
                self._write(*parsed.answer, close=not parsed.keep_alive, head_only=parsed.head_only)
            else:
                self.running = self.server.loop.create_task(self._answer(parsed))
        if self.running is None and not self.queue:
            if self.continue_due:
                self.continue_due = False
                self.transport.write(_CONTINUE)
            if self.reading_paused:
                self.reading_paused = False
                self.transport.resume_reading()

    async def _answer(self, parsed: _Parsed) -> None:
        assert parsed.request is not None
        try:
            status, body = await self.server.handler(parsed.request)
        except Exception as exc:  # the handler answers its own failures; this is the last resort
            log.exception("%s %s failed", parsed.request.method, parsed.request.path)
            status, body = 500, error_body(f"the server failed: {type(exc).__name__}: {exc}")
        if self.server.meter is not None:
            self.server.meter.end()
        self.running = None
        self._write(status, body, close=not parsed.keep_alive, head_only=parsed.head_only)
        self._next()

    def _write(self, status: int, body: bytes, close: bool, head_only: bool) -> None:
        if self.transport.is_closing():
            return
        close = close or self.server.stopping
        self.idle_since = time.monotonic()   # keep-alive counts from the answer, not from the request
        head = self.server.head(status, len(body), close)
        if type(body) is BinaryBody:
            head = head.replace(b"content-type: application/json", b"content-type: application/octet-stream\r\n"
                                b"inference-header-content-length: %d" % body.json_length, 1)
        self.transport.write(head if head_only else head + body)
        if close:
            self.transport.close()


def _length(value: bytes) -> int:
    """A header's whole number, -1 when it is not one (the app says what is wrong)."""
    return int(value) if value.strip().isdigit() else -2


def _path(url: bytes) -> str:
    if not url.startswith(b"/") and url != b"*":   # absolute-form, as sent through a proxy
        try:
            url = httptools.parse_url(url).path or b"/"
        except httptools.HttpParserInvalidURLError:
            pass
    path = url.split(b"?", 1)[0].decode("latin-1")
    return unquote(path) if "%" in path else path


async def serve(handler: Handler, sock: socket.socket, max_body_bytes: int, on_ready: Callable[[], Any] | None = None,
                keep_alive_s: float = 5.0, grace_s: float = 5.0, stop: asyncio.Event | None = None,
                limits: Limits | None = None, meter: Meter | None = None) -> None:
    """Answer on `sock` (bound and listening) until SIGTERM or SIGINT (or `stop` is set), then stop
    gracefully: no new connections, idle ones closed, the requests being answered given `grace_s`. A `meter`
    is told when each request has arrived whole and when it is answered (the load an autoscaler reads: a request
    waiting behind a busy model counts, as it does at Knative's queue proxy).

    SIGUSR1 drains instead (an instance scaled in while its siblings serve on): no new connections, and each open
    one is answered until its next answer (sent with `connection: close`, so its client reconnects to a sibling) or
    until it has been idle for DRAIN_IDLE_S: a client that keeps sending loses no request."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    draining = False

    def drain() -> None:
        nonlocal draining
        draining = True
        stop.set()

    signals = []
    for signum, action in ((signal.SIGTERM, stop.set), (signal.SIGINT, stop.set), (signal.SIGUSR1, drain)):
        try:
            loop.add_signal_handler(signum, action)
            signals.append(signum)
        except (RuntimeError, ValueError):   # not the main thread: `stop` alone stops it
            pass
    state = _Server(handler, max_body_bytes, keep_alive_s, loop, limits or Limits(), meter)
    listener = await loop.create_server(lambda: _Connection(state), sock=sock, backlog=2048)
    if on_ready is not None:
        on_ready()

    async def ticking() -> None:
        while True:
            await asyncio.sleep(1.0)
            state.tick()

    ticker = loop.create_task(ticking())
    try:
        await stop.wait()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        ticker.cancel()
        listener.close()
        state.stopping = True   # answers from now on close their connection
        deadline = loop.time() + grace_s + (DRAIN_IDLE_S if draining else 0.0)
        while True:
            now = time.monotonic()
            busy = [c for c in state.connections if c.running is not None or c.queue or
                    (draining and (c.in_message or now - c.idle_since < DRAIN_IDLE_S))]
            for connection in list(state.connections):
                if connection not in busy:
                    connection.transport.close()
            if not busy or loop.time() >= deadline:
                break
            await asyncio.sleep(0.02)
        for connection in list(state.connections):
            connection.transport.abort()
        if busy:
            log.warning("stopped with %d connections still being answered after %.0f s", len(busy), grace_s)


def run(handler: Handler, sock: socket.socket, max_body_bytes: int, on_ready: Callable[[], Any] | None = None,
        **options: Any) -> None:
    """`serve` on a new event loop (uvloop's when installed), returning once it has stopped."""
    main = serve(handler, sock, max_body_bytes, on_ready, **options)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
