"""The fast ListObjectsV2 parser gives exactly botocore's answer, on a real (moto) S3 server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_sparklag.storage.s3 import S3Storage, _parse_timestamp
from airflow_sparklag.storage.s3_parsing import FastListParser
from testbed.s3_server import moto_in_thread, put_objects

BUCKET = "parsing"
CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "region_name": "us-east-1",
}
# Keys that need URL encoding (botocore asks for encoding-type=url and decodes them after the
# parse), nested "directories", and a log wider than one page.
ODD_KEYS = [
    "ck/commits/0",
    "ck/metadata",
    "ck/offsets/0",
    "ck/offsets/1",
    "ck/offsets/with space",
    "ck/offsets/plus+sign",
    "ck/offsets/percent%41",
    "ck/offsets/ünïcødé",
    "ck/offsets/amp&lt",
    "ck/sources/0/0",
    "ck/state/0/1/1.delta",
    "ck-old/offsets/0",
]
WIDE = [f"wide/offsets/{index}" for index in range(1205)]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_in_thread() as url:
        put_objects(_stock_client(url), BUCKET, [(key, key.encode()) for key in ODD_KEYS + WIDE])
        yield url


def _stock_client(url: str) -> Any:
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=url, **CREDENTIALS)


def _fast_client(url: str) -> Any:
    return S3Storage(endpoint_url=url, **CREDENTIALS).client


def _comparable(response: dict[str, Any]) -> dict[str, Any]:
    # Request ids and the Date header differ between two requests; everything else must not.
    response = dict(response)
    metadata = dict(response.pop("ResponseMetadata"))
    metadata.pop("RequestId", None)
    metadata.pop("HostId", None)
    headers = dict(metadata.pop("HTTPHeaders", {}))
    headers.pop("date", None)
    headers.pop("x-amz-request-id", None)
    headers.pop("x-amzn-requestid", None)
    headers.pop("x-amz-id-2", None)
    return {**response, "ResponseMetadata": {**metadata, "HTTPHeaders": headers}}


LISTINGS = [
    {"Prefix": "ck/"},
    {"Prefix": "ck/", "Delimiter": "/"},
    {"Prefix": "ck/offsets/", "Delimiter": "/"},
    {"Prefix": "ck/", "StartAfter": "ck/commits", "MaxKeys": 3},
    {"Prefix": "ck"},
    {"Prefix": "nothing-here/"},
    {"Prefix": "wide/offsets/", "Delimiter": "/"},
    {"Prefix": "wide/offsets/", "MaxKeys": 7, "FetchOwner": True},
    {},
]


@pytest.mark.parametrize("request_args", LISTINGS, ids=[str(a) for a in LISTINGS])
def test_fast_listing_equals_botocore(endpoint: str, request_args: dict[str, Any]) -> None:
    stock, fast = _stock_client(endpoint), _fast_client(endpoint)
    calls = {"fast": 0}
    original = FastListParser._parse_list_v2

    def counted(self: Any, *args: Any) -> Any:
        calls["fast"] += 1
        return original(self, *args)

    FastListParser._parse_list_v2 = counted  # type: ignore[method-assign]
    try:
        token: str | None = None
        pages = 0
        while True:
            args = {"Bucket": BUCKET, **request_args}
            if token:
                args["ContinuationToken"] = token
            expected = stock.list_objects_v2(**args)
            got = fast.list_objects_v2(**args)
            assert _comparable(got) == _comparable(expected)
            pages += 1
            token = expected.get("NextContinuationToken")
            if not expected.get("IsTruncated") or not token:
                break
    finally:
        FastListParser._parse_list_v2 = original  # type: ignore[method-assign]
    assert calls["fast"] == pages  # the fast path answered, not botocore's fallback


def test_the_decoded_keys_come_back_exactly(endpoint: str) -> None:
    keys = [
        item["Key"]
        for item in _fast_client(endpoint).list_objects_v2(Bucket=BUCKET, Prefix="ck/")["Contents"]
    ]
    assert keys == sorted(k for k in ODD_KEYS if k.startswith("ck/"))


def test_unknown_elements_and_errors_fall_back_to_botocore(endpoint: str) -> None:
    fast = _fast_client(endpoint)
    # An error response is botocore's to parse: the usual ClientError.
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as raised:
        fast.list_objects_v2(Bucket="no-such-bucket-here")
    assert raised.value.response["Error"]["Code"] == "NoSuchBucket"
    # An element the fast path has never seen: botocore parses the whole body instead.
    parser = FastListParser(timestamp_parser=_parse_timestamp)
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?>'
        b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b"<Name>b</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>"
        b"<IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
        b"<LastModified>2024-05-01T12:00:00.000Z</LastModified><ETag>&quot;x&quot;</ETag>"
        b"<Size>3</Size><StorageClass>GLACIER</StorageClass><RestoreStatus>"
        b"<IsRestoreInProgress>true</IsRestoreInProgress></RestoreStatus></Contents>"
        b"</ListBucketResult>"
    )
    shape = _fast_client(endpoint).meta.service_model.operation_model("ListObjectsV2").output_shape
    response = {"status_code": 200, "headers": {}, "body": body}
    with pytest.raises(Exception, match="RestoreStatus"):
        parser._parse_list_v2(response, shape)
    parsed = parser.parse(response, shape)
    assert parsed["Contents"][0]["RestoreStatus"] == {"IsRestoreInProgress": True}
    assert parsed["Contents"][0]["Size"] == 3 and parsed["KeyCount"] == 1


def test_fast_parse_is_cheaper_than_botocore(endpoint: str) -> None:
    """Not a benchmark: a guard that the fast path is in use and not slower (CPU time of
    parsing one real 1,000-key page, best of 5)."""
    stock, fast = _stock_client(endpoint), _fast_client(endpoint)
    args = {"Bucket": BUCKET, "Prefix": "wide/offsets/"}
    body = {}

    def keep(http_response: Any, **_: Any) -> None:
        body["xml"] = http_response.content

    stock.meta.events.register("after-call.s3.ListObjectsV2", keep)
    stock.list_objects_v2(**args)
    shape = stock.meta.service_model.operation_model("ListObjectsV2").output_shape
    response = {"status_code": 200, "headers": {}, "body": body["xml"]}
    botocore_parser = stock._endpoint._response_parser_factory.create_parser("rest-xml")
    ours = fast._endpoint._response_parser_factory.create_parser("rest-xml")
    assert isinstance(ours, FastListParser)

    def best(parser: Any) -> float:
        times = []
        for _ in range(5):
            start = time.process_time()
            parser.parse(dict(response), shape)
            times.append(time.process_time() - start)
        return min(times)

    assert best(ours) < best(botocore_parser)
