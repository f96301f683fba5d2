"""What may be shown, logged or recorded of a URI or a set of Spark settings: the same without credentials.

A value is a secret when its name says so (a key, password, token, SAS, ...) or when it has the shape of one
whatever its name: an AWS access key id, an Azure SAS token or account key, a PEM private key or a GCS service
account's JSON, a JDBC URL or connection string with a password, a bearer token. Pure and dependency-free, so
that the lowest layers (settings, storage) share one definition of what counts as a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

SECRET_NAME = re.compile(r"key|secret|token|passw|pwd|credential|signature|sas\b|sas\.", re.IGNORECASE)
SECRET_SHAPES = re.compile(
    r"\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b"                       # an AWS access key id
    r"|(?:^|[?&;])sig=[^&;\s]{16,}"                                  # an Azure SAS token's signature
    r"|AccountKey=|SharedAccessSignature=|SharedAccessKey="         # Azure connection strings
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|\"private_key\"\s*:"       # PEM keys, a GCS service account's JSON
    r"|^jdbc:.*(?:password|pwd)=|[;?&](?:password|pwd)=[^;&]"         # JDBC URLs and ODBC strings with a password
    r"|\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"                             # a bearer token
    r"|^[A-Za-z0-9+/]{86}==$",                                        # an Azure storage account key
    re.IGNORECASE)
HIDDEN = "***"


def is_secret_name(name: str) -> bool:
    """True for a setting or option name that says it holds a secret (a key, password, token, ...)."""
    return bool(SECRET_NAME.search(name))


def looks_secret(value: object) -> bool:
    """True for a value shaped like a credential, whatever its name (see the module docstring).

    >>> looks_secret("sv=2022-11-02&ss=b&sig=Zx8yQ2b%2Fq0Ke8Lh3kq1p2e9s%3D"), looks_secret("s3a://bucket/logs")
    (True, False)
    """
    return isinstance(value, str) and bool(SECRET_SHAPES.search(value))


def is_secret(name: str, value: object) -> bool:
    """A setting whose value must not be shown, logged, recorded or put on a command line."""
    return is_secret_name(name) or looks_secret(value)


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
    return {key: HIDDEN if is_secret(str(key), value) else redact_uri(value) if isinstance(value, str) else value
            for key, value in conf.items()}


def public_conf(conf: Mapping[str, object]) -> dict[str, object]:
    """Settings worth recording: the secret ones left out, credentials taken out of URIs.

    >>> public_conf({"spark.hadoop.fs.azure.sas.c.a.blob.core.windows.net": "sv=2022&sig=abcdefghijklmnop1234",
    ...              "spark.executor.cores": "2"})
    {'spark.executor.cores': '2'}
    """
    return {key: redact_uri(value) if isinstance(value, str) else value for key, value in sorted(conf.items())
            if not is_secret(str(key), value)}
