"""The `hopsml ui` command: it serves on the port it prints (127.0.0.1 by default), stops cleanly on
SIGTERM, and says what to do when the port is wrong or taken."""

from __future__ import annotations

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
        with urllib.request.urlopen(base, timeout=30) as response:
            page = response.read().decode()
            assert response.status == 200 and 'href="/p/test/"' in page
            assert "script-src 'self'" in response.headers["Content-Security-Policy"]
        with urllib.request.urlopen(base + "static/ui.js", timeout=30) as response:
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
