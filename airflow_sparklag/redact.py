"""What may be printed: one list of secret markers, one allowlist of Kafka settings
(docs/architecture.md, "Secrets").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

# A setting whose name contains one of these (any case) holds a secret. For Kafka settings the
# allowlist below decides instead: librdkafka has secrets these words do not catch.
SECRET_MARKERS: tuple[str, ...] = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "key",
    "credential",
    "jaas",
    "oauthbearer",
    "auth",
)

# librdkafka settings whose values are never secret: shown as they are in messages. Anything
# else (sasl.username, sasl.jaas.config, sasl.oauthbearer.*, ssl.key.*, typos) is masked.
SAFE_KAFKA_KEYS: frozenset[str] = frozenset(
    {
        "allow.auto.create.topics",
        "api.version.request",
        "auto.offset.reset",
        "bootstrap.servers",
        "broker.address.family",
        "broker.version.fallback",
        "client.dns.lookup",
        "client.id",
        "client.rack",
        "connections.max.idle.ms",
        "debug",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "enable.ssl.certificate.verification",
        "fetch.max.bytes",
        "group.id",
        "isolation.level",
        "log_level",
        "max.partition.fetch.bytes",
        "message.max.bytes",
        "metadata.broker.list",
        "metadata.max.age.ms",
        "receive.message.max.bytes",
        "reconnect.backoff.max.ms",
        "reconnect.backoff.ms",
        "request.timeout.ms",
        "retries",
        "retry.backoff.ms",
        "sasl.kerberos.service.name",
        "sasl.mechanism",
        "sasl.mechanisms",
        "security.protocol",
        "session.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "socket.keepalive.enable",
        "socket.timeout.ms",
        "ssl.ca.location",
        "ssl.endpoint.identification.algorithm",
        "topic.metadata.refresh.interval.ms",
    }
)

# A secret shorter than this, or a switch word, is not scrubbed out of text: removing "a" or
# "true" from every message would make them unreadable and protect nothing.
_MIN_SECRET_LENGTH = 4
_PLAIN_WORDS = frozenset({"true", "false", "none", "null"})
# A URL's authority holds ":" only before a numeric port (or inside an IPv6 host): any other
# ":" is a "user:password" whose password held a "/".
_HOST_AND_PORT = re.compile(r"^(\[[^\]]*\]|[^:\[\]]*)(:\d*)?$")
# Azure's container@account authority: the part before "@" names the container, no secret.
_CONTAINER_SCHEMES = frozenset({"abfs", "abfss", "az", "wasb", "wasbs"})
# scheme://user:password@ in free text; "host:8020/path@x" is a port and a path, not a password.
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s/@:]+:(?!\d+(?:/|$))[^\s@]*@")
# http.client (under botocore) and requests refuse a header value holding a line break and quote
# it whole: "Invalid header value b'<session token>\n'". That value is a credential the
# scrubber may not know (from the AWS environment, a profile, an assumed role).
_HEADER_VALUE = re.compile(
    r"""(header value:?)\s*(?:b?'(?:[^'\\]|\\.)*'|b?"(?:[^"\\]|\\.)*")""", re.IGNORECASE
)


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in SECRET_MARKERS)


def redact_kafka_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with the value of every key outside :data:`SAFE_KAFKA_KEYS` masked.

    >>> redact_kafka_config({"security.protocol": "SASL_SSL", "sasl.jaas.config": "..."})
    {'security.protocol': 'SASL_SSL', 'sasl.jaas.config': '***'}
    """
    return {key: value if key in SAFE_KAFKA_KEYS else MASK for key, value in config.items()}


def redact_url(url: str) -> str:
    """``url`` without its ``user:password@`` part. A secret holding ``/`` (AWS secret keys
    often do) ends the URL's authority early; the credentials still end at the first ``@``.

    >>> redact_url("s3a://AKIA:abc/def@bucket/ck/orders")
    's3a://bucket/ck/orders'
    >>> redact_url("hdfs://nn:8020/users/me@example/ck")
    'hdfs://nn:8020/users/me@example/ck'
    >>> redact_url("abfs://container@account.dfs.core.windows.net/ck")
    'abfs://container@account.dfs.core.windows.net/ck'
    """
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        if parts.scheme.lower() in _CONTAINER_SCHEMES and ":" not in userinfo:
            return url
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    if "@" in url and not _HOST_AND_PORT.match(parts.netloc):
        scheme, _, rest = url.partition("://")
        return f"{scheme}://{rest.partition('@')[2]}"
    return url


def secret_parts(value: str) -> list[str]:
    """The texts of a secret value that may show up in a message: the value itself, and every
    quoted or ``key=value`` part of it (``password="..."`` in a JAAS line)."""
    parts = [value, value.strip()]
    parts += re.findall(r'"([^"]*)"', value) + re.findall(r"'([^']*)'", value)
    parts += [m.strip() for m in re.findall(r"=\s*([^\s;,\"']+)", value)]
    return [p for p in parts if len(p) >= _MIN_SECRET_LENGTH and p.lower() not in _PLAIN_WORDS]


def kafka_secrets(config: Mapping[str, Any]) -> list[str]:
    """Every text of a Kafka config that must not be printed: the parts of each string value
    outside :data:`SAFE_KAFKA_KEYS` (for :func:`scrub`)."""
    found: list[str] = []
    for key, value in config.items():
        if key not in SAFE_KAFKA_KEYS and isinstance(value, str):
            found.extend(secret_parts(value))
    return found


def scrub(message: str, secrets: Iterable[str]) -> str:
    """``message`` with every one of ``secrets`` (the longest first: one that contains another
    goes whole) replaced by ``***``, every URL's ``user:password@`` part removed, and every
    header value an HTTP client quotes.

    >>> scrub("auth failed for pw-secret at s3a://K:S@b/x", ["pw-secret"])
    'auth failed for *** at s3a://b/x'
    >>> scrub("Invalid header value b'tok\\\\n'", [])
    'Invalid header value *** (a credential holds a line break or control character?)'
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        message = message.replace(secret, MASK)
    message = _HEADER_VALUE.sub(
        rf"\1 {MASK} (a credential holds a line break or control character?)", message
    )
    return _URL_USERINFO.sub(r"\1", message)


def shown(value: Any) -> str:
    """``repr(value)``, cut to 80 characters: how a message quotes a value it refuses."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Characters a terminal acts on (C0/C1 controls, DEL; bidi overrides and isolates, which
# reorder what is shown) except the line breaks and tabs of our own layout.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""``text`` with every character a terminal would act on written as its escape: names
    from a checkpoint, a listing or a location (an S3 key may hold ``\x1b[2J``) are shown,
    never obeyed.

    >>> printable("job\x1b[31m\u202e\tok\n")
    'job\\x1b[31m\\u202e\tok\n'
    """
    return _UNPRINTABLE.sub(lambda found: ascii(found.group())[1:-1], text)
