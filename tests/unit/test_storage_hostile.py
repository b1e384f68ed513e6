"""Hostile storage answers: an endpoint that is not S3 (an HTML page), listings with fields that
are not what they claim, WebHDFS JSON of the wrong shape. Each is a StorageError naming the
path, never a traceback and never an empty listing ("no batch committed yet").

The hostile servers are a few lines of http.server answering canned bodies: what a login
portal, a misconfigured proxy or a broken S3-compatible store sends.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import InvalidParameter, StorageError
from airflow_sparklag.session import Session
from airflow_sparklag.storage.s3 import (
    DEFAULT_MAX_ATTEMPTS,
    S3Options,
    S3Storage,
    client_config,
    worst_case_seconds,
)
from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage

XML_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
    'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>ck/</Prefix>'
    "<KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
)


def _listing(last_modified: str = "2026-01-01T00:00:00.000Z", size: str = "29") -> str:
    return (
        f"{XML_HEAD}<Contents><Key>ck/commits/0</Key><LastModified>{last_modified}"
        f'</LastModified><ETag>"e"</ETag><Size>{size}</Size><StorageClass>STANDARD'
        "</StorageClass></Contents></ListBucketResult>"
    )


class CannedServer:
    """Answers every GET/HEAD with one status, content type and body, set per test."""

    def __init__(self) -> None:
        self.answer: tuple[int, str, bytes] = (200, "text/plain", b"")
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, content_type, body = server.answer
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def server() -> Iterator[CannedServer]:
    canned = CannedServer()
    yield canned
    canned.httpd.shutdown()


def _s3(server: CannedServer) -> S3Storage:
    return S3Storage(
        S3Options(
            endpoint_url=server.url,
            aws_access_key_id="a",
            aws_secret_access_key="b",
            region_name="us-east-1",
            max_attempts=1,
            reader="boto3",  # obstore's answers to the same: test_storage_obstore_hostile.py
        )
    )


HTML_PAGE = b"<!DOCTYPE html>\n<html><head><meta charset=utf-8><title>Sign in</title><body><p>Hi"
S3_ANSWERS = [
    ("html page", 200, "text/html", HTML_PAGE, "did not answer like S3"),
    ("xhtml page", 200, "text/html", b"<html><body><p>Hi</p></body></html>", "no ListObjectsV2"),
    ("json", 200, "application/json", b'{"ok": true}', "did not answer like S3"),
    ("xml cut short", 200, "application/xml", _listing().encode()[:300], "did not answer like S3"),
    ("other xml", 200, "application/xml", b"<Result><Ok/></Result>", "no ListObjectsV2 result"),
    ("bad LastModified", 200, "application/xml", _listing("yesterday").encode(), "yesterday"),
    ("bad Size", 200, "application/xml", _listing(size="big").encode(), "'big'"),
    ("proxy error page", 502, "text/html", b"<html>Bad Gateway</html>", "HTTP 502"),
]


@pytest.mark.parametrize(
    ("case", "status", "content_type", "body", "problem"),
    S3_ANSWERS,
    ids=[c[0] for c in S3_ANSWERS],
)
def test_s3_answer_that_is_not_s3s_is_a_storage_error(
    server: CannedServer, case: str, status: int, content_type: str, body: bytes, problem: str
) -> None:
    server.answer = (status, content_type, body)
    storage = _s3(server)
    for call, path in [
        (lambda: CheckpointReader(storage, "s3a://b/ck").read(), "s3a://b/ck"),
        (lambda: storage.list_dir("s3a://b/ck/offsets"), "s3a://b/ck/offsets"),
        (lambda: storage.list_children("s3a://b/ck"), "s3a://b/ck"),
        (lambda: storage.walk("s3a://b/ck"), "s3a://b/ck"),
    ]:
        with pytest.raises(StorageError) as raised:
            call()
        message = str(raised.value)
        assert message.startswith(f"{path}: list failed: {server.url} "), message
        assert problem in message


def test_s3_valid_listing_from_the_canned_server_is_read(server: CannedServer) -> None:
    server.answer = (200, "application/xml", _listing().encode())
    [entry] = _s3(server).list_dir("s3a://b/ck/commits")
    assert (entry.name, entry.size, entry.modified) == ("0", 29, 1767225600.0)


def test_s3_html_instead_of_an_object_is_reported_on_read(server: CannedServer) -> None:
    server.answer = (500, "text/html", b"<html>oops</html>")
    with pytest.raises(StorageError, match=r"^s3a://b/ck/offsets/1: read failed: .*like S3"):
        _s3(server).read("s3a://b/ck/offsets/1")


# -- bounds -------------------------------------------------------------------------------------


def test_max_attempts_counts_every_attempt() -> None:
    # botocore's Config(retries={"max_attempts": n}) means n RETRIES; ours is the total.
    assert client_config(2, 3, 4) == {
        "connect_timeout": 2.0,
        "read_timeout": 3.0,
        "retries": {"total_max_attempts": 4, "mode": "standard"},
    }
    assert worst_case_seconds() == 60.0 and DEFAULT_MAX_ATTEMPTS == 3
    assert worst_case_seconds(1, 1.5, 2) == 5.0


def test_s3_client_is_built_with_the_bounds() -> None:
    storage = S3Storage(
        S3Options(
            endpoint_url="http://127.0.0.1:9",
            aws_access_key_id="a",
            aws_secret_access_key="b",
            region_name="us-east-1",
            connect_timeout=2,
            read_timeout=3,
            max_attempts=4,
        )
    )
    config = storage.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2, 3)
    assert config.retries == {"total_max_attempts": 4, "mode": "standard"}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("connect_timeout", 0),
        ("connect_timeout", -1),
        ("read_timeout", float("nan")),
        ("read_timeout", float("inf")),
        ("read_timeout", "20"),
        ("max_attempts", 0),
        ("max_attempts", 2.5),
        ("max_attempts", True),
    ],
)
def test_bad_bounds_are_refused_naming_the_option(option: str, value: Any) -> None:
    with pytest.raises(InvalidParameter) as raised:
        S3Storage(S3Options(**{option: value}))
    assert raised.value.parameter == option
    assert str(raised.value).startswith(f"{option}: ")


@pytest.mark.parametrize(
    ("url", "options", "name", "problem"),
    [
        ("s3a://b/ck", {"s3_options": {"read_timout": 5}}, "s3_options", "'read_timout'"),
        ("hdfs://nn/ck", {"webhdfs_options": {"retries": 2}}, "webhdfs_options", "'retries'"),
        ("hdfs://nn/ck", {"webhdfs_options": {"read_timeout": 0}}, "read_timeout", "> 0"),
        ("hdfs://nn/ck", {"webhdfs_options": {"connect_timeout": "5"}}, "connect_timeout", "'5'"),
    ],
)
def test_storage_options_that_cannot_be_used_are_named(
    url: str, options: dict[str, Any], name: str, problem: str
) -> None:
    with pytest.raises(InvalidParameter) as raised:
        Session(**options).storage(url)
    assert raised.value.parameter == name
    assert problem in str(raised.value)


# -- WebHDFS ------------------------------------------------------------------------------------

WEBHDFS_ANSWERS = [
    ("html", 200, "text/html", b"<html>login</html>", "body that is not JSON"),
    ("json cut short", 200, "application/json", b'{"FileStatuses":{"FileSt', "not JSON"),
    ("json list", 200, "application/json", b"[1, 2]", "unexpected JSON"),
    ("no FileStatuses", 200, "application/json", b'{"boolean": true}', "FileStatuses"),
    ("FileStatuses a list", 200, "application/json", b'{"FileStatuses": []}', "FileStatuses"),
    (
        "entry not an object",
        200,
        "application/json",
        b'{"FileStatuses": {"FileStatus": ["x"]}}',
        "not one",
    ),
    (
        "pathSuffix a number",
        200,
        "application/json",
        b'{"FileStatuses": {"FileStatus": [{"pathSuffix": 5, "type": "FILE"}]}}',
        "not one",
    ),
    (
        "length text",
        200,
        "application/json",
        b'{"FileStatuses": {"FileStatus": [{"pathSuffix": "0", "type": "FILE", "length": "x"}]}}',
        "not one",
    ),
    (
        "RemoteException not an object",
        500,
        "application/json",
        b'{"RemoteException": "boom"}',
        "HTTP 500",
    ),
]


@pytest.mark.parametrize(
    ("case", "status", "content_type", "body", "problem"),
    WEBHDFS_ANSWERS,
    ids=[c[0] for c in WEBHDFS_ANSWERS],
)
def test_webhdfs_answer_of_the_wrong_shape_is_a_storage_error(
    server: CannedServer, case: str, status: int, content_type: str, body: bytes, problem: str
) -> None:
    server.answer = (status, content_type, body)
    storage = WebHDFSStorage(
        server.url, WebHDFSOptions(user="spark", connect_timeout=1, read_timeout=2)
    )
    for call in (
        lambda: CheckpointReader(storage, "hdfs://nn/ck").read(),
        lambda: storage.list_dir("hdfs://nn/ck/commits"),
        lambda: storage.list_children("hdfs://nn/ck"),
        lambda: storage.walk("hdfs://nn/ck"),
    ):
        with pytest.raises(StorageError) as raised:
            call()
        assert str(raised.value).startswith("hdfs://nn/ck"), raised.value
        assert problem in str(raised.value)


def test_webhdfs_redirect_without_location_is_a_storage_error(server: CannedServer) -> None:
    server.answer = (307, "text/plain", b"")
    storage = WebHDFSStorage(server.url, WebHDFSOptions(connect_timeout=1, read_timeout=2))
    with pytest.raises(StorageError, match=r"^hdfs://nn/ck/offsets/1: OPEN answered HTTP 307"):
        storage.read("hdfs://nn/ck/offsets/1")


def test_hdfscli_alone_takes_these_answers(server: CannedServer) -> None:
    """Why read() and the error mapping check answers themselves (docs/connections.md, "HDFS"):
    HdfsCLI reads an OPEN answered 307 without a Location as an empty file, and error JSON of
    the wrong shape is a TypeError inside it. Once this fails, HdfsCLI checks: drop ours."""
    from hdfs import Client

    server.answer = (307, "text/plain", b"")
    with Client(server.url, timeout=2).read("/ck/offsets/1") as file:
        assert file.read() == b""
    server.answer = (500, "application/json", b'{"RemoteException": "boom"}')
    with pytest.raises(TypeError):
        Client(server.url, timeout=2).list("/ck")


def test_s3_errors_never_quote_the_credentials(server: CannedServer) -> None:
    # http.client refuses a header value with a line break and quotes it: the session token.
    storage = S3Storage(
        S3Options(
            endpoint_url=server.url,
            aws_access_key_id="AKIAEXAMPLE",
            aws_secret_access_key="secret-canary-5be1",
            aws_session_token="token-canary-77d0\n",
            region_name="us-east-1",
            max_attempts=1,
        )
    )
    with pytest.raises(StorageError) as raised:
        storage.list_dir("s3a://b/ck/offsets")
    assert str(raised.value).startswith("s3a://b/ck/offsets: list failed")
    assert "canary" not in str(raised.value)


# -- fsspec stores: credentials that cannot build a client --------------------------------------


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        ({"type": "authorized_user", "client_secret": "CANARY-gcs-secret-1"}, "lack the field"),
        ("KEYFILE-NOT-JSON", "JSONDecodeError"),
    ],
)
def test_gcs_credentials_that_cannot_build_a_client_are_named(
    tmp_path: Path, token: object, problem: str
) -> None:
    from airflow_sparklag.storage.fsspec_store import FsspecStorage

    if token == "KEYFILE-NOT-JSON":
        keyfile = tmp_path / "sa.json"
        keyfile.write_text("private_key=CANARY-gcs-secret-2")
        token = str(keyfile)
    with pytest.raises(StorageError) as raised:
        FsspecStorage.for_url("gs://bucket/ck", token=token, endpoint_url="http://127.0.0.1:9")
    message = str(raised.value)
    assert message.startswith("gs://bucket/ck: could not set up the gs:// client")
    assert problem in message and "CANARY" not in message
    assert raised.value.__cause__ is None  # nothing chained that could carry the token


def test_fsspec_errors_never_carry_option_values() -> None:
    from airflow_sparklag.storage.fsspec_store import option_secrets

    secrets = option_secrets(
        {
            "token": {"private_key": "CANARY key/with+chars", "client_email": "a@b.iam"},
            "account_key": "CANARYACCOUNTKEY==",
            "endpoint_url": "http://127.0.0.1:9",
        }
    )
    assert "CANARY key/with+chars" in secrets and "CANARY%20key%2Fwith%2Bchars" in secrets
    assert "CANARYACCOUNTKEY==" in secrets and "http://127.0.0.1:9" not in secrets
