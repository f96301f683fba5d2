"""What may be shown, logged or recorded of a URI or a set of Spark settings: the same without credentials.

Pure and dependency-free, so that the lowest layers (settings, storage) share one definition of what counts
as a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

SECRET_NAME = re.compile(r"key|secret|token|passw|credential|signature", re.IGNORECASE)
HIDDEN = "***"


def is_secret_name(name: str) -> bool:
    """True for a setting or option name that says it holds a secret (a key, password, token, ...)."""
    return bool(SECRET_NAME.search(name))


def redact_uri(uri: str) -> str:
    """The URI without credentials: no ``user:password@`` and no secret query options (access and
    secret keys, session tokens, passwords); what may be shown, logged or recorded.

    >>> redact_uri("s3://AKIA:s3cr3t@bucket/data?secret_key=x&region=eu-west-1")
    's3://bucket/data?region=eu-west-1'
    >>> redact_uri("/local/folder")
    '/local/folder'
    """
    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = "&".join(item for item in parts.query.split("&")
                     if item and not is_secret_name(item.split("=", 1)[0]))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_conf(conf: Mapping[str, object]) -> dict[str, object]:
    """Settings to show: the value of every key that names a secret hidden, credentials taken out of URIs.

    >>> redact_conf({"spark.hadoop.fs.s3a.secret.key": "s3cr3t", "spark.eventLog.dir": "s3a://k:s@b/logs",
    ...              "spark.executor.cores": "2"})
    {'spark.hadoop.fs.s3a.secret.key': '***', 'spark.eventLog.dir': 's3a://b/logs', 'spark.executor.cores': '2'}
    """
    return {key: HIDDEN if is_secret_name(str(key)) else redact_uri(value) if isinstance(value, str) else value
            for key, value in conf.items()}
