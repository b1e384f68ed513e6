"""The obstore read path of S3Storage (storage/s3_obstore.py) against a real (moto) S3 server:
the same listings, bodies, checkpoint states and typed errors as boto3's; credentials taken
from the boto3 client, an assumed role's included; writes stay on boto3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore  # noqa: F401  (no skip: Python 3.10 runs leave this file out, see test_compat.sh)
import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import (
    BucketNotFound,
    CheckpointNotFound,
    InvalidParameter,
    StorageError,
    StorageNotFound,
)
from airflow_sparklag.session import Session
from airflow_sparklag.storage.s3 import S3Storage
from testbed.light_s3 import serve_in_thread
from testbed.s3_server import MOTO_CREDENTIALS, checkpoint_files, moto_client, moto_with_objects

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
BUCKET = "obstore-reads"
CREDENTIALS = MOTO_CREDENTIALS
EXTRA_KEYS = (
    [f"ck43/state/0/{i % 200}/{i}.delta" for i in range(1500)]  # past one 1,000-key page
    + ["ck43/offsets/", "ck43/commits/", "ck43/metadata.crc"]  # s3a markers, a stray file
    + [f"wide/offsets/{i}" for i in range(1005)]
    + [f"wide/commits/{i}" for i in range(1005)]
    + ["ck1/offsets/0", "ck1/commits/0", "ck1-old/offsets/9", "ck10/offsets/3"]
)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    files = checkpoint_files(DATA, "ck43", "ck35") + [(k, k.encode()) for k in EXTRA_KEYS]
    with moto_with_objects(BUCKET, files) as url:
        yield url


def _both(endpoint: str) -> tuple[S3Storage, S3Storage]:
    return (
        S3Storage(endpoint_url=endpoint, reader="boto3", **CREDENTIALS),
        S3Storage(endpoint_url=endpoint, reader="obstore", **CREDENTIALS),
    )


def _listed(storage: S3Storage, location: str) -> dict[str, list[tuple[Any, ...]]]:
    found = storage.list_checkpoint(location)
    return {
        directory: [(o.name, o.size, o.content_md5, round(o.modified)) for o in entries]
        for directory, entries in found.items()
    }


@pytest.mark.parametrize("location", ["ck43", "ck35", "wide", "ck1", "ck10", "missing", ""])
def test_checkpoint_listing_equals_boto3(endpoint: str, location: str) -> None:
    boto, fast = _both(endpoint)
    url = f"s3a://{BUCKET}/{location}"
    listed = _listed(fast, url)
    assert listed == _listed(boto, url)
    # An empty obstore listing is asked again through boto3 (obstore reads a 200 HTML page or
    # another service's XML as an empty listing: see test_storage_obstore_hostile.py).
    empty = not any(listed.values())
    assert fast.requests.by_operation == {"list": 2 if empty else 1}


def test_reads_equal_boto3_and_fill_content_md5(endpoint: str) -> None:
    boto, fast = _both(endpoint)
    listed = fast.list_checkpoint(f"s3a://{BUCKET}/ck43")
    assert listed["commits"] and all(o.content_md5 for o in listed["commits"])
    for entry in listed["offsets"]:
        path = f"s3a://{BUCKET}/ck43/offsets/{entry.name}"
        assert fast.read(path) == boto.read(path)


@pytest.mark.parametrize("history", [1, 3])
def test_checkpoint_state_equals_boto3(endpoint: str, history: int) -> None:
    boto, fast = _both(endpoint)
    location = f"s3a://{BUCKET}/ck43"
    assert CheckpointReader(fast, location).read(history=history) == CheckpointReader(
        boto, location
    ).read(history=history)
    assert fast.requests.by_operation == boto.requests.by_operation


def test_errors_are_typed(endpoint: str) -> None:
    _, fast = _both(endpoint)
    with pytest.raises(StorageNotFound, match="ck43/offsets/999: no such object"):
        fast.read(f"s3a://{BUCKET}/ck43/offsets/999")
    with pytest.raises(BucketNotFound, match="'no-such-bucket' does not exist"):
        fast.list_checkpoint("s3a://no-such-bucket/ck")
    with pytest.raises(CheckpointNotFound):
        CheckpointReader(fast, f"s3a://{BUCKET}/missing").read()
    refused = S3Storage(endpoint_url="http://127.0.0.1:9", reader="obstore", max_attempts=1)
    refused._client_options.update(CREDENTIALS)
    with pytest.raises(StorageError, match="read failed"):
        refused.read(f"s3a://{BUCKET}/ck43/metadata")
    with pytest.raises(InvalidParameter):
        S3Storage(reader="rust")


def test_writes_stay_on_boto3(endpoint: str) -> None:
    _, fast = _both(endpoint)
    sent: list[str] = []
    fast.client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method)
    )
    fast.write_atomic(f"s3a://{BUCKET}/written/x", b"body")
    assert fast.read(f"s3a://{BUCKET}/written/x") == b"body"
    assert sent == ["HEAD", "PUT"]  # the read went through obstore


def test_auto_keeps_a_handed_in_client_and_the_session_uses_obstore(endpoint: str) -> None:
    client = moto_client(endpoint)
    assert S3Storage(client=client, reader="auto")._obstore() is None
    assert S3Storage(endpoint_url=endpoint, reader="auto", **CREDENTIALS)._obstore() is not None
    with Session(s3_options={"endpoint_url": endpoint, "reader": "obstore", **CREDENTIALS}) as s:
        state = s.read(f"s3a://{BUCKET}/ck35", history=1, query_id=False)
        assert state.committed_batch_id is not None
        assert s.storage_requests == 2


@pytest.mark.parametrize("reader", ["obstore", "lean"])
def test_assumed_role_credentials_sign_every_fast_reader_request(reader: str) -> None:
    """Credentials come from the boto3 client: a role assumed through (moto's) STS, refreshed
    by botocore. The light S3 server records each request's access key id."""
    import boto3
    import botocore.session
    from botocore.credentials import RefreshableCredentials
    from moto.server import ThreadedMotoServer

    sts_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    sts_server.start()
    light, light_url = serve_in_thread()
    try:
        host, port = sts_server.get_host_and_port()
        sts = boto3.session.Session().client(
            "sts", endpoint_url=f"http://{host}:{port}", **CREDENTIALS
        )
        issued: list[str] = []

        def assume() -> dict[str, Any]:
            creds = sts.assume_role(
                RoleArn="arn:aws:iam::123456789012:role/r", RoleSessionName="sparklag"
            )
            issued.append(creds["Credentials"]["AccessKeyId"])
            return {
                "access_key": creds["Credentials"]["AccessKeyId"],
                "secret_key": creds["Credentials"]["SecretAccessKey"],
                "token": creds["Credentials"]["SessionToken"],
                "expiry_time": creds["Credentials"]["Expiration"].isoformat(),
            }

        core = botocore.session.get_session()
        core._credentials = RefreshableCredentials.create_from_metadata(assume(), assume, "sts")
        client = boto3.session.Session(botocore_session=core).client(
            "s3", endpoint_url=light_url, region_name="us-east-1"
        )
        client.create_bucket(Bucket=BUCKET)
        for name in ("offsets/0", "commits/0", "metadata"):
            client.put_object(Bucket=BUCKET, Key=f"ck/{name}", Body=b"x")
        storage = S3Storage(client=client, reader=reader)
        assert [o.name for o in storage.list_checkpoint(f"s3a://{BUCKET}/ck")["offsets"]] == ["0"]
        assert storage.read(f"s3a://{BUCKET}/ck/metadata") == b"x"
        stats = light.RequestHandlerClass.store.stats  # type: ignore[attr-defined]
        assert stats["op:list"] == 1 and stats["op:read"] == 1
        keys = {k.split(":", 1)[1] for k in stats if k.startswith("key:")}
        assert keys == set(issued) and "testing" not in keys
    finally:
        light.shutdown()
        sts_server.stop()
