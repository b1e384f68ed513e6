"""S3Storage against a real (moto) S3 server over HTTP, and CheckpointReader on top of it."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import (
    CheckpointCorrupt,
    StorageAccessDenied,
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
)
from airflow_sparklag.storage import StorageOptions, open_storage
from airflow_sparklag.storage.s3 import S3Options, S3Storage
from testbed.s3_server import moto_in_thread, put_objects

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
BUCKET = "checkpoints"
CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "region_name": "us-east-1",
}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_in_thread() as url:
        # state/ can hold 100k objects in real life: the reader must never list it.
        keys = [f"ck43/state/0/{index % 200}/{index}.delta" for index in range(1000)]
        # More than one ListObjectsV2 page (1,000 keys) of direct children.
        keys += [f"wide/offsets/{index}" for index in range(1005)] + ["wide/offsets/sub/deeper"]
        admin = _boto_client(url)
        admin.create_bucket(Bucket=BUCKET)
        for sample in ("ck43", "ck35"):
            _upload(admin, DATA / sample, f"{sample}/")
        put_objects(admin, BUCKET, [(key, b"s") for key in keys], create=False)
        yield url


def _boto_client(url: str) -> Any:
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=url, **CREDENTIALS)


def _upload(client: Any, root: Path, prefix: str) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            client.put_object(
                Bucket=BUCKET,
                Key=prefix + path.relative_to(root).as_posix(),
                Body=path.read_bytes(),
            )


class SentRequests(logging.Handler):
    """Every HTTP request the (moto) server received, retries and pages included: the
    server's own request log, whichever reader (obstore, boto3) sent them."""

    def __init__(self, storage: S3Storage | None = None) -> None:
        super().__init__(logging.INFO)
        self.urls: list[str] = []
        log = logging.getLogger("werkzeug")
        log.setLevel(logging.INFO)
        for old in [h for h in log.handlers if isinstance(h, SentRequests)]:
            log.removeHandler(old)
        log.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        line = re.search(r'"([A-Z]+ \S+) HTTP/', record.getMessage())
        if line:
            self.urls.append(line.group(1))


# The request budgets hold for both readers (obstore: the default on Python >= 3.11).
# obstore installs on Python >= 3.11 only (there every S3 read goes through boto3).
READERS = pytest.mark.parametrize(
    "reader",
    ["obstore", "boto3"] if importlib.util.find_spec("obstore") is not None else ["boto3"],
)


def _storage(endpoint: str, **options: Any) -> S3Storage:
    storage = open_storage(
        f"s3://{BUCKET}/x",
        StorageOptions(s3={"endpoint_url": endpoint, **CREDENTIALS, **options}),
    )
    assert isinstance(storage, S3Storage)
    return storage


def test_list_dir_returns_direct_children_only(endpoint: str) -> None:
    storage = _storage(endpoint)
    names = sorted(o.name for o in storage.list_dir(f"s3a://{BUCKET}/ck43/offsets"))
    assert names == [".0.crc", ".1.crc", "0", "1"]
    info = {o.name: o for o in storage.list_dir(f"s3a://{BUCKET}/ck43/offsets/")}["1"]
    assert info.size == (DATA / "ck43" / "offsets" / "1").stat().st_size
    assert abs(info.modified - time.time()) < 600


def test_list_dir_paginates_and_skips_subdirectories(endpoint: str) -> None:
    storage = _storage(endpoint)
    sent = SentRequests(storage)
    names = {o.name for o in storage.list_dir(f"s3://{BUCKET}/wide/offsets")}
    assert names == {str(i) for i in range(1005)}  # not "sub" nor "sub/deeper"
    assert storage.requests["list"] == 2
    assert len(sent.urls) == 2
    assert all("delimiter=/" in url for url in sent.urls)  # the log shows it decoded


def test_list_dir_of_missing_prefix_is_empty(endpoint: str) -> None:
    assert _storage(endpoint).list_dir(f"s3://{BUCKET}/nothing/here") == []


@pytest.mark.parametrize("scheme", ["s3", "s3a", "s3n"])
def test_all_s3_schemes_address_the_same_objects(endpoint: str, scheme: str) -> None:
    data = _storage(endpoint).read(f"{scheme}://{BUCKET}/ck43/metadata")
    assert data == (DATA / "ck43" / "metadata").read_bytes()


def test_read_missing_key_is_not_found(endpoint: str) -> None:
    with pytest.raises(StorageNotFound, match=rf"s3://{BUCKET}/ck43/offsets/77: no such object"):
        _storage(endpoint).read(f"s3://{BUCKET}/ck43/offsets/77")


def test_missing_bucket_is_not_found_with_clear_message(endpoint: str) -> None:
    storage = _storage(endpoint)
    with pytest.raises(StorageNotFound, match="bucket 'no-such-bucket' does not exist"):
        storage.list_dir("s3://no-such-bucket/ck/offsets")
    with pytest.raises(StorageNotFound, match="bucket 'no-such-bucket' does not exist"):
        storage.read("s3://no-such-bucket/ck/metadata")


def test_exists(endpoint: str) -> None:
    storage = _storage(endpoint)
    assert storage.exists(f"s3://{BUCKET}/ck43/metadata")
    assert not storage.exists(f"s3://{BUCKET}/ck43/nope")


def test_write_atomic_creates_refuses_and_overwrites(endpoint: str) -> None:
    storage = _storage(endpoint)
    path = f"s3a://{BUCKET}/written/metadata"
    storage.write_atomic(path, b'{"id":"one"}')
    assert storage.read(path) == b'{"id":"one"}'
    with pytest.raises(StorageAlreadyExists, match=f"{path}: already exists"):
        storage.write_atomic(path, b'{"id":"two"}')
    assert storage.read(path) == b'{"id":"one"}'
    storage.write_atomic(path, b'{"id":"two"}', overwrite=True)
    assert storage.read(path) == b'{"id":"two"}'


def test_write_atomic_lets_the_server_refuse_a_racing_writer(endpoint: str) -> None:
    """Between our existence check and our PUT another writer creates the object."""
    path = f"s3://{BUCKET}/race/offsets/3"

    class RacingStorage(S3Storage):
        def exists(self, path: str) -> bool:
            found = super().exists(path)
            _boto_client(endpoint).put_object(Bucket=BUCKET, Key="race/offsets/3", Body=b"other")
            return found

    storage = RacingStorage(S3Options(endpoint_url=endpoint, **CREDENTIALS))
    with pytest.raises(StorageAlreadyExists):
        storage.write_atomic(path, b"mine")
    assert storage.read(path) == b"other"


def test_unreachable_endpoint_is_a_storage_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    storage = S3Storage(
        S3Options(
            endpoint_url=f"http://127.0.0.1:{port}",
            connect_timeout=1,
            read_timeout=1,
            max_attempts=1,
            **CREDENTIALS,
        )
    )
    with pytest.raises(
        StorageError, match=rf"s3://{BUCKET}/ck/offsets: list failed, could not talk to"
    ):
        storage.list_dir(f"s3://{BUCKET}/ck/offsets")


# -- the checkpoint reader on S3 -------------------------------------------------------------


@READERS
def test_reader_first_check_budget_and_never_lists_state(endpoint: str, reader: str) -> None:
    storage = _storage(endpoint, reader=reader)
    sent = SentRequests(storage)
    location = f"s3a://{BUCKET}/ck43"
    state = CheckpointReader(storage, location).read(history=1)
    assert state.committed_batch_id == 0
    assert state.in_flight is not None and state.in_flight.batch_id == 1
    assert state.query_id == "e4ef413e-8c79-4ddd-8f2b-d512ec59fd61"
    # ONE LIST (commits/, metadata, offsets/), GET metadata, GET offsets/0, GET offsets/1
    # (in flight).
    assert storage.requests.by_operation == {"list": 1, "read": 3}
    assert len(sent.urls) == 4, sent.urls
    assert not any("state" in url for url in sent.urls)


@READERS
def test_reader_second_check_only_lists(endpoint: str, reader: str) -> None:
    storage = _storage(endpoint, reader=reader)
    sent = SentRequests(storage)
    reader = CheckpointReader(storage, f"s3://{BUCKET}/ck35")
    first = reader.read(history=3)
    assert [b.batch_id for b in first.history] == [4, 5, 6]
    assert len(sent.urls) == 1 + 1 + 3
    sent.urls.clear()
    reader.read(history=3)
    assert len(sent.urls) == 1


# -- access denied, for real: a moto server enforcing IAM policies ----------------------------


@pytest.fixture(scope="module")
def iam_enforcing_endpoint() -> Iterator[str]:
    """A separate moto process: IAM enforcement is process-wide, so keep it out of this one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The first 5 requests (setup below) are not authenticated; every later one is.
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="5")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto server with IAM enforcement did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_access_denied_is_typed_and_names_the_path(iam_enforcing_endpoint: str) -> None:
    import boto3

    url = iam_enforcing_endpoint
    session = boto3.session.Session()
    admin_s3 = session.client("s3", endpoint_url=url, **CREDENTIALS)
    admin_iam = session.client("iam", endpoint_url=url, **CREDENTIALS)
    admin_s3.create_bucket(Bucket=BUCKET)
    admin_s3.put_object(Bucket=BUCKET, Key="ck/offsets/0", Body=b"v1")
    admin_iam.create_user(UserName="lister")
    key = admin_iam.create_access_key(UserName="lister")["AccessKey"]
    admin_iam.put_user_policy(
        UserName="lister",
        PolicyName="list-only",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}],
            }
        ),
    )
    storage = S3Storage(
        S3Options(
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )
    )
    assert [o.name for o in storage.list_dir(f"s3://{BUCKET}/ck/offsets")] == ["0"]
    with pytest.raises(StorageAccessDenied) as raised:
        storage.read(f"s3://{BUCKET}/ck/offsets/0")
    assert f"s3://{BUCKET}/ck/offsets/0: access denied (read)" in str(raised.value)
    assert "s3:GetObject" in str(raised.value)

    wrong_key = S3Storage(
        S3Options(
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="AKIAWRONG",
            aws_secret_access_key="x",
        )
    )
    with pytest.raises(StorageAccessDenied, match=f"s3://{BUCKET}/ck/offsets: access denied"):
        wrong_key.list_dir(f"s3://{BUCKET}/ck/offsets")


# -- one LIST per check: list_checkpoint ------------------------------------------------------

LISTING_BUCKET = "listing"  # its own bucket: moto's LIST cost grows with the bucket's keys
MANY_STATE = 2000
MANY_BATCHES = 600  # 600 offsets + 600 commits: more than one 1,000-key page


def _checkpoint_files(batches: range, *, metadata: bool = True) -> dict[str, bytes]:
    offsets = (DATA / "ck35" / "offsets" / "6").read_bytes()
    commit = (DATA / "ck35" / "commits" / "6").read_bytes()
    files = {"sources/0/0": (DATA / "ck35" / "sources" / "0" / "0").read_bytes()}
    if metadata:
        files["metadata"] = (DATA / "ck35" / "metadata").read_bytes()
    for batch in batches:
        files[f"offsets/{batch}"] = offsets
        files[f"commits/{batch}"] = commit
    return files


@pytest.fixture(scope="module")
def listing_endpoint(endpoint: str) -> str:
    """Checkpoints with 0 and 2,000 state objects, one with 1,200 log files, and names that
    share prefixes (ck1, ck10, ck1-old)."""
    admin = _boto_client(endpoint)
    admin.create_bucket(Bucket=LISTING_BUCKET)
    objects: dict[str, bytes] = {}
    layouts = {
        "plain": _checkpoint_files(range(4, 7)),
        "stateful": _checkpoint_files(range(4, 7)),
        "long": _checkpoint_files(range(MANY_BATCHES)),
        "ck1": _checkpoint_files(range(3), metadata=False),
        "ck10": _checkpoint_files(range(10)),
        "ck1-old": _checkpoint_files(range(20)),
    }
    for name, files in layouts.items():
        objects.update({f"{name}/{rel}": body for rel, body in files.items()})
    for index in range(MANY_STATE):
        objects[f"stateful/state/0/{index % 200}/{index}.delta"] = b"s"
    for index in range(300):
        objects[f"long/state/0/{index % 200}/{index}.delta"] = b"s"
    # S3A-style directory markers and stray keys must not count as batches.
    objects["ck10/offsets/"] = b""
    objects["ck10/offsets/sub/3"] = b"x"
    objects["ck10/commits.crc"] = b"x"
    put_objects(admin, LISTING_BUCKET, objects.items(), create=False)
    return endpoint


def _listing_storage(endpoint: str, reader: str | None = None) -> tuple[S3Storage, SentRequests]:
    storage = _storage(endpoint, reader=reader)
    return storage, SentRequests(storage)


@READERS
@pytest.mark.parametrize("name", ["plain", "stateful"])
def test_first_check_is_three_requests_whatever_the_state_size(
    listing_endpoint: str, name: str, reader: str
) -> None:
    storage, sent = _listing_storage(listing_endpoint, reader)
    reader = CheckpointReader(storage, f"s3a://{LISTING_BUCKET}/{name}")
    state = reader.read(history=1)
    assert state.committed_batch_id == 6 and state.query_id is not None
    # LIST (commits/, metadata, offsets/ in one), GET offsets/6, GET metadata.
    assert storage.requests.by_operation == {"list": 1, "read": 2}
    assert len(sent.urls) == 3, sent.urls
    listing = sent.urls[0]
    assert "start-after=" in listing and "delimiter" not in listing, listing
    assert not any("/state/" in url for url in sent.urls)
    sent.urls.clear()
    storage.requests.reset()
    reader.read(history=1)
    assert storage.requests.by_operation == {"list": 1}  # nothing new: the listing only
    assert len(sent.urls) == 1


def test_repeated_check_gets_only_the_new_batch(listing_endpoint: str) -> None:
    admin = _boto_client(listing_endpoint)
    for directory in ("offsets", "commits"):
        for batch in range(3):
            body = (DATA / "ck35" / directory / "6").read_bytes()
            admin.put_object(Bucket=LISTING_BUCKET, Key=f"grow/{directory}/{batch}", Body=body)
    admin.put_object(
        Bucket=LISTING_BUCKET, Key="grow/metadata", Body=(DATA / "ck35" / "metadata").read_bytes()
    )
    storage, _ = _listing_storage(listing_endpoint)
    reader = CheckpointReader(storage, f"s3://{LISTING_BUCKET}/grow")
    assert reader.read(history=1).committed_batch_id == 2
    storage.requests.reset()
    for directory in ("offsets", "commits"):
        body = (DATA / "ck35" / directory / "6").read_bytes()
        admin.put_object(Bucket=LISTING_BUCKET, Key=f"grow/{directory}/3", Body=body)
    state = reader.read(history=1)
    assert state.committed_batch_id == 3
    assert storage.requests.by_operation == {"list": 1, "read": 1}  # LIST + GET offsets/3


@READERS
def test_more_than_a_page_of_log_files_pages_but_never_into_state(
    listing_endpoint: str, reader: str
) -> None:
    storage, sent = _listing_storage(listing_endpoint, reader)
    listing = storage.list_checkpoint(f"s3a://{LISTING_BUCKET}/long")
    assert len(listing["offsets"]) == len(listing["commits"]) == MANY_BATCHES
    assert [o.name for o in listing["metadata"]] == ["metadata"]
    # 1,201 keys before sources/: a 320-key first page, then one 1,000-key page.
    assert storage.requests["list"] == 2 and len(sent.urls) == 2
    assert "continuation-token=" in sent.urls[1]
    storage.requests.reset()
    state = CheckpointReader(storage, f"s3a://{LISTING_BUCKET}/long").read(history=1)
    assert state.committed_batch_id == MANY_BATCHES - 1
    assert len(state.offsets_ids) == MANY_BATCHES
    assert storage.requests.by_operation == {"list": 2, "read": 2}


def test_checkpoints_whose_names_share_a_prefix_are_kept_apart(listing_endpoint: str) -> None:
    storage, _ = _listing_storage(listing_endpoint)
    ck1 = CheckpointReader(storage, f"s3a://{LISTING_BUCKET}/ck1/").read(history=1)
    assert ck1.offsets_ids == ck1.commit_ids == (0, 1, 2)
    assert ck1.query_id is None  # no metadata listed: not read either
    assert storage.requests.by_operation == {"list": 1, "read": 1}
    ck10 = storage.list_checkpoint(f"s3a://{LISTING_BUCKET}/ck10")
    # the "offsets/" marker, "offsets/sub/3" and "commits.crc" are not log files
    assert sorted(int(o.name) for o in ck10["offsets"]) == list(range(10))
    assert sorted(int(o.name) for o in ck10["commits"]) == list(range(10))
    old = CheckpointReader(storage, f"s3a://{LISTING_BUCKET}/ck1-old").read(history=1)
    assert old.committed_batch_id == 19


def test_missing_checkpoint_on_s3_is_not_found(listing_endpoint: str) -> None:
    from airflow_sparklag.errors import CheckpointNotFound

    storage, _ = _listing_storage(listing_endpoint)
    assert storage.list_checkpoint(f"s3://{LISTING_BUCKET}/ck") == {
        "commits": [],
        "offsets": [],
        "metadata": [],
    }
    with pytest.raises(CheckpointNotFound):
        CheckpointReader(storage, f"s3://{LISTING_BUCKET}/ck").read()


# -- commits/C on S3: the listing's ETag proves a valid commit; anything else is read ----------


def _commit_checkpoint(admin: Any, name: str, commit: bytes, watermark_ms: int = 0) -> str:
    offsets = (DATA / "ck35" / "offsets" / "6").read_bytes()
    offsets = offsets.replace(b'"batchWatermarkMs":0', b'"batchWatermarkMs":%d' % watermark_ms)
    files = {"offsets/6": offsets, "commits/6": commit}
    for key, body in files.items():
        admin.put_object(Bucket=BUCKET, Key=f"{name}/{key}", Body=body)
    return f"s3a://{BUCKET}/{name}"


@pytest.mark.parametrize(
    ("case", "commit", "watermark_ms", "reads"),
    [
        ("watermark 0", b'v1\n{"nextBatchWatermarkMs":0}', 0, 1),
        ("watermark of offsets/C", b'v1\n{"nextBatchWatermarkMs":1795431994303}', 1795431994303, 1),
        ("watermark moved", b'v1\n{"nextBatchWatermarkMs":1795431994309}', 1795431994303, 2),
        ("v2 commit", b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{}}', 0, 2),
    ],
)
def test_valid_commit_costs_a_get_only_when_its_etag_proves_nothing(
    endpoint: str, case: str, commit: bytes, watermark_ms: int, reads: int
) -> None:
    location = _commit_checkpoint(
        _boto_client(endpoint), f"commit-{case.replace(' ', '-')}", commit, watermark_ms
    )
    storage = _storage(endpoint)
    reader = CheckpointReader(storage, location, query_id=False)
    assert reader.read(history=1).committed_batch_id == 6
    assert storage.requests.by_operation == {"list": 1, "read": reads}
    storage.requests.reset()
    reader.read(history=1)
    assert storage.requests.by_operation == {"list": 1}  # checked once


@pytest.mark.parametrize(
    "commit",
    [b'v99\n{"nextBatchWatermarkMs":0}', b'v1\n{"nextBatchWatermarkMs":0]', b"v1\n{nope}" * 4],
)
def test_full_size_damaged_commit_on_s3_is_named(endpoint: str, commit: bytes) -> None:
    location = _commit_checkpoint(_boto_client(endpoint), f"bad-commit-{len(commit)}", commit)
    with pytest.raises(CheckpointCorrupt) as raised:  # UnsupportedCheckpointVersion is one
        CheckpointReader(_storage(endpoint), location).read(history=1)
    assert f"{location}/commits/6" in str(raised.value)
