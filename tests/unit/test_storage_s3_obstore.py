"""The obstore read path of S3Storage (storage/s3_obstore.py, the default on Python >= 3.11)
against a real (moto) S3 server: the same listings, bodies, checkpoint states and typed errors
as boto3's; credentials from the boto3 session, an assumed role's included; writes stay on
boto3."""

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
from airflow_sparklag.fleet import discover_checkpoints
from airflow_sparklag.session import Session
from airflow_sparklag.storage.s3 import S3Options, S3Storage
from airflow_sparklag.storage.s3_obstore import settings_from
from testbed.light_s3 import serve_in_thread
from testbed.s3_server import (
    MOTO_CREDENTIALS,
    checkpoint_files,
    moto_client,
    moto_in_thread,
    moto_with_objects,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
BUCKET = "obstore-reads"
CREDENTIALS = MOTO_CREDENTIALS
EXTRA_KEYS = (
    [f"ck43/state/0/{i % 200}/{i}.delta" for i in range(1500)]  # past one 1,000-key page
    + ["ck43/offsets/", "ck43/commits/", "ck43/metadata.crc"]  # s3a markers, a stray file
    + [f"wide/offsets/{i}" for i in range(1005)]
    + [f"wide/commits/{i}" for i in range(1005)]
    + ["ck1/offsets/0", "ck1/commits/0", "ck1-old/offsets/9", "ck10/offsets/3"]
    # Keys object_store cannot name (S3 takes any); before "commits", out of the root listing
    + ["a-tools//x.log", "a-tools/./y.log"]
)


# A key Spark writes for checkpointLocation "s3a://bucket/user ck ü %41 ?x #y": Hadoop's Path
# keeps `?`, `#` and `%41` as characters of the key.
ODD = "user ck ü %41 ?x #y"  # sorts after offsets/: the root listing test is unchanged


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    files = checkpoint_files(DATA, "ck43", "ck35") + [(k, k.encode()) for k in EXTRA_KEYS]
    files += [
        (f"{ODD}/{key[len('ck43/') :]}", body) for key, body in files if key.startswith("ck43/")
    ]
    with moto_with_objects(BUCKET, files) as url:
        yield url


def _both(endpoint: str) -> tuple[S3Storage, S3Storage]:
    return (
        S3Storage(S3Options(endpoint_url=endpoint, reader="boto3", **CREDENTIALS)),
        S3Storage(S3Options(endpoint_url=endpoint, reader="obstore", **CREDENTIALS)),
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
    # (Both count pages: the bucket root pages through wide/'s 2,010 keys.)
    assert fast.requests["list"] == boto.requests["list"] + (1 if empty else 0)


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


def test_a_key_with_query_and_fragment_characters_is_the_checkpoint(endpoint: str) -> None:
    # urlsplit cut the key at "?": "user ck ü %41 " held no checkpoint (CheckpointNotFound), and
    # a --prefix scan of the bucket skipped the job.
    expected = CheckpointReader(_both(endpoint)[0], f"s3a://{BUCKET}/ck43").read(history=3)
    for storage in _both(endpoint):
        state = CheckpointReader(storage, f"s3a://{BUCKET}/{ODD}").read(history=3)
        assert state.committed is not None and expected.committed is not None
        assert state.committed.sources == expected.committed.sources
        assert state.committed_batch_id == expected.committed_batch_id
        found = discover_checkpoints(f"s3a://{BUCKET}/", storage=storage, max_depth=1)
        assert f"s3a://{BUCKET}/{ODD}" in found


def test_keys_object_store_cannot_name_are_listed_through_boto3(endpoint: str) -> None:
    # Was: StorageError "Encountered object with invalid path: Path "a-tools//" contained
    # empty path segment" listing a-tools/, so a --prefix scan of the bucket failed whole.
    boto, fast = _both(endpoint)
    assert fast.list_children(f"s3a://{BUCKET}/a-tools/") == boto.list_children(
        f"s3a://{BUCKET}/a-tools/"
    )
    found = discover_checkpoints(f"s3a://{BUCKET}/", storage=fast, max_depth=2)
    assert found == discover_checkpoints(f"s3a://{BUCKET}/", storage=boto, max_depth=2)
    assert f"s3a://{BUCKET}/ck43" in found


def test_errors_are_typed(endpoint: str) -> None:
    _, fast = _both(endpoint)
    with pytest.raises(StorageNotFound, match="ck43/offsets/999: no such object"):
        fast.read(f"s3a://{BUCKET}/ck43/offsets/999")
    with pytest.raises(BucketNotFound, match="'no-such-bucket' does not exist"):
        fast.list_checkpoint("s3a://no-such-bucket/ck")
    with pytest.raises(CheckpointNotFound):
        CheckpointReader(fast, f"s3a://{BUCKET}/missing").read()
    refused = S3Storage(
        S3Options(
            endpoint_url="http://127.0.0.1:9", reader="obstore", max_attempts=1, **CREDENTIALS
        )
    )
    with pytest.raises(StorageError, match="read failed"):
        refused.read(f"s3a://{BUCKET}/ck43/metadata")
    with pytest.raises(InvalidParameter):
        S3Storage(S3Options(reader="rust"))


def test_writes_stay_on_boto3(endpoint: str) -> None:
    _, fast = _both(endpoint)
    sent: list[str] = []
    fast.client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method)
    )
    fast.write_atomic(f"s3a://{BUCKET}/written/x", b"body")
    assert fast.read(f"s3a://{BUCKET}/written/x") == b"body"
    assert sent == ["HEAD", "PUT"]  # the read went through obstore


def test_a_bare_client_reads_through_boto3_and_the_session_through_obstore(
    endpoint: str,
) -> None:
    client = moto_client(endpoint)
    assert S3Storage(S3Options(client=client))._obstore() is None  # its credentials are its own
    with pytest.raises(InvalidParameter, match="session"):
        S3Storage(S3Options(client=client, reader="obstore"))
    assert (
        S3Storage(S3Options(endpoint_url=endpoint, **CREDENTIALS))._obstore() is not None
    )  # default
    with Session(s3_options={"endpoint_url": endpoint, **CREDENTIALS}) as s:
        state = s.read(f"s3a://{BUCKET}/ck35", history=1, query_id=False)
        assert state.committed_batch_id is not None
        assert s.storage_requests == 2


@pytest.mark.parametrize("handed", ["session", "client and session"])
def test_an_assumed_roles_refreshing_credentials_sign_every_read(
    handed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials through obstore's Boto3CredentialProvider over the boto3 session: a
    profile assuming a role through (moto's) STS, as an Airflow ``aws`` connection's
    role_arn does. The light S3 server records each request's access key id."""
    import boto3

    with moto_in_thread() as sts_url:
        config = tmp_path / "config"
        config.write_text(
            "[profile base]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
            "[profile role]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
            "source_profile = base\nregion = us-east-1\n"
        )
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts_url)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        light, light_url = serve_in_thread()
        try:
            session = boto3.session.Session(profile_name="role")
            client = session.client("s3", endpoint_url=light_url)
            client.create_bucket(Bucket=BUCKET)
            for name in ("offsets/0", "commits/0", "metadata"):
                client.put_object(Bucket=BUCKET, Key=f"ck/{name}", Body=b"x")
            given = {"client": client} if handed == "client and session" else {}
            storage = S3Storage(S3Options(session=session, endpoint_url=light_url, **given))
            assert storage.reader == "obstore"
            listing = storage.list_checkpoint(f"s3a://{BUCKET}/ck")
            assert [o.name for o in listing["offsets"]] == ["0"]
            assert storage.read(f"s3a://{BUCKET}/ck/metadata") == b"x"
            stats = light.RequestHandlerClass.store.stats  # type: ignore[attr-defined]
            assert stats["op:list"] == 1 and stats["op:read"] == 1
            keys = {k.split(":", 1)[1] for k in stats if k.startswith("key:")}
            role_key = session.get_credentials().get_frozen_credentials().access_key
            assert keys == {role_key} and "testing" not in keys  # the role's, not the base's
        finally:
            light.shutdown()


def test_obstore_takes_the_boto3_clients_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proxy, CA bundle, verify, addressing style, timeouts and attempts: what the boto3
    client is built with is what obstore is given."""
    import boto3
    from botocore.config import Config

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost,.internal")
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    config = Config(
        connect_timeout=2,
        read_timeout=7,
        max_pool_connections=32,
        s3={"addressing_style": "path"},
        proxies={"https": "http://proxy.example:3128"},
        proxies_config={"proxy_ca_bundle": str(bundle)},
    )
    session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")
    client = session.client(
        "s3", region_name="eu-west-1", endpoint_url="https://minio.example:9000", config=config
    )
    custom = settings_from(client, str(bundle), 3)
    options = custom.client_options
    assert (custom.region, custom.endpoint_url, custom.virtual_hosted) == (
        "eu-west-1",
        "https://minio.example:9000",
        False,
    )
    assert options["root_certificate"] == bundle.read_text()
    assert options["proxy_url"] == "http://proxy.example:3128"
    assert options["proxy_ca_certificate"] == bundle.read_text()
    assert options["proxy_excludes"] == "localhost,.internal"
    assert (options["connect_timeout"].total_seconds(), options["timeout"].total_seconds()) == (
        2,
        9,
    )
    assert custom.retry["max_retries"] == 2 and not options["allow_http"]
    aws_config = Config(connect_timeout=5, read_timeout=15, max_pool_connections=10)
    aws = settings_from(session.client("s3", region_name="us-east-1", config=aws_config), False, 1)
    assert (aws.region, aws.endpoint_url, aws.virtual_hosted) == ("us-east-1", None, True)
    assert aws.client_options["allow_invalid_certificates"] is True
    assert "proxy_url" not in aws.client_options and aws.retry["max_retries"] == 0


def test_a_repeated_check_reads_no_file_it_has_already_read(endpoint: str) -> None:
    """The exporter, `wait` and a sensor's polls keep one session: offsets and commits files
    never change once written, so a second read of the whole window is the listing alone."""
    with Session(s3_options={"endpoint_url": endpoint, **CREDENTIALS}) as session:
        location = f"s3a://{BUCKET}/ck35"
        first = session.read(location, history=10)
        assert len(first.history) == 7  # batches 0-6, each offsets file read once
        backend = session.storage(location)
        assert backend.requests["read"] >= 7
        backend.requests.reset()
        again = session.read(location, history=10)
        assert again == first
        assert backend.requests.by_operation == {"list": 1}


def test_obstore_follows_a_handed_in_clients_settings(endpoint: str) -> None:
    """The Airflow hook hands in the amazon provider's client and its session: obstore reads
    with that session's credentials and that client's endpoint, timeouts and attempts."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(**CREDENTIALS)
    config = Config(read_timeout=7, retries={"max_attempts": 4, "mode": "standard"})
    client = session.client("s3", endpoint_url=endpoint, config=config)
    storage = S3Storage(S3Options(client=client, session=session))
    fast = storage._obstore()
    assert fast is not None and fast.settings.endpoint_url == endpoint
    assert fast.settings.retry["max_retries"] == 4  # botocore's max_attempts: retries
    assert fast.settings.client_options["read_timeout"].total_seconds() == 7
    assert (
        storage.read(f"s3a://{BUCKET}/ck35/metadata") == (DATA / "ck35" / "metadata").read_bytes()
    )
