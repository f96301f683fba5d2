"""What may be shown, logged, recorded or put on a command line of a URI, a set of Spark settings or a log line:
the same without credentials. The one rule for what is secret, shared by the CLI, the web view, the records, the
logs and the launchers.

A value is a secret when its setting's name says so (a key, password, token, SAS, ``DB_PASS`` ...) or when it has
the shape of one whatever its name: an AWS access key id, an Azure SAS token or account key, a PEM private key or
a GCS service account's JSON, a JDBC URL or connection string with a password, a bearer or basic token, a GitHub,
Slack or Stripe token, a URL with a password in it (``https://user:PASS@host/``). The rule also looks inside
values that hold several: Java options (``-Djavax.net.ssl.trustStorePassword=...`` in ``extraJavaOptions``) and
environment settings (``spark.executorEnv.DB_PASS``, whose name is the variable's). Pure and dependency-free, so
that the lowest layers (settings, storage) share one definition of what counts as a secret.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

SECRET_NAME = re.compile(r"key|secret|token|passw|(?<![a-z])pass(?![a-z])|pgpass|pwd|credential|signature|"
                         r"sas\b|sas\.|auth(?:orization)?(?![a-z])", re.IGNORECASE)
# Each shape: a prefix kept when shown, then the secret part, replaced by HIDDEN in a log line or a shown value.
_SHAPES = (
    r"()\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b",                         # an AWS access key id
    r"((?:^|[?&;\s])sig=)[^&;\s\"']{16,}",                                 # an Azure SAS token's signature
    r"((?:AccountKey|SharedAccessSignature|SharedAccessKey)=)[^;\s\"']+",  # Azure connection strings
    r"()-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.|\n)*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",   # a PEM key
    r"(\"private_key\"\s*:\s*)\"[^\"]*\"?",                                # a GCS service account's JSON
    r"((?:^|[;?&\s])(?:password|pwd)=)[^;&\s\"']+",                        # JDBC URLs and ODBC strings
    r"(\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]{8,}",                     # bearer and basic tokens
    r"()\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",   # GitHub tokens
    r"()\bxox[abposr]-[A-Za-z0-9-]{8,}",                                   # Slack tokens
    r"()\b[sr]k_(?:live|test)_[A-Za-z0-9]{12,}",                           # Stripe secret and restricted keys
    r"(\b[a-z][a-z0-9+.-]*://[^/\s:@\"']+:)[^/\s@\"']+(?=@)",              # a URL's password (user:PASS@host)
    r"()^[A-Za-z0-9+/]{86}==$",                                            # an Azure storage account key
)
SECRET_SHAPES = re.compile("|".join(shape.replace("()", "", 1) if shape.startswith("()") else
                                    shape.replace("(", "(?:", 1) for shape in _SHAPES), re.IGNORECASE | re.MULTILINE)
_SHAPE_SUBS = tuple(re.compile(shape, re.IGNORECASE | re.MULTILINE) for shape in _SHAPES)
# A Java option that sets a secret system property: -Djavax.net.ssl.trustStorePassword=..., -Dx.api.token=...
_JAVA_OPTION = re.compile(r"^(-D[^=\s]+=)(.*)$", re.DOTALL)
JAVA_OPTIONS = re.compile(r"(?:extraJavaOptions|\.javaOptions|JAVA_OPTS|JAVA_TOOL_OPTIONS|JDK_JAVA_OPTIONS)$",
                          re.IGNORECASE)
HIDDEN = "***"


def is_secret_name(name: str) -> bool:
    """True for a setting, option or variable name that says it holds a secret (a key, password, token, ...).

    >>> is_secret_name("spark.executorEnv.DB_PASS"), is_secret_name("spark.sql.bypass.enabled")
    (True, False)
    """
    return bool(SECRET_NAME.search(name))


def _secret_java_option(word: str) -> bool:
    match = _JAVA_OPTION.match(word)
    if match is None or match.group(2) == HIDDEN:
        return False
    return is_secret_name(match.group(1)) or bool(SECRET_SHAPES.search(match.group(2)))


def looks_secret(value: object) -> bool:
    """True for a value shaped like a credential, whatever its name, or holding one (see the module docstring).

    >>> looks_secret("sv=2022-11-02&ss=b&sig=Zx8yQ2b%2Fq0Ke8Lh3kq1p2e9s%3D"), looks_secret("s3a://bucket/logs")
    (True, False)
    >>> looks_secret("-Xss4m -Djavax.net.ssl.trustStorePassword=changeit"), looks_secret("https://u:pw@repo/m2")
    (True, True)
    """
    if not isinstance(value, str):
        return False
    return bool(SECRET_SHAPES.search(value)) or ("-D" in value and any(map(_secret_java_option, _words(value))))


def is_secret(name: str, value: object) -> bool:
    """A setting whose value must not be shown, logged, recorded or put on a command line as it is."""
    return is_secret_name(name) or looks_secret(value)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def split_java_options(text: str) -> tuple[list[str], list[str]]:
    """Java options as (the words that may go on a command line, the ones that set a secret).

    >>> split_java_options("-Xss4m -Djavax.net.ssl.trustStorePassword=changeit -Dfile.encoding=UTF-8")
    (['-Xss4m', '-Dfile.encoding=UTF-8'], ['-Djavax.net.ssl.trustStorePassword=changeit'])
    """
    public: list[str] = []
    secret: list[str] = []
    for word in _words(text):
        (secret if _secret_java_option(word) or SECRET_SHAPES.search(word) else public).append(word)
    return public, secret


def redact_text(text: str, known: Iterable[str] = ()) -> str:
    """A log line or message without secrets: every `known` secret value and every secret shape replaced by ***.

    >>> redact_text("resolving https://ci:hunter22@repo.example.com/m2 with Bearer abcdefgh1234", ["hunter22"])
    'resolving https://ci:***@repo.example.com/m2 with Bearer ***'
    """
    for value in sorted({v for v in known if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, HIDDEN)
    for shape in _SHAPE_SUBS:
        text = shape.sub(lambda match: match.group(1) + HIDDEN, text)
    return text


def redact_bytes(data: bytes, known: Iterable[str] = ()) -> bytes:
    """`redact_text` of a process's output: bytes that are not UTF-8 are kept as they are."""
    return redact_text(data.decode("utf-8", "surrogateescape"), known).encode("utf-8", "surrogateescape")


def secret_parts(name: str, value: object) -> list[str]:
    """The pieces of a setting's value that a log must not show: the whole value of a setting secret by name,
    else the secret Java options' values, URL passwords and token shapes inside it."""
    if not isinstance(value, str) or not value:
        return []
    if is_secret_name(name):
        return [value]
    parts = []
    for word in _words(value) if "-D" in value else []:
        match = _JAVA_OPTION.match(word)
        if match and _secret_java_option(word):
            parts.append(match.group(2))
    for shape in _SHAPE_SUBS:
        parts += [match.group(0)[len(match.group(1)):] for match in shape.finditer(value)]
    return [part for part in parts if part]


def redact_value(name: str, value: object) -> object:
    """A setting's value as it may be shown: *** for a setting secret by name; else the value with each secret
    inside it hidden (a Java option's value, a token) and credentials taken out of URIs.

    >>> redact_value("spark.driver.extraJavaOptions", "-Xss4m -Djavax.net.ssl.trustStorePassword=changeit")
    '-Xss4m -Djavax.net.ssl.trustStorePassword=***'
    >>> redact_value("spark.jars.repositories", "https://ci:hunter2@repo.example.com/m2")
    'https://repo.example.com/m2'
    """
    if not isinstance(value, str):
        return HIDDEN if is_secret_name(name) and value is not None else value
    if is_secret_name(name):
        return HIDDEN
    shown = value
    if "-D" in shown and any(map(_secret_java_option, _words(shown))):
        shown = " ".join(_JAVA_OPTION.sub(r"\g<1>" + HIDDEN, word) if _secret_java_option(word) else shlex.quote(word)
                         for word in _words(shown))
    shown = ",".join(redact_uri(part) if "://" in part else part for part in shown.split(","))
    shown = redact_text(shown)
    return HIDDEN if looks_secret(shown) else shown


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
    try:
        parts = urlsplit(uri)
    except ValueError:
        return redact_text(uri)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = "&".join(item for item in parts.query.split("&")
                     if item and not is_secret_name(item.split("=", 1)[0]))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_words(words: Iterable[str]) -> list[str]:
    """A command line or argument list as it may be shown or recorded: each word redacted as a setting would be
    (a `key=value` word by its key)."""
    shown = []
    for word in words:
        key, sep, value = str(word).partition("=")
        if sep and key.startswith(("-D", "spark.", "--")) and is_secret_name(key):
            shown.append(f"{key}={HIDDEN}")
        else:
            result = redact_value(key if sep else "", value if sep else word)
            shown.append(f"{key}={result}" if sep and result != HIDDEN else str(result) if not sep else
                         f"{key}={HIDDEN}")
    return shown


def redact_conf(conf: Mapping[str, object]) -> dict[str, object]:
    """Settings to show: secrets hidden by the module's rule, credentials taken out of URIs.

    >>> redact_conf({"spark.hadoop.fs.s3a.secret.key": "s3cr3t", "spark.eventLog.dir": "s3a://k:s@b/logs",
    ...              "spark.executor.cores": "2"})
    {'spark.hadoop.fs.s3a.secret.key': '***', 'spark.eventLog.dir': 's3a://b/logs', 'spark.executor.cores': '2'}
    """
    return {key: redact_value(str(key), value) for key, value in conf.items()}


def public_conf(conf: Mapping[str, object]) -> dict[str, object]:
    """Settings worth recording: the secret ones left out, except those whose only secret was a URL's credentials
    (they are recorded without them).

    >>> public_conf({"spark.hadoop.fs.azure.sas.c.a.blob.core.windows.net": "sv=2022&sig=abcdefghijklmnop1234",
    ...              "spark.eventLog.dir": "s3a://AKIAXXX:s3cr3t@logs/spark", "spark.executor.cores": "2"})
    {'spark.eventLog.dir': 's3a://logs/spark', 'spark.executor.cores': '2'}
    """
    kept = {}
    for key, value in sorted(conf.items()):
        if not is_secret(str(key), value):
            kept[key] = redact_uri(value) if isinstance(value, str) else value
        elif not is_secret_name(str(key)) and isinstance(value, str):
            shown = redact_value(str(key), value)
            if isinstance(shown, str) and HIDDEN not in shown:
                kept[key] = shown
    return kept
