"""The model server's own HTTP/1.1 server, on a real socket with a small handler: pipelining in order,
HTTP/1.0, a 400 for what is not HTTP, a 413 before the body is sent, a 500 when the handler fails, idle
keep-alive connections closed, and a graceful stop that finishes the answer in flight."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from conftest import read_answers

from hopsml.serving.instance.http_server import Limits, Request, serve


async def handler(request: Request) -> tuple[int, bytes]:
    if request.path == "/slow":
        await asyncio.sleep(0.4)
    if request.path == "/boom":
        raise RuntimeError("the handler broke")
    return 200, json.dumps({"method": request.method, "path": request.path, "bytes": len(request.body)}).encode()


class Server:
    """`serve` on a thread of its own, stopped as SIGTERM would stop it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.ready = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        await serve(handler, self.sock, max_body_bytes=1000, on_ready=self.ready.set, keep_alive_s=0.3,
                    grace_s=5.0, stop=self.stop_event)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(10)
        assert not self.thread.is_alive()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)


@pytest.fixture
def server():
    running = Server()
    yield running
    if running.thread.is_alive():
        running.stop()


def post(path: str, body: bytes, extra: str = "", version: str = "1.1") -> bytes:
    return (f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def closed(sock: socket.socket, within_s: float = 5.0) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_pipelined_requests_are_answered_in_order_and_http10_closes(server):
    with server.connect() as sock:
        sock.sendall(post("/slow", b"{}") + b"GET /fast%20path?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                     + post("/third", b"abc"))
        answers = read_answers(sock, 3)
        assert [json.loads(body)["path"] for _, _, body in answers] == ["/slow", "/fast path", "/third"]
        assert all(status == "HTTP/1.1 200 OK" and "date" in headers for status, headers, _ in answers)
        assert json.loads(answers[2][2]) == {"method": "POST", "path": "/third", "bytes": 3}
    with server.connect() as sock:
        sock.sendall(post("/old", b"{}", version="1.0"))
        ((_, headers, _),) = read_answers(sock, 1)
        assert headers["connection"] == "close" and closed(sock)


def test_what_is_not_http_gets_a_400_and_a_failing_handler_a_500_and_the_server_goes_on(server):
    with server.connect() as sock:
        sock.sendall(b"this is not http\r\n\r\n")
        ((status, headers, body),) = read_answers(sock, 1)
        assert status.startswith("HTTP/1.1 400 ") and "not valid HTTP/1.1" in json.loads(body)["error"]
        assert headers["connection"] == "close" and closed(sock)
    with server.connect() as sock:
        sock.sendall(post("/boom", b"{}") + post("/after", b"{}"))
        (status, _, body), (after, _, _) = read_answers(sock, 2)
        assert status.startswith("HTTP/1.1 500 ") and "the handler broke" in json.loads(body)["error"]
        assert after == "HTTP/1.1 200 OK"


def test_a_body_over_the_limit_is_refused_before_it_is_sent(server):
    with server.connect() as sock:
        sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        ((status, _, body),) = read_answers(sock, 1)   # answered before any byte of the body came
        assert status.startswith("HTTP/1.1 413 ") and "limit of 1000" in json.loads(body)["error"]
        sock.sendall(b"x" * 5000 + post("/next", b"{}"))   # the body is read and dropped; the connection goes on
        ((status, _, body),) = read_answers(sock, 1)
        assert status == "HTTP/1.1 200 OK" and json.loads(body)["path"] == "/next"
    with server.connect() as sock:   # a client that waits for 100 Continue gets the refusal instead, then the end
        sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
        ((status, headers, _),) = read_answers(sock, 1)
        assert status.startswith("HTTP/1.1 413 ") and headers["connection"] == "close" and closed(sock)
    with server.connect() as sock:   # chunked: counted as it comes
        chunk = b"x" * 600
        sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 2 + b"0\r\n\r\n")
        ((status, _, body),) = read_answers(sock, 1)
        assert status.startswith("HTTP/1.1 413 ") and "over this serving's limit" in json.loads(body)["error"]


def test_an_idle_keep_alive_connection_is_closed(server):
    with server.connect() as sock:
        sock.sendall(post("/one", b"{}"))
        read_answers(sock, 1)
        started = time.monotonic()
        assert closed(sock, within_s=5.0)
        assert time.monotonic() - started >= 0.2   # not at once: after keep_alive_s (0.3 s) of silence


def test_a_graceful_stop_finishes_the_answer_in_flight_and_takes_no_new_connection(server):
    with server.connect() as sock:
        sock.sendall(post("/slow", b"{}"))
        time.sleep(0.1)
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        ((status, headers, body),) = read_answers(sock, 1)
        assert status == "HTTP/1.1 200 OK" and json.loads(body)["path"] == "/slow"
        assert headers["connection"] == "close" and closed(sock)
        stopping.join(10)
    assert server.sock.fileno() == -1   # its own listening socket closed (a freed port could be anyone's)


# --- a hostile client: limits on the head, a deadline for the whole request, a cap on connections ---------------
class LimitedServer(Server):
    """`serve` with small limits, so that each is reached with a few bytes."""

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        limits = Limits(max_headers=20, max_header_bytes=1000, max_url_bytes=2000, max_head_bytes=8000,
                        request_timeout_s=1.0, max_connections=4)
        await serve(handler, self.sock, max_body_bytes=1000, on_ready=self.ready.set, keep_alive_s=30.0,
                    grace_s=5.0, stop=self.stop_event, limits=limits)


@pytest.fixture
def limited():
    running = LimitedServer()
    yield running
    if running.thread.is_alive():
        running.stop()


def refused_with(server: Server, raw: bytes) -> tuple[str, str]:
    """Send `raw` (as far as the server reads it) and return the answer's status line and error."""
    with server.connect() as sock:
        try:
            sock.sendall(raw)
        except OSError:   # the server closed while the rest was being sent: the answer is already there
            pass
        ((status, headers, body),) = read_answers(sock, 1)
        assert headers["connection"] == "close" and closed(sock)
        return status, json.loads(body)["error"]


def test_heads_over_the_limits_get_431_or_414_and_the_connection_closes(limited):
    many = b"GET /a HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(21)) + b"\r\n"
    assert refused_with(limited, many)[0].startswith("HTTP/1.1 431 ")
    long_line = b"GET /a HTTP/1.1\r\nX-Big: " + b"v" * 1200 + b"\r\n\r\n"
    status, error = refused_with(limited, long_line)
    assert status.startswith("HTTP/1.1 431 ") and "x-big" in error.lower()
    long_url = b"GET /" + b"q" * 3000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    assert refused_with(limited, long_url)[0].startswith("HTTP/1.1 414 ")
    big_head = b"GET /a HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 900) for i in range(19))
    status, error = refused_with(limited, big_head + b"\r\n")
    assert status.startswith("HTTP/1.1 431 ") and "head" in error
    huge = b"GET /a HTTP/1.1\r\nX-Big: " + b"v" * (32 << 20)   # never finished: refused as it comes
    assert refused_with(limited, huge)[0].startswith("HTTP/1.1 431 ")
    with limited.connect() as sock:   # the limits leave ordinary requests alone
        sock.sendall(post("/fine", b"{}", extra="X-A: " + "v" * 900 + "\r\n"))
        assert read_answers(sock, 1)[0][0] == "HTTP/1.1 200 OK"


def test_a_request_that_trickles_in_gets_408_at_its_deadline_however_its_bytes_come(limited):
    with limited.connect() as sock:
        started = time.monotonic()
        sock.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        while time.monotonic() - started < 10 and b"\r\n\r\n" not in answer:
            try:
                sock.sendall(b"X")   # a byte at a time: each used to restart the clock
            except OSError:
                break
            sock.settimeout(0.2)
            try:
                answer += sock.recv(4096)
            except TimeoutError:
                pass
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert time.monotonic() - started < 9   # the 1 s deadline, not each byte's, closed it
    with limited.connect() as sock:   # stray bytes between requests do not keep an idle connection either
        sock.sendall(post("/one", b"{}"))
        read_answers(sock, 1)


def test_past_the_connection_cap_the_oldest_idle_connection_makes_room(limited):
    idle = [limited.connect() for _ in range(4)]
    for sock in idle:   # each answered once, oldest first: then idle
        sock.sendall(post("/one", b"{}"))
        read_answers(sock, 1)
    with limited.connect() as newcomer:
        newcomer.sendall(post("/new", b"{}"))
        assert read_answers(newcomer, 1)[0][0] == "HTTP/1.1 200 OK"
        assert closed(idle[0])   # the oldest idle one was closed for it
        idle[1].sendall(post("/two", b"{}"))   # the others are still served
        assert read_answers(idle[1], 1)[0][0] == "HTTP/1.1 200 OK"
    for sock in idle:
        sock.close()
