"""The benchmarks' light S3 server (testbed/light_s3.py) lists exactly as moto does.

The latency benchmark serves its fleet from the light server (moto and s3rver cost more server
CPU per listing than the latency studied); these tests show that what the package reads from
it is what it reads from moto: every ListObjectsV2 answer equal (keys, sizes, ETags, paging,
common prefixes, URL-encoded keys; only LastModified, the upload time, differs), and the same
checkpoint listings, GETs and request counts through the package's own S3 backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_sparklag.storage.s3 import S3Options, S3Storage
from testbed.light_s3 import serve_in_thread
from testbed.s3_server import moto_in_thread, put_objects

BUCKET = "light"
CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "region_name": "us-east-1",
}
KEYS = [
    "ck/commits/0",
    "ck/commits/1",
    "ck/commits/10",
    "ck/metadata",
    "ck/metadata.crc",
    "ck/offsets/0",
    "ck/offsets/1",
    "ck/offsets/10",
    "ck/offsets/with space",
    "ck/offsets/plus+sign",
    "ck/offsets/ünïcødé",
    "ck/offsets/amp&lt",
    "ck/sources/0/0",
    *[f"ck/state/0/{i}/1.delta" for i in range(40)],
    "ck-old/offsets/0",
    "ck1/offsets/0",
    "ck10/offsets/0",
    "team/a/ck/offsets/0",
    *[f"wide/offsets/{i}" for i in range(1205)],
]
REQUESTS: list[dict[str, Any]] = [
    {},
    {"Prefix": "ck/"},
    {"Prefix": "ck"},
    {"Prefix": "ck/", "StartAfter": "ck/commits", "MaxKeys": 5},
    {"Prefix": "ck/", "StartAfter": "ck/commits", "MaxKeys": 320},
    {"Prefix": "ck/", "Delimiter": "/"},
    {"Prefix": "", "Delimiter": "/"},
    {"Prefix": "team/", "Delimiter": "/"},
    {"Prefix": "ck/offsets/", "Delimiter": "/", "MaxKeys": 3},
    {"Prefix": "wide/offsets/"},
    {"Prefix": "wide/", "StartAfter": "wide/offsets/5", "MaxKeys": 150},
    {"Prefix": "nothing/"},
    {"Prefix": "ck/", "StartAfter": "zzz"},
]


def _client(url: str) -> Any:
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=url, **CREDENTIALS)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    with moto_in_thread() as moto_url:
        light, light_url = serve_in_thread()
        for url in (moto_url, light_url):
            put_objects(_client(url), BUCKET, [(key, key.encode()) for key in KEYS])
        yield moto_url, light_url
        light.shutdown()


def _pages(url: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every page of a listing, as botocore parses it, without what differs by design."""
    client = _client(url)
    pages = []
    token = None
    while True:
        kwargs = dict(request, Bucket=BUCKET)
        if token:
            kwargs["ContinuationToken"] = token
        page = client.list_objects_v2(**kwargs)
        token = page.get("NextContinuationToken")
        comparable = {
            k: v
            for k, v in page.items()
            if k not in ("ResponseMetadata", "ContinuationToken", "NextContinuationToken")
        }
        comparable["Contents"] = [
            {k: v for k, v in item.items() if k != "LastModified"}
            for item in page.get("Contents", [])
        ]
        pages.append(comparable)
        if not page.get("IsTruncated"):
            return pages


@pytest.mark.parametrize("request_", REQUESTS, ids=[repr(r) for r in REQUESTS])
def test_listings_equal_moto(servers: tuple[str, str], request_: dict[str, Any]) -> None:
    moto_url, light_url = servers
    assert _pages(light_url, request_) == _pages(moto_url, request_)


@pytest.mark.parametrize("location", ["ck", "wide", "ck1", "team/a/ck", "missing"])
def test_checkpoint_reads_equal_moto(servers: tuple[str, str], location: str) -> None:
    results = []
    for url in servers:
        storage = S3Storage(S3Options(endpoint_url=url, **CREDENTIALS))
        listed = storage.list_checkpoint(f"s3://{BUCKET}/{location}", first_page=50)
        names = {d: [(o.name, o.size, o.content_md5) for o in v] for d, v in listed.items()}
        bodies = [
            storage.read(f"s3://{BUCKET}/{location}/offsets/{name}")
            for name, _size, _md5 in names["offsets"][:5]
        ]
        children = storage.list_children(f"s3://{BUCKET}/{location}")
        results.append((names, bodies, children, dict(storage.requests.by_operation)))
    assert results[0] == results[1]


def test_the_server_listens_with_a_backlog_for_connection_bursts() -> None:
    """The backlog is set before listen(): a burst of new connections (a check opening its
    pools) is never dropped (each drop costs ~1 s of SYN retry and counts in ListenOverflows)."""
    import subprocess

    from testbed.light_s3 import LISTEN_BACKLOG, listen_overflows

    server, _url = serve_in_thread()
    try:
        port = server.server_address[1]
        shown = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout.split()
        assert int(shown[2]) == LISTEN_BACKLOG >= 1024  # Send-Q of a listening socket
        assert listen_overflows() >= 0
    finally:
        server.shutdown()
