"""A light in-memory S3 HTTP API, FOR BENCHMARKS ONLY (the tests keep moto).

Why: the latency benchmark (``benchmarks/latency_bench.py``) studies 20 ms of network latency
per S3 answer on a 2-core machine that also runs the client, the Kafka broker and toxiproxy.
s3rver spends ~45-50 ms of CPU on a 200-key listing (it reads a metadata file per key) and
moto more (it scans the bucket): the server, not the latency, would be measured. This server
keeps every bucket as a sorted key list with each key's ``<Contents>`` XML rendered once at
PUT time, so a listing is a bisect and a join: ~0.2-0.5 ms of server CPU per request
(``benchmarks/latency_bench.py --server-cost`` prints it).

What it serves (path-style, ``http://127.0.0.1:<port>/<bucket>/<key>``): ListBuckets,
CreateBucket, ListObjectsV2 (``prefix``, ``delimiter``, ``start-after``, ``max-keys``,
``continuation-token``, ``encoding-type=url``), GetObject, HeadObject, PutObject (with
``If-None-Match: *``), DeleteObject; anything else answers 501 NotImplemented. Signatures are
not checked, but the access key id of every request's ``Authorization`` is counted
(``GET /_stats``: requests per operation and per access key id). ``POST /_bulk/<bucket>``
loads many objects in one request (a ``marshal``-ed list of ``(key, body)``), which is how the
benchmark uploads a 500,000-object fleet in seconds; it is not S3.

``tests/unit/test_light_s3.py`` checks its ListObjectsV2 answers against moto's, key by key
and page by page, through boto3 and through the package's own reader.

    python -m testbed.light_s3 --port 9000
"""

from __future__ import annotations

import argparse
import base64
import bisect
import hashlib
import json
import marshal
import re
import sys
import threading
import time
from collections import Counter
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from testbed.process import Process
from testbed.s3_server import S3Server

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_CREDENTIAL = re.compile(r"Credential=([^/]+)/")


class _Object:
    __slots__ = ("body", "etag", "fragment", "fragment_url", "http_date")

    def __init__(self, key: str, body: bytes, modified: float, checksum: str = "") -> None:
        self.body = body
        self.etag = '"' + hashlib.md5(body).hexdigest() + '"'  # S3's ETag is the MD5
        iso = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(modified))
        self.http_date = formatdate(modified, usegmt=True)
        quoted = self.etag.replace('"', "&quot;")
        tail = (
            f"</Key><LastModified>{iso}</LastModified><ETag>{quoted}</ETag>"
            + (f"<ChecksumAlgorithm>{checksum}</ChecksumAlgorithm>" if checksum else "")
            + f"<Size>{len(body)}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        )
        self.fragment = f"<Contents><Key>{escape(key)}{tail}"
        encoded = _url(key)
        self.fragment_url = self.fragment if encoded == key else f"<Contents><Key>{encoded}{tail}"


def _url(text: str) -> str:
    # S3's encoding-type=url: percent-encoding of the UTF-8 bytes, "/" kept.
    return quote(text, safe="/")


class Bucket:
    """Sorted keys and their objects; one lock for writers and readers."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.objects: dict[str, _Object] = {}
        self.lock = threading.Lock()

    def put(self, key: str, body: bytes, checksum: str = "") -> None:
        obj = _Object(key, body, time.time(), checksum)
        with self.lock:
            if key not in self.objects:
                bisect.insort(self.keys, key)
            self.objects[key] = obj

    def put_many(self, items: list[tuple[str, bytes]]) -> None:
        now = time.time()
        built = {key: _Object(key, body, now) for key, body in items}
        with self.lock:
            self.objects.update(built)
            self.keys = sorted(self.objects)

    def delete(self, key: str) -> None:
        with self.lock:
            if self.objects.pop(key, None) is not None:
                del self.keys[bisect.bisect_left(self.keys, key)]


class Store:
    def __init__(self) -> None:
        self.buckets: dict[str, Bucket] = {}
        self.stats: Counter[str] = Counter()
        self.lock = threading.Lock()

    def count(self, operation: str, authorization: str | None) -> None:
        match = _CREDENTIAL.search(authorization or "")
        with self.lock:
            self.stats[f"op:{operation}"] += 1
            self.stats[f"key:{match.group(1) if match else ''}"] += 1


def _kind(key: str) -> str:
    """The checkpoint part a key belongs to: its directory (``offsets``), or its name for a
    top-level file (``metadata``)."""
    parts = key.rsplit("/", 2)
    return parts[-2] if len(parts) > 1 and parts[-2] in ("offsets", "commits") else parts[-1]


def list_v2(bucket_name: str, bucket: Bucket, query: dict[str, str]) -> str:
    """The ListObjectsV2 XML answer (the same elements, in the same order, as S3's)."""
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    max_keys = max(0, min(1000, int(query.get("max-keys", "1000"))))
    encode = query.get("encoding-type") == "url"
    token = query.get("continuation-token")
    start_after = query.get("start-after", "")
    after = base64.urlsafe_b64decode(token.encode()).decode() if token else start_after
    with bucket.lock:
        keys, objects = bucket.keys, bucket.objects
        index = bisect.bisect_right(keys, after) if after else 0
        index = max(index, bisect.bisect_left(keys, prefix))
        parts: list[str] = []
        prefixes: list[str] = []
        last = ""
        truncated = False
        while index < len(keys):
            key = keys[index]
            if not key.startswith(prefix):
                break
            if len(parts) + len(prefixes) >= max_keys:
                truncated = True
                break
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = key[: cut + len(delimiter)]
                prefixes.append(common)
                last = common
                # every key under that common prefix is skipped
                index = bisect.bisect_left(keys, common + "\U0010ffff")
                continue
            obj = objects[key]
            parts.append(obj.fragment_url if encode else obj.fragment)
            last = key
            index += 1
    return _list_xml(bucket_name, query, parts, prefixes, max_keys, truncated, last)


def _list_xml(
    bucket_name: str,
    query: dict[str, str],
    parts: list[str],
    prefixes: list[str],
    max_keys: int,
    truncated: bool,
    last: str,
) -> str:
    encode = query.get("encoding-type") == "url"

    def text(value: str) -> str:
        return _url(value) if encode else escape(value)

    head = [
        f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{_NS}">',
        f"<Name>{escape(bucket_name)}</Name><Prefix>{text(query.get('prefix', ''))}</Prefix>",
    ]
    if query.get("delimiter"):
        head.append(f"<Delimiter>{text(query['delimiter'])}</Delimiter>")
    head.append(f"<MaxKeys>{max_keys}</MaxKeys>")
    if encode:
        head.append("<EncodingType>url</EncodingType>")
    head.append(f"<KeyCount>{len(parts) + len(prefixes)}</KeyCount>")
    head.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    if "continuation-token" in query:
        head.append(f"<ContinuationToken>{escape(query['continuation-token'])}</ContinuationToken>")
    if truncated:
        token = base64.urlsafe_b64encode(last.encode()).decode()
        head.append(f"<NextContinuationToken>{token}</NextContinuationToken>")
    if query.get("start-after") and "continuation-token" not in query:  # as moto
        head.append(f"<StartAfter>{text(query['start-after'])}</StartAfter>")
    tail = "".join(f"<CommonPrefixes><Prefix>{text(p)}</Prefix></CommonPrefixes>" for p in prefixes)
    return "".join(head) + "".join(parts) + tail + "</ListBucketResult>"


def _error(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error>"
    ).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "light-s3"
    # The headers and the body are two writes: with Nagle's algorithm the body waits for the
    # client's delayed ACK of the headers, ~40 ms on Linux, on top of the latency the
    # benchmark adds (measured: 44 ms per request on loopback before, 0.5-2 ms after).
    disable_nagle_algorithm = True
    store: Store

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", "light")
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _fail(self, status: int, code: str, message: str) -> None:
        self._send(status, _error(code, message), {"Content-Type": "application/xml"})

    def _target(self) -> tuple[str, str, dict[str, str]]:
        parts = urlsplit(self.path)
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        return bucket, key, query

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        bucket_name, key, query = self._target()
        if bucket_name == "_stats":
            self._send(200, json.dumps(self.store.stats).encode())
            return
        if not bucket_name:
            self._list_buckets()
            return
        bucket = self.store.buckets.get(bucket_name)
        if bucket is None:
            self._fail(404, "NoSuchBucket", "The specified bucket does not exist")
            return
        if not key:
            if query.get("list-type") != "2":
                self._fail(501, "NotImplemented", "only ListObjectsV2 is served")
                return
            self.store.count("list", self.headers.get("Authorization"))
            body = list_v2(bucket_name, bucket, query).encode()
            self._send(200, body, {"Content-Type": "application/xml"})
            return
        self._get_object(bucket, key)

    do_HEAD = do_GET

    def _get_object(self, bucket: Bucket, key: str) -> None:
        operation = "head" if self.command == "HEAD" else "read"
        self.store.count(operation, self.headers.get("Authorization"))
        with self.store.lock:  # what was read: "read:offsets", "read:commits", "read:metadata"
            self.store.stats[f"{operation}:{_kind(key)}"] += 1
        obj = bucket.objects.get(key)
        if obj is None:
            if self.command == "HEAD":
                self._send(404)
            else:
                self._fail(404, "NoSuchKey", "The specified key does not exist.")
            return
        headers = {
            "Content-Type": "binary/octet-stream",
            "ETag": obj.etag,
            "Last-Modified": obj.http_date,
            "Content-Length": str(len(obj.body)),
            "Accept-Ranges": "bytes",
        }
        self._send(200, obj.body, headers)

    def _list_buckets(self) -> None:
        names = "".join(
            f"<Bucket><Name>{escape(n)}</Name><CreationDate>2024-01-01T00:00:00.000Z"
            "</CreationDate></Bucket>"
            for n in sorted(self.store.buckets)
        )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<ListAllMyBucketsResult xmlns="{_NS}">'
            f"<Owner><ID>light</ID><DisplayName>light</DisplayName></Owner>"
            f"<Buckets>{names}</Buckets></ListAllMyBucketsResult>"
        ).encode()
        self._send(200, body, {"Content-Type": "application/xml"})

    def do_PUT(self) -> None:
        bucket_name, key, _query = self._target()
        body = self._body()
        self.store.count("write", self.headers.get("Authorization"))
        if not key:
            self.store.buckets.setdefault(bucket_name, Bucket())
            self._send(200, headers={"Location": f"/{bucket_name}"})
            return
        bucket = self.store.buckets.get(bucket_name)
        if bucket is None:
            self._fail(404, "NoSuchBucket", "The specified bucket does not exist")
            return
        if self.headers.get("If-None-Match") == "*" and key in bucket.objects:
            self._fail(412, "PreconditionFailed", "At least one of the preconditions failed")
            return
        # S3 lists the algorithm of a checksum sent with the PUT (boto3 sends CRC32 by default)
        checksum = self.headers.get("x-amz-sdk-checksum-algorithm") or ""
        bucket.put(key, body, checksum.upper())
        self._send(200, headers={"ETag": bucket.objects[key].etag})

    def do_DELETE(self) -> None:
        bucket_name, key, _query = self._target()
        self.store.count("delete", self.headers.get("Authorization"))
        bucket = self.store.buckets.get(bucket_name)
        if bucket is None:
            self._fail(404, "NoSuchBucket", "The specified bucket does not exist")
            return
        bucket.delete(key)
        self._send(204)

    def do_POST(self) -> None:
        bucket_name, key, _query = self._target()
        body = self._body()
        if bucket_name != "_bulk" or not key:
            self._fail(501, "NotImplemented", "POST is only the benchmark's /_bulk/<bucket>")
            return
        items = marshal.loads(body)  # the benchmark's own upload, on loopback
        self.store.buckets.setdefault(key, Bucket()).put_many(items)
        self._send(200, json.dumps({"loaded": len(items)}).encode())


# The listen backlog: a client opening many connections at once (a fleet check's first
# requests) must find each one accepted. socketserver calls listen() in the constructor, so the
# size must be on the class: set on an instance after construction it is never used (the
# backlog stayed 5 and the kernel's ListenOverflows counted dropped SYNs, ~1 s of retry each).
LISTEN_BACKLOG = 1024


class LightServer(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


def make_server(port: int = 0, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server with an empty store of its own (``port=0``: an ephemeral port)."""
    handler = type("LightS3Handler", (Handler,), {"store": Store()})
    return LightServer((host, port), handler)


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen backlog was full
    (``TcpExt: ListenOverflows`` in /proc/net/netstat); a benchmark checks it stays put."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            fields = dict(zip(names.split()[1:], values.split()[1:], strict=True))
            return int(fields.get("ListenOverflows", 0))
    return 0


def serve_in_thread() -> tuple[ThreadingHTTPServer, str]:
    """A server in a daemon thread of this process (for tests): the server and its URL;
    ``server.shutdown()`` stops it."""
    server = make_server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class LightS3Server(S3Server):
    """This module's server as a process of its own (``testbed.s3_server.S3Server``'s
    interface: ``endpoint``, ``options``, ``client()``, ``start()``, ``stop()``)."""

    def start(self, timeout: float = 60.0) -> LightS3Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        repo = Path(__file__).resolve().parent.parent
        self.process = Process(
            "light-s3",
            [sys.executable, "-m", "testbed.light_s3", "--port", str(self.port)],
            self.workdir / "light-s3.log",
            cwd=repo,
        )
        self.process.wait_ready(self._answers, timeout, f"S3 ListBuckets on {self.endpoint}")
        return self

    def bulk_load(self, bucket: str, items: list[tuple[str, bytes]]) -> None:
        """Create ``bucket`` (if needed) and store every ``(key, body)`` in one request."""
        import requests

        response = requests.post(
            f"{self.endpoint}/_bulk/{bucket}", data=marshal.dumps(items), timeout=600
        )
        response.raise_for_status()

    def stats(self) -> dict[str, int]:
        import requests

        return dict(requests.get(f"{self.endpoint}/_stats", timeout=30).json())

    def spark_conf(self) -> dict[str, str]:
        raise NotImplementedError("the light S3 server is for the storage benchmarks only")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    make_server(args.port, args.host).serve_forever()


if __name__ == "__main__":
    main()
