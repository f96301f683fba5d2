"""The `hopsml ui` command: it serves on the port it prints (127.0.0.1 by default), stops cleanly on
SIGTERM, and says what to do when the port is wrong or taken."""

from __future__ import annotations

import http.client
import os
import socket
import urllib.request

from browser import ui_server

from hopsml import cli


def test_serves_on_a_free_port_and_stops(root, tmp_path):
    (root / "Projects" / "test" / "Experiments").mkdir(parents=True)
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT="test")
    with ui_server(env) as base:
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(base.request(base), timeout=30) as response:
            page = response.read().decode()
            assert response.status == 200 and 'href="/p/test/"' in page
            assert "script-src 'self'" in response.headers["Content-Security-Policy"]
        with urllib.request.urlopen(base.request(base + "static/ui.js"), timeout=30) as response:
            assert b"applyFilters" in response.read()


def test_a_port_out_of_range_or_taken_is_a_clear_error(root, capsys):
    assert cli.main(["ui", "--port", "70000", "--no-browser"]) == 1
    assert "--port 70000 is not a port" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert cli.main(["ui", "--port", str(taken.getsockname()[1]), "--no-browser"]) == 1
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


def test_an_invalid_project_name_is_refused(root, capsys):
    assert cli.main(["ui", "--project", "../x", "--no-browser"]) == 1
    assert "invalid project name" in capsys.readouterr().err


def _status(base: str, host: str | None) -> tuple[int, str]:
    """The status and body of GET / with this Host header (None: the header left out)."""
    netloc = base[len("http://"):].rstrip("/")
    address, port = netloc.rsplit(":", 1)
    connection = http.client.HTTPConnection(address.strip("[]"), int(port), timeout=60)
    try:
        connection.putrequest("GET", "/", skip_host=True)
        if host is not None:
            connection.putheader("Host", host)
        connection.putheader("Authorization", f"Bearer {base.token}")
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", errors="replace")
    finally:
        connection.close()


def test_only_the_host_names_it_was_started_for_are_answered(root):
    """DNS rebinding: a page on attacker.example whose name resolves to 127.0.0.1 reaches the
    server, but its requests say Host: attacker.example."""
    (root / "Projects" / "test" / "Experiments").mkdir(parents=True)
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT="test")
    with ui_server(env, args=["--allow-host", "hops.example.org", "--allow-host", "Proxy.Example.NET"]) as base:
        port = base.rstrip("/").rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "hops.example.org",
                     f"hops.example.org:{port}", "proxy.example.net:443"):
            assert _status(base, host)[0] == 200, host
        for host in ("attacker.example", f"attacker.example:{port}", f"localhost.attacker.example:{port}",
                     "127.0.0.1", f"127.0.0.1:{int(port) + 1}", None):
            status, body = _status(base, host)
            assert status in (403, 421), host
            assert "--allow-host" in body and 'href="/p/test/"' not in body, host


def test_without_allow_host_a_foreign_name_is_refused(root):
    (root / "Projects" / "test" / "Experiments").mkdir(parents=True)
    env = dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT="test")
    with ui_server(env) as base:
        assert _status(base, "hops.example.org")[0] in (403, 421)
        assert _status(base, base[len("http://"):].rstrip("/"))[0] == 200


def test_stalled_and_trickling_connections_are_closed_and_bounded_while_others_are_answered(root, monkeypatch):
    """A client that sends nothing, or a byte now and then, no longer holds a thread for ever: the head has a
    deadline from its first read (trickled bytes do not extend it), and connections past the cap get 503."""
    import threading
    import time

    from hopsml import config
    from hopsml.ui import commands, server

    (root / "Projects" / "test" / "Experiments").mkdir(parents=True)
    monkeypatch.setattr(server, "HEAD_DEADLINE_S", 1.0)
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 8)
    ui = commands._make_server(config.load(), "127.0.0.1", 0)
    threading.Thread(target=ui.serve_forever, daemon=True).start()
    port = ui.port
    try:
        trickling = socket.create_connection(("127.0.0.1", port), timeout=60)
        trickling.sendall(b"GET / HTTP/1.1\r\n")
        stalled = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(6)]
        closed_at = None
        for _ in range(600):   # a byte every 50 ms: each would reset a per-read timeout
            try:
                trickling.sendall(b"X")
                if trickling.recv(1, socket.MSG_DONTWAIT) == b"":
                    closed_at = True
                    break
            except BlockingIOError:
                pass
            except OSError:
                closed_at = True
                break
            time.sleep(0.05)
        assert closed_at, "a trickling client kept its connection"
        for sock in stalled:
            assert sock.recv(1) == b""                          # each closed by the deadline too
        crowd = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(8)]
        extra = socket.create_connection(("127.0.0.1", port), timeout=60)
        assert extra.recv(200).startswith(b"HTTP/1.1 503")      # one past the cap: answered and closed
        for sock in crowd:
            sock.close()
        for _ in range(200):
            if ui.open_connections == 0:
                break
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            assert response.status == 200                       # the view answers the others
        for sock in [trickling, *stalled, extra]:
            sock.close()
    finally:
        ui.shutdown()
        ui.server_close()
