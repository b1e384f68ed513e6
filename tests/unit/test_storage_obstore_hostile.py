"""Hostile S3 answers through the obstore read path: the same typed errors as boto3's.

The canned answers of ``test_storage_hostile.py`` (an HTML page, JSON, XML cut short or of
another shape, bad LastModified/Size, a proxy's error page) plus 403 and NoSuchBucket, read
through ``S3Storage(S3Options(reader="obstore"))``: never a listing that passes for "no batch yet".
"""

from __future__ import annotations

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import BucketNotFound, StorageAccessDenied, StorageError
from airflow_sparklag.storage.s3 import S3Storage
from tests.unit.test_storage_hostile import S3_ANSWERS, CannedServer, server
from tests.unit.test_storage_hostile import _s3 as hostile_s3

__all__ = ["server"]  # the canned server fixture, shared with test_storage_hostile

import obstore  # noqa: F401  (no skip: Python 3.10 runs leave this file out, see test_compat.sh)

ERROR_XML = '<?xml version="1.0"?><Error><Code>{}</Code><Message>m</Message></Error>'
TYPED = [
    ("access denied", 403, "AccessDenied", StorageAccessDenied),
    ("no such bucket", 404, "NoSuchBucket", BucketNotFound),
]


def _s3(server: CannedServer, reader: str) -> S3Storage:
    """``test_storage_hostile``'s storage on the canned server, reading through ``reader``."""
    storage = hostile_s3(server)
    storage.reader = reader
    return storage


@pytest.mark.parametrize(
    ("case", "status", "content_type", "body"),
    [c[:4] for c in S3_ANSWERS],
    ids=[c[0] for c in S3_ANSWERS],
)
def test_a_listing_that_is_not_s3s_is_a_storage_error_through_obstore(
    server: CannedServer, case: str, status: int, content_type: str, body: bytes
) -> None:
    server.answer = (status, content_type, body)
    with pytest.raises(StorageError) as raised:
        CheckpointReader(_s3(server, "obstore"), "s3a://b/ck", query_id=False).read()
    assert str(raised.value).startswith("s3a://b/ck: list failed")
    assert type(raised.value) is StorageError


@pytest.mark.parametrize(("case", "status", "code", "error"), TYPED, ids=[c[0] for c in TYPED])
def test_typed_s3_errors_are_the_same_through_obstore(
    server: CannedServer, case: str, status: int, code: str, error: type[Exception]
) -> None:
    server.answer = (status, "application/xml", ERROR_XML.format(code).encode())
    for reader in ("boto3", "obstore"):
        storage = _s3(server, reader)
        with pytest.raises(error, match=r"^s3a://b/ck: "):
            CheckpointReader(storage, "s3a://b/ck").read()
        with pytest.raises(error, match=r"^s3a://b/ck/offsets/1: "):
            storage.read("s3a://b/ck/offsets/1")


HINTED = [
    # a 301 naming no region: botocore's region redirector recursed until RecursionError
    # ("internal error, please report" from the CLI)
    (301, "PermanentRedirect", "answered a redirect (HTTP 301) naming no region"),
    (400, "AuthorizationHeaderMalformed", "bucket 'b' is in another region than the client's"),
    (503, "SlowDown", "S3 throttled or was unavailable through every attempt"),
]


@pytest.mark.parametrize(("status", "code", "hint"), HINTED, ids=[c[1] for c in HINTED])
def test_a_bucket_in_another_region_and_throttling_say_what_to_do(
    server: CannedServer, status: int, code: str, hint: str
) -> None:
    # Were "list failed: <code>: m": nothing said to give the bucket's region or wait.
    server.answer = (status, "application/xml", ERROR_XML.format(code).encode())
    for reader in ("boto3", "obstore"):
        with pytest.raises(StorageError, match=r"^s3a://b/ck: list failed: ") as raised:
            CheckpointReader(_s3(server, reader), "s3a://b/ck", query_id=False).read()
        assert hint in str(raised.value)


def test_a_proxy_error_page_on_read_is_a_storage_error_through_obstore(
    server: CannedServer,
) -> None:
    server.answer = (502, "text/html", b"<html>Bad Gateway</html>")
    with pytest.raises(StorageError, match=r"^s3a://b/ck/offsets/1: read failed"):
        _s3(server, "obstore").read("s3a://b/ck/offsets/1")


def test_a_redirect_to_the_buckets_region_sends_that_buckets_reads_through_boto3(
    server: CannedServer,
) -> None:
    """object_store follows no region redirect; boto3 does (this canned server answers 301 to
    everything, so boto3's redirects end in its own error, still a StorageError naming the
    path)."""
    # As S3 answers: the bucket's region in the error (without it botocore HEADs the bucket,
    # which this server also answers 301, and recurses until Python's limit).
    redirect = ERROR_XML.format("PermanentRedirect").replace(
        "</Error>", "<Region>eu-west-1</Region></Error>"
    )
    server.answer = (301, "application/xml", redirect.encode())
    storage = _s3(server, "obstore")
    assert storage._obstore("b") is not None
    with pytest.raises(StorageError, match=r"^s3a://b/ck/offsets/1: read failed"):
        storage.read("s3a://b/ck/offsets/1")
    assert storage._obstore("b") is None and storage._obstore("other") is not None
