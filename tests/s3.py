"""A real S3 API on 127.0.0.1 for tests (moto's server), and the root URI that points pyarrow at it."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator


def use_test_credentials() -> None:
    """Credentials the local server accepts; Spark's Python workers inherit them if set before Spark starts."""
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        os.environ.setdefault(key, value)


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """Start a local S3 server; yields the endpoint 'host:port'."""
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import WSGIRequestHandler

    WSGIRequestHandler.log_request = lambda *args, **kwargs: None  # no access log in test output
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    use_test_credentials()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"{host}:{port}"
    finally:
        server.stop()


def s3_root(endpoint: str) -> str:
    """A fresh bucket prefix on the local server, as a root URI hopsml accepts."""
    return (f"s3://hopsml-test/{uuid.uuid4().hex[:8]}?endpoint_override={endpoint}&scheme=http"
            "&region=us-east-1&allow_bucket_creation=true")
