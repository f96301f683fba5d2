"""Who may read `hopsml ui` on a shared host: a real server in a subprocess, asked with and without the token it
printed, and by a second local user (created here when the tests run as root) who holds the token and still gets
nothing, nor can they take the view's connection slots."""

from __future__ import annotations

import http.client
import os
import pwd
import shutil
import subprocess
import uuid

import pytest
from browser import ui_server

PROJECT = "test"


def _get(base, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    host, port = base[len("http://"):].rstrip("/").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    response.body = response.read().decode("utf-8", errors="replace")   # type: ignore[attr-defined]
    connection.close()
    return response


@pytest.fixture
def env(root):
    (root / "Projects" / PROJECT / "Experiments").mkdir(parents=True)
    return dict(os.environ, HOPSML_ROOT=str(root), HOPSML_PROJECT=PROJECT)


def test_every_page_needs_the_printed_token(env):
    with ui_server(env) as base:
        for path in ("/", f"/p/{PROJECT}/", f"/p/{PROJECT}/jobs/", "/static/ui.js", "/no/such/page"):
            refused = _get(base, path)
            assert refused.status == 403, path
            assert "token" in refused.body and 'href="/p/' not in refused.body, path
        wrong = _get(base, "/", {"Authorization": "Bearer " + "x" * len(base.token)})
        assert wrong.status == 403
        assert _get(base, f"/?token={base.token[:-1]}").status == 403
        assert _get(base, "/", base.headers).status == 200
        # the printed address: the token becomes a cookie and the browser goes on to the address without it
        opened = _get(base, f"/p/{PROJECT}/?token={base.token}")
        assert opened.status == 303 and opened.headers["Location"].endswith(f"/p/{PROJECT}/")
        cookie = opened.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        page = _get(base, f"/p/{PROJECT}/", {"Cookie": cookie.split(";", 1)[0]})
        assert page.status == 200 and "Experiments" in page.body


def test_the_token_can_be_given_and_must_be_long(env):
    token = uuid.uuid4().hex
    with ui_server({**env, "HOPSML_UI_TOKEN": token}) as base:
        assert base.token == token and _get(base, "/", base.headers).status == 200
    short = subprocess.run(["python", "-m", "hopsml.cli", "ui", "--port", "0", "--no-browser"],
                           env={**env, "HOPSML_UI_TOKEN": "short"}, capture_output=True, text=True, timeout=120)
    assert short.returncode == 1 and "at least 16" in short.stderr


OTHER_USER = """
import socket, sys, time
port, token = int(sys.argv[1]), sys.argv[2]
held = []
for _ in range(80):   # more than the view's 64 slots, held open
    held.append(socket.create_connection(("127.0.0.1", port), timeout=30))
with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
    s.sendall(f"GET / HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nAuthorization: Bearer {token}\\r\\n\\r\\n".encode())
    answer = b""
    while chunk := s.recv(4096):
        answer += chunk
print(answer.decode(errors="replace").splitlines()[0])
print(answer.decode(errors="replace").splitlines()[-1])
sys.stdout.flush()
time.sleep(float(sys.argv[3]))
"""


def test_another_local_user_is_refused_even_with_the_token(env):
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second local user (useradd) and run as them (runuser)")
    if not (shutil.which("useradd") and shutil.which("runuser") and os.path.exists("/proc/net/tcp")):
        pytest.skip("needs useradd, runuser and /proc/net/tcp")
    name = f"hopsmlui{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, timeout=60)
    try:
        assert pwd.getpwnam(name).pw_uid != os.getuid()
        with ui_server(env) as base:
            port = base.rstrip("/").rsplit(":", 1)[1]
            other = subprocess.Popen(["runuser", "-u", name, "--", "/usr/bin/python3", "-c", OTHER_USER, port,
                                      base.token, "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                first, last = other.stdout.readline().strip(), other.stdout.readline().strip()
                assert first == "HTTP/1.1 403 Forbidden", (first, other.stderr.read() if other.poll() else "")
                assert last == "hopsml ui: this view serves only the user who started it"
                # the other user's 80 connections are still open on their side: the owner is answered all the same
                assert _get(base, "/", base.headers).status == 200
            finally:
                other.kill()
                other.wait(timeout=60)
    finally:
        subprocess.run(["userdel", name], check=False, timeout=60)
