"""A flood of connections that fail the handshake logs one warning line per interval with a count,
not one line per connection."""

import logging
import re
import socket

import pytest

from hopsml.cluster import auth
from hopsml.collective import handshake, ratelimit, transport
from hopsml.collective.timeout import Timeout
from hopsml.errors import AuthenticationError

FLOOD = 200


def test_a_connection_flood_is_logged_once_per_interval_with_a_count(caplog):
    caplog.set_level(logging.WARNING, logger=handshake.logger.name)
    listener, address = transport.listen("127.0.0.1")
    host, port = transport.parse_address(address)
    acceptor = handshake._Acceptor(listener, b"the experiment's secret", 0, 2, Timeout(60, "the flood"))
    try:
        for _ in range(FLOOD):
            with socket.create_connection((host, port), timeout=10) as sock:
                with pytest.raises((AuthenticationError, OSError)):
                    auth.respond(sock, b"a wrong secret")  # fails once the listener has judged it
    finally:
        acceptor.stop()
        listener.close()
    lines = [r.getMessage() for r in caplog.records if r.name == handshake.logger.name]
    assert 2 <= len(lines) <= 4, lines   # the first, one per 10 s interval at most, the rest at the end
    assert "refused a connection" in lines[0] and "HMAC" in lines[0]
    held = sum(int(n) for line in lines[1:] for n in re.findall(r"(?:and|^)\s*(\d+) more", line))
    assert 1 + held == FLOOD, lines
    assert f"({FLOOD} in all)" in lines[-1]


def test_rate_limit_interval_and_counts():
    now = [0.0]
    records = []

    class Sink(logging.Logger):
        def warning(self, msg, *args, **kwargs):
            records.append(msg % args)

    limited = ratelimit.RateLimitedWarning(Sink("sink"), interval_s=10.0, clock=lambda: now[0])
    for t in (0.0, 1.0, 2.0, 9.9, 10.0, 10.5, 25.0):
        now[0] = t
        limited.warning("refused %s", t)
    limited.flush("refused connections")
    limited.flush("refused connections")  # nothing left: no line
    assert records == ["refused 0.0",
                       "refused 10.0 (and 3 more like it held back in the last 10 s)",
                       "refused 25.0 (and 1 more like it held back in the last 10 s)"]
    now[0] = 26.0
    limited.warning("refused %s", 26.0)
    limited.flush("refused connections")
    assert records[-1] == "1 more refused connections after the last warning (8 in all)"
