"""The ``hopsml ui`` command: serve the web view of the project root on localhost.

``add_commands(subparsers)`` adds it to the CLI's parser; ``run(args, settings)`` serves until
Ctrl-C (or SIGTERM) and returns the text to print at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import webbrowser
from collections.abc import Sequence
from typing import Any

from hopsml import config, layout
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.ui.access import PARAMETER, new_token
from hopsml.ui.hosts import HostPolicy

log = logging.getLogger(__name__)

COMMANDS = ("ui",)
DEFAULT_PORT = 5151
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ui`` to the CLI's subparsers."""
    ui = subparsers.add_parser("ui", help="a web view of experiments, searches, datasets and models")
    ui.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help=f"port to listen on (default {DEFAULT_PORT}; 0 takes a free one)")
    ui.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: only this machine, and on a loopback address "
                         "only your own user; every request needs the token printed at start)")
    ui.add_argument("--allow-host", dest="allow_hosts", action="append", default=[], metavar="NAME",
                    help="also answer requests for this host name (repeatable), e.g. the name of this "
                         "machine or of a proxy in front of it; by default only the --host address "
                         "and localhost/127.0.0.1/[::1] with the port are answered (against DNS rebinding)")
    ui.add_argument("--project", dest="ui_project", metavar="PROJECT",
                    help="project the front page opens (default: the setting)")
    ui.add_argument("--no-browser", action="store_true", help="do not open a web browser")


def _make_server(settings: config.Settings, host: str, port: int, allow_hosts: Sequence[str] = (),
                 token: str | None = None) -> Any:
    """The view's server (server.py) on a socket bound here, so a taken port is an error we word
    (werkzeug itself would exit the process); it answers the Host names of `HostPolicy.for_server`, and with
    `token` only the requests that carry it (access.py)."""
    try:
        from werkzeug.serving import get_sockaddr, select_address_family

        from hopsml.ui.access import TokenCheck
        from hopsml.ui.app import create_app
        from hopsml.ui.server import make_server
    except ImportError as exc:
        raise HopsmlError(f"hopsml ui needs Flask 3 ({exc}): pip install \"flask>=3\"") from exc
    family = select_address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(get_sockaddr(host, port, family))
        sock.listen(128)
        bound = sock.getsockname()[1]
        app = create_app(settings, HostPolicy.for_server(host, bound, allow_hosts),
                         TokenCheck(token, bound) if token is not None else None)
        return make_server(host, port, app, sock.fileno())
    except OSError as exc:
        raise HopsmlError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pass another --port, or "
                          "--port 0 for any free one") from exc
    finally:
        sock.close()   # the server holds its own duplicate of the socket


def _redirect_page(url: str) -> str:
    """A file only this user can read that sends a browser on to `url` (as Jupyter opens its address)."""
    from html import escape

    fd, path = tempfile.mkstemp(prefix="hopsml-ui-", suffix=".html")   # mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f'<!doctype html><meta http-equiv="refresh" content="0;url={escape(url)}">'
                  f'<a href="{escape(url)}">open hopsml ui</a>\n')
    return path


def run(args: argparse.Namespace, settings: config.Settings) -> str:
    """Serve the view until interrupted."""
    from hopsml.ui.app import settings_for

    if not 0 <= args.port <= 65535:
        raise HopsmlError(f"--port {args.port} is not a port: give 1-65535, or 0 for any free one")
    settings = settings_for(settings, args.ui_project)
    token = new_token()
    server = _make_server(settings, args.host, args.port, args.allow_hosts, token)
    host = args.host if ":" not in args.host else f"[{args.host}]"
    url = f"http://{host}:{server.port}/"
    if Storage(settings.root).isdir(layout.project_dir(settings.project)):
        url += f"p/{settings.project}/"
    url += f"?{PARAMETER}={token}"
    if args.host not in LOCAL_HOSTS:
        log.warning("hopsml ui listens on %s: whoever reaches it with the token can read every run, dataset and "
                    "model of %s, and the token travels unencrypted (plain HTTP): put a TLS proxy in front "
                    "of it", args.host, Storage(settings.root).uri())
    print(f"hopsml ui: {Storage(settings.root).uri()} at {url} (Ctrl-C stops it)", flush=True)

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    page = None
    if not args.no_browser:   # through a private file: a browser's command line is readable by every local user
        page = _redirect_page(url)
        threading.Thread(target=webbrowser.open, args=(f"file://{page}",), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if page is not None:
            os.unlink(page)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print("hopsml ui: stopped", file=sys.stderr)
    return ""
