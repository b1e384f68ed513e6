"""A lean S3 read path for a fleet check: ListObjectsV2 and GetObject over plain sockets.

A first fleet check is two requests per job (one LIST, one GET). Through boto3 each costs
botocore's per-request machinery (~3-4 ms of client CPU per job in all); through obstore the
Rust side asks for 1,000 keys per page and parses every one of them (a stateful job's first
page is ~800 ``state/`` keys thrown away). Here a request is one write and a few reads on a
kept-alive socket (HTTP/1.1, TLS for https), signed with AWS Signature V4 of our own, and a
listing is read key by key (one regex match each) up to the first key past ``offsets/``
only: the keys after it (``sources/``, ``state/``) are never parsed. Only reads go through
here; writes, HEADs, deletes, copies and delimiter listings stay with boto3.

Same contract as the boto3 path: the same typed errors (``StorageNotFound``,
``StorageAccessDenied``, ``BucketNotFound``, ``StorageError`` for an answer that is not S3's),
the same bounds (``max_attempts`` attempts in all, each within connect + read timeout; 5xx,
throttling and broken connections are retried), no secret in any message. Credentials come
from a botocore ``Credentials`` object (static keys, the default chain, an assumed role's
refreshing credentials, session tokens included), asked for their frozen keys per request.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import random
import re
import threading
import time
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit

from airflow_sparklag.errors import (
    BucketNotFound,
    StorageAccessDenied,
    StorageError,
    StorageNotFound,
)
from airflow_sparklag.redact import scrub
from airflow_sparklag.storage import ObjectInfo

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Answers worth another attempt (botocore's standard mode retries the same).
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_DENIED = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidToken",
    }
)
_ENTITY = re.compile(r"&(#[xX][0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_MAX_BACKOFF = 2.0


class NotS3(ValueError):
    """A listing that is not S3's ListObjectsV2 answer (or is cut short / malformed)."""


def xml_text(raw: str) -> str:
    """XML character data -> text: the five predefined entities and character references.
    Any other ``&`` (not well-formed XML) is :class:`NotS3`."""
    if "&" not in raw:
        return raw

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name[0] != "#":
            return _NAMED[name]
        return chr(int(name[2:], 16) if name[1] in "xX" else int(name[1:]))

    try:
        text = _ENTITY.sub(one, raw)
    except (ValueError, OverflowError):
        raise NotS3("a character reference out of range") from None
    if "&" in _ENTITY.sub("", raw):
        raise NotS3("an unknown entity")
    return text


def _member(block: str, name: str) -> str | None:
    """The text of ``<name>...</name>`` in ``block`` (the first one), raw; None when absent."""
    start = block.find("<" + name + ">")
    if start < 0:
        return None
    start += len(name) + 2
    stop = block.find("</" + name + ">", start)
    if stop < 0 or "<" in block[start:stop]:
        raise NotS3(f"<{name}> is not a text element")
    return block[start:stop]


# One <Contents> as S3 writes it: Key, LastModified, ETag, [ChecksumAlgorithm...,
# ChecksumType], Size (Owner, StorageClass, ... follow up to </Contents>).
_CONTENTS = re.compile(
    r"<Contents><Key>([^<]*)</Key><LastModified>([^<]*)</LastModified><ETag>([^<]*)</ETag>"
    r"(?:<Checksum[A-Za-z]*>[^<]*</Checksum[A-Za-z]*>)*<Size>([0-9]+)</Size>"
    r"(?:<(?!/?(?:Contents|Key|LastModified|ETag|Size)>)[^>]*>[^<]*)*</Contents>"
)


def _contents(block: str) -> tuple[str, str, str, str]:
    """Key, LastModified, ETag and Size of a ``<Contents>`` block, raw, in any order."""
    if any(block.count(f"<{name}>") > 1 for name in ("Key", "Size", "LastModified", "ETag")):
        raise NotS3("a <Contents> with a <Key>, <Size>, <LastModified> or <ETag> twice")
    key = _member(block, "Key")
    size = _member(block, "Size")
    modified = _member(block, "LastModified")
    if key is None or size is None or modified is None:
        raise NotS3("a <Contents> without Key, Size or LastModified")
    if not (size.isascii() and size.isdigit()):
        raise NotS3(f"Size {size[:40]!r} is not a number")
    return key, modified, _member(block, "ETag") or "", size


def _timestamp(text: str) -> float:
    if text.endswith(("Z", "z")):  # S3's "...000Z": Python 3.10's fromisoformat wants +00:00
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise NotS3(f"LastModified {text[:40]!r} is not a timestamp") from None
    if parsed.tzinfo is None:
        raise NotS3(f"LastModified {text[:40]!r} has no time zone")
    return parsed.timestamp()


class Listing:
    """One ListObjectsV2 page as the checkpoint reader needs it: ``(key, ETag, size,
    modified)`` of each key before the end, whether S3 has more, and how to ask for it."""

    __slots__ = ("entries", "next_token", "past_end", "truncated")

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, int, float]] = []
        self.truncated = False
        self.next_token: str | None = None
        self.past_end = False


def _outside_contents(text: str, first: int, name: str) -> str | None:
    """A top-level member: before the first ``<Contents>`` or after the last one."""
    head = text if first < 0 else text[:first]
    found = _member(head, name)
    if found is None and first >= 0:
        found = _member(text[text.rfind("</Contents>") :], name)
    return found


def parse_listing(body: bytes, end: str | None = None) -> Listing:
    """A ListObjectsV2 answer (``encoding-type=url``), walked key by key until ``end``.

    Keys at or after ``end`` stop the walk (``past_end``): the rest of the page is not
    parsed. Anything that is not S3's ListObjectsV2 XML (another root, no ``IsTruncated``, a
    ``<Contents>`` without ``Key``, ``Size`` or ``LastModified``, a bad size or timestamp, XML
    cut short, CDATA or comments) is :class:`NotS3`.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise NotS3("not UTF-8") from None
    first = text.find("<Contents>")
    head = text if first < 0 else text[:first]
    if "<ListBucketResult" not in head or "<![CDATA[" in text or "<!--" in text:
        raise NotS3("no ListBucketResult")
    if not text.rstrip().endswith("</ListBucketResult>"):
        raise NotS3("cut short")
    listing = Listing()
    truncated = _outside_contents(text, first, "IsTruncated")
    if truncated not in ("true", "false"):
        raise NotS3("no IsTruncated")
    listing.truncated = truncated == "true"
    position = first
    entries = listing.entries
    while position >= 0:
        match = _CONTENTS.match(text, position)
        if match is not None:  # S3's own order of the members: one regex match
            key, modified, etag, size = match.groups()
            stop = match.end()
        else:  # another order, more members: member by member
            stop = text.find("</Contents>", position)
            if stop < 0:
                raise NotS3("<Contents> not closed")
            key, modified, etag, size = _contents(text[position + 10 : stop])
        if "&" in key:
            key = xml_text(key)
        if "%" in key or "+" in key:
            key = unquote_plus(key)  # encoding-type=url, decoded as botocore does
        if end is not None and key >= end:
            listing.past_end = True
            return listing  # no next page needed
        if "&" in etag:
            etag = etag.replace("&quot;", '"')
            if "&" in etag:
                etag = xml_text(etag)
        entries.append((key, etag, int(size), _timestamp(modified)))
        position = text.find("<Contents>", stop)
    token = _outside_contents(text, first, "NextContinuationToken")
    listing.next_token = xml_text(token) if token else None
    return listing


class StaticCredentials:
    """Keys given in the options: what botocore's ``Credentials`` hands out, without botocore
    (importing it and building a client cost ~0.3 s of CPU, once per process)."""

    __slots__ = ("access_key", "secret_key", "token")

    def __init__(self, access_key: str, secret_key: str, token: str | None = None) -> None:
        self.access_key = access_key
        self.secret_key = secret_key
        self.token = token or None

    def get_frozen_credentials(self) -> StaticCredentials:
        return self

    def __repr__(self) -> str:
        return "StaticCredentials(***)"


class SigV4:
    """AWS Signature V4 for S3 GETs (payload: the empty body), as botocore's S3SigV4Auth."""

    def __init__(self, credentials: Any, region: str) -> None:
        self.credentials = credentials
        self.region = region
        self._keys: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def _signing_key(self, secret: str, day: str) -> bytes:
        cached = self._keys.get((secret, day))
        if cached is None:
            key = ("AWS4" + secret).encode()
            for part in (day, self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            with self._lock:
                self._keys = {(secret, day): key}  # one day, one secret at a time
            cached = key
        return cached

    def headers(self, host: str, path: str, query: str, now: float | None = None) -> dict[str, str]:
        """The headers of a signed GET of ``path`` (already URI-encoded) with ``query``
        (canonical: sorted and encoded)."""
        frozen = self.credentials.get_frozen_credentials()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        day = stamp[:8]
        headers = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
        if frozen.token:
            headers["x-amz-security-token"] = frozen.token
        names = ";".join(headers)  # already in sorted order
        canonical = "\n".join(
            (
                "GET",
                path,
                query,
                "".join(f"{name}:{value}\n" for name, value in headers.items()),
                names,
                EMPTY_SHA256,
            )
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            ("AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest())
        )
        signature = hmac.new(
            self._signing_key(frozen.secret_key, day), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={frozen.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}"
        )
        return headers


def _header_safe(value: str) -> bool:
    """Printable ASCII only: what a header value may carry unescaped."""
    return value.isascii() and value.isprintable()


def canonical_query(params: dict[str, str]) -> str:
    return "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items())
    )


class HTTPError(Exception):
    """The connection failed, timed out or the answer was not HTTP/1.x."""


class Answer:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body


class Connections:
    """Keep-alive HTTP/1.1 connections to one host (``http`` or ``https``), for GETs only.

    Plain sockets: urllib3 costs ~0.7 ms of CPU per request here (http.client ~0.4 ms, most
    of it in the email header parser), this ~0.12 ms. Every socket read waits at most
    ``read_timeout`` and a connect ``connect_timeout``, as botocore's. A body longer than the
    request's ``limit`` is refused (``MAX_LISTING`` for a listing page)."""

    def __init__(
        self, scheme: str, host: str, port: int, connect_timeout: float, read_timeout: float
    ) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._tls: Any = None
        if scheme == "https":
            import os
            import ssl

            # The system's CAs, or the bundle boto3 is told to use (AWS_CA_BUNDLE).
            self._tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)

    def _connect(self) -> Any:
        import socket

        sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        sock.settimeout(self.read_timeout)
        return sock, sock.makefile("rb")

    def get(self, request: bytes, limit: int) -> Answer:
        """Send ``request`` (a whole GET) and read the answer. A kept-alive connection the
        server closed meanwhile is replaced once, silently (nothing was answered on it)."""
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        if idle is not None:
            try:
                return self._exchange(idle, request, limit, reused=True)
            except _Stale:
                pass
        try:
            connection = self._connect()
        except OSError as exc:
            raise HTTPError(f"could not connect: {type(exc).__name__}: {exc}") from None
        return self._exchange(connection, request, limit, reused=False)

    def _exchange(self, connection: Any, request: bytes, limit: int, *, reused: bool) -> Answer:
        """One request and its answer. On a kept-alive connection, a failure before the first
        byte of an answer is :class:`_Stale` (the server closed it while it was idle)."""
        sock, stream = connection
        status_line = b""
        try:
            sock.sendall(request)
            status_line = stream.readline(MAX_LINE)
            if not status_line:
                raise ConnectionResetError("the connection closed before an answer")
            answer, reusable = _read_answer(status_line, stream, limit)
        except (OSError, ValueError) as exc:  # timeouts, resets, not HTTP, cut short
            _close(connection)
            if reused and not status_line and not isinstance(exc, TimeoutError):
                raise _Stale from None
            raise HTTPError(f"{type(exc).__name__}: {exc}") from None
        if reusable:
            with self._lock:
                self._idle.append(connection)
        else:
            _close(connection)
        return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            _close(connection)


class _Stale(Exception):
    """A kept-alive connection closed by the server before it answered."""


MAX_LINE = 65536
MAX_HEADERS = 100
MAX_LISTING = 64 * 1024 * 1024  # a 1,000-key page is < 0.5 MB
MAX_OBJECT = 2**62  # reads are not bounded (as boto3's): the caller checks the listed size


def _read_answer(status_line: bytes, stream: Any, limit: int) -> tuple[Answer, bool]:
    """The answer after ``status_line`` (a body of at most ``limit`` bytes); whether the
    connection can be used again."""
    version, _, rest = status_line.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
        raise ValueError(f"not an HTTP answer: {status_line[:40]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = stream.readline(MAX_LINE)
        if line in (b"\r\n", b"\n"):
            break
        if not line.endswith(b"\n"):
            raise ValueError("the headers were cut short")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise ValueError("too many headers")
    reusable = version != b"HTTP/1.0" and headers.get("connection", "").lower() != "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(stream, limit)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if not 0 <= length <= limit:
            raise ValueError(f"Content-Length {length}")
        body = stream.read(length)
        if len(body) != length:
            raise ValueError("the body was cut short")
    else:  # the body ends with the connection
        body = stream.read() if limit >= MAX_OBJECT else stream.read(limit + 1)
        if len(body) > limit:
            raise ValueError("the answer is too large")
        reusable = False
    return Answer(status, headers, body), reusable


def _read_chunked(stream: Any, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = stream.readline(MAX_LINE)
        size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            while stream.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        total += size
        if total > limit:
            raise ValueError("the answer is too large")
        chunk = stream.read(size + 2)
        if len(chunk) != size + 2:
            raise ValueError("a chunk was cut short")
        parts.append(chunk[:size])


def _close(connection: Any) -> None:
    for part in reversed(connection):
        with contextlib.suppress(OSError):
            part.close()


class LeanReader:
    """List and read S3 objects over keep-alive sockets (see the module docstring).

    ``endpoint_url`` None means AWS: ``https://<bucket>.s3.<region>.amazonaws.com``
    (path-style for a bucket name that is not DNS-safe); a given endpoint is addressed
    path-style, as botocore does for custom endpoints. A bucket in another region than
    ``region`` is an error naming it (boto3 would follow S3's redirect). TLS trusts the
    system's CAs or ``AWS_CA_BUNDLE``; a boto3 client's own ``verify`` setting is not
    carried over.

    >>> reader = LeanReader(credentials=StaticCredentials("AKID", "secret"), region="eu-west-1",
    ...     endpoint_url=None, connect_timeout=5, read_timeout=15, max_attempts=3)
    >>> reader.read("s3a://bucket/ck/metadata", "bucket", "ck/metadata")  # doctest: +SKIP
    b'{"id":"..."}'
    """

    def __init__(
        self,
        *,
        credentials: Any,
        region: str | None,
        endpoint_url: str | None,
        connect_timeout: float,
        read_timeout: float,
        max_attempts: int,
        secrets: list[str] | None = None,
    ) -> None:
        self.region = region or "us-east-1"
        self.signer = SigV4(credentials, self.region)
        self.endpoint = endpoint_url.rstrip("/") if endpoint_url else None
        self.max_attempts = max(1, max_attempts)
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._secrets = list(secrets or [])
        self._hosts: dict[tuple[str, str, int], Connections] = {}
        self._lock = threading.Lock()

    def _address(self, bucket: str, key: str) -> tuple[str, str, int, str, str]:
        """(scheme, host to connect to, port, Host header, URI-encoded path) of ``key``."""
        encoded = quote(key, safe="/~")
        if self.endpoint is not None:
            parts = urlsplit(self.endpoint)
            scheme = parts.scheme or "https"
            port = parts.port or (443 if scheme == "https" else 80)
            prefix = parts.path.rstrip("/")
            path = f"{prefix}/{quote(bucket, safe='')}/{encoded}"
            return scheme, parts.hostname or "", port, _host(parts), path
        if _DNS_BUCKET.match(bucket) and "." not in bucket:
            host = f"{bucket}.s3.{self.region}.amazonaws.com"
            return "https", host, 443, host, "/" + encoded
        host = f"s3.{self.region}.amazonaws.com"
        return "https", host, 443, host, f"/{quote(bucket, safe='')}/{encoded}"

    def _connections(self, scheme: str, host: str, port: int) -> Connections:
        key = (scheme, host, port)
        connections = self._hosts.get(key)
        if connections is None:
            with self._lock:
                connections = self._hosts.setdefault(
                    key,
                    Connections(scheme, host, port, self.connect_timeout, self.read_timeout),
                )
        return connections

    def _get(
        self, location: str, action: str, bucket: str, key: str, params: dict[str, str]
    ) -> bytes:
        """One signed GET with retries; the body of a 200, else the typed error."""
        scheme, host, port, host_header, path = self._address(bucket, key)
        connections = self._connections(scheme, host, port)
        limit = MAX_LISTING if action == "list" else MAX_OBJECT
        query = canonical_query(params)
        target = f"{path}?{query}" if query else path
        failure = ""
        for attempt in range(self.max_attempts):
            if attempt:
                time.sleep(random.random() * min(_MAX_BACKOFF, 0.05 * 2**attempt))
            headers = self.signer.headers(host_header, path, query)
            if not all(_header_safe(value) for value in headers.values()):
                # A line break in a session token would inject a header of its own.
                raise StorageError(
                    f"{location}: {action} failed: the AWS credentials hold a character an "
                    "HTTP header cannot carry (a line break, a control or non-ASCII "
                    "character); check the access key id and the session token"
                )
            request = "".join(
                [f"GET {target} HTTP/1.1\r\n"]
                + [f"{name}: {value}\r\n" for name, value in headers.items()]
                + ["Accept-Encoding: identity\r\nUser-Agent: airflow-sparklag\r\n\r\n"]
            ).encode("latin-1")
            try:
                answer = connections.get(request, limit)
            except HTTPError as exc:  # refused, timed out, reset, not HTTP
                failure = f"could not talk to {self._where()}: {exc}"
                continue
            if answer.status == 200:
                return answer.body
            error = self._error(answer.status, answer.headers, answer.body, location, action)
            if error is not None:
                raise error
            failure = f"HTTP {answer.status}"  # 5xx, throttling: worth another attempt
            if _member_or_none(answer.body.decode("utf-8", "replace"), "Code") is None:
                failure = self._not_s3(answer.status, answer.headers)
        raise StorageError(
            f"{location}: {action} failed after {self.max_attempts} attempt(s): "
            f"{scrub(failure, self._secrets)[:300]}"
        )

    def close(self) -> None:
        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
        for connections in hosts:
            connections.close()

    def _where(self) -> str:
        return self.endpoint or f"S3 ({self.region})"

    def _not_s3(self, status: int, headers: Any) -> str:
        return (
            f"{self._where()} did not answer like S3 (HTTP {status}, Content-Type "
            f"{headers.get('content-type') or 'none'}: not S3's XML, or cut short); check the "
            "S3 endpoint (--s3-endpoint-url, the connection's endpoint_url): a web page, a "
            "login portal or a proxy answered"
        )

    def _error(
        self, status: int, headers: Any, body: bytes, location: str, action: str
    ) -> StorageError | None:
        """The typed error of an S3 error answer; None for an answer that is not S3's (a
        proxy page, a body cut short) or a bare 5xx, which are worth another attempt."""
        text = body.decode("utf-8", "replace")
        code = _member_or_none(text, "Code")
        bucket = location.split("/")[2] if "://" in location else ""
        if code == "NoSuchBucket":
            return BucketNotFound(
                f"{location}: bucket {bucket!r} does not exist; check the bucket name and the "
                "endpoint"
            )
        if code in _DENIED or (status == 403 and not body):
            message = xml_text(_member_or_none(text, "Message") or code or str(status))
            return StorageAccessDenied(
                f"{location}: access denied ({action}): {scrub(message, self._secrets)[:200]}; "
                "check the credentials and the bucket/IAM policy for s3:GetObject and "
                f"s3:ListBucket on {bucket!r}"
            )
        if code in ("NoSuchKey", "NotFound") or (status == 404 and not body):
            return StorageNotFound(f"{location}: no such object ({action})")
        if status in _RETRY_STATUSES or code in ("SlowDown", "InternalError", "RequestTimeout"):
            return None
        if code is None:
            return StorageError(f"{location}: {action} failed: {self._not_s3(status, headers)}")
        if code in ("PermanentRedirect", "AuthorizationHeaderMalformed"):
            return StorageError(
                f"{location}: {action} failed: {code}: bucket {bucket!r} is in another region "
                f"than {self.region!r}; set region_name"
            )
        message = scrub(xml_text(_member_or_none(text, "Message") or ""), self._secrets)
        return StorageError(f"{location}: {action} failed: {code}: {message[:200]}")

    def read(self, path: str, bucket: str, key: str) -> bytes:
        return self._get(path, "read", bucket, key, {})

    def list_checkpoint(
        self, location: str, bucket: str, root: str, first_page: int
    ) -> tuple[dict[str, list[ObjectInfo]], int]:
        """``commits/``, ``offsets/`` and ``metadata`` of the checkpoint at key prefix ``root``
        and the number of requests sent: ListObjectsV2 from ``<root>commits`` on, the first
        page of ``first_page`` keys, stopped at the first key past ``offsets/``."""
        end = root + "offsets0"
        found: dict[str, list[ObjectInfo]] = {"commits": [], "offsets": [], "metadata": []}
        params = {
            "list-type": "2",
            "prefix": root,
            "encoding-type": "url",
            "start-after": root + "commits",
            "max-keys": str(max(1, min(1000, first_page))),
        }
        requests = 0
        while True:
            body = self._get(location, "list", bucket, "", params)
            requests += 1
            try:
                page = parse_listing(body, end)
            except NotS3 as exc:
                raise StorageError(
                    f"{location}: list failed: {self._where()} did not answer like S3 (the "
                    f"answer could not be read: {exc}); check the S3 endpoint "
                    "(--s3-endpoint-url, the connection's endpoint_url) and any proxy in between"
                ) from None
            _collect(page.entries, root, found)
            if page.past_end or not page.truncated or not page.next_token:
                return found, requests
            params = {
                "list-type": "2",
                "prefix": root,
                "encoding-type": "url",
                "continuation-token": page.next_token,
            }


def _member_or_none(text: str, name: str) -> str | None:
    try:
        return _member(text, name)
    except NotS3:
        return None


def _host(parts: Any) -> str:
    """The Host header botocore signs: the netloc without a default port."""
    host = parts.netloc
    default = {"http": ":80", "https": ":443"}.get(parts.scheme)
    if default and host.endswith(default):
        host = host[: -len(default)]
    return str(host)


def _collect(
    entries: list[tuple[str, str, int, float]], root: str, found: dict[str, list[ObjectInfo]]
) -> None:
    """Add a page's log files and ``metadata`` to ``found`` (see ``s3_obstore._collect``)."""
    start = len(root) + len("commits/")
    logs = {root + "commits/": found["commits"], root + "offsets/": found["offsets"]}
    metadata = root + "metadata"
    for full, etag, size, modified in entries:
        listed = logs.get(full[:start])
        if listed is not None:
            name = full[start:]
            if not name or "/" in name:
                continue  # the directory marker, nested keys
        elif full == metadata:
            listed, name = found["metadata"], "metadata"
        else:
            continue
        listed.append(ObjectInfo(name, size, modified, etag=etag or None))
