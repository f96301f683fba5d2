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

from hopsml.serving.http_server import Request, serve


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
