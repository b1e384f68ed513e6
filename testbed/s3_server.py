"""A real S3 HTTP API on 127.0.0.1: moto's server, run as its own process (the test bed's), or
in a thread of the test process (:func:`moto_in_thread`, for module-scoped unit fixtures)."""

from __future__ import annotations

import base64
import contextlib
import sys
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testbed.process import Process, free_port

ACCESS_KEY = "testbed-access-key"
SECRET_KEY = "testbed-secret-key"
REGION = "us-east-1"


class S3Server:
    """moto_server on an ephemeral port; `endpoint` is its URL, `client()` a boto3 client.

    >>> s3 = S3Server(Path("/tmp/s3")).start()
    >>> s3.client().create_bucket(Bucket="checkpoints")
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    def start(self, timeout: float = 60.0) -> S3Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process(
            "moto-s3",
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            self.workdir / "moto.log",
        )
        self.process.wait_ready(self._answers, timeout, f"S3 ListBuckets on {self.endpoint}")
        return self

    def _answers(self) -> bool:
        self.client().list_buckets()
        return True

    @property
    def options(self) -> dict:
        """The `s3_options` our storage layer takes."""
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "region_name": REGION,
        }

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2}),
            **self.options,
        )

    def spark_conf(self) -> dict[str, str]:
        """Hadoop s3a settings for Spark (prefix them with spark.hadoop.)."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.aws.credentials.provider": (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            ),
            "fs.s3a.change.detection.mode": "none",
            "fs.s3a.change.detection.version.required": "false",
            "fs.s3a.multiobjectdelete.enable": "false",
            "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.attempts.maximum": "3",
            "fs.s3a.retry.limit": "3",
            "fs.s3a.connection.timeout": "10000",
        }

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@contextlib.contextmanager
def moto_in_thread() -> Iterator[str]:
    """moto's S3 (and STS) server in a thread of this process on a free port; yields its URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    _IN_PROCESS.add(url)
    try:
        yield url
    finally:
        _IN_PROCESS.discard(url)
        server.stop()


# moto servers of this process (moto_in_thread): put_objects stores into their backend directly.
_IN_PROCESS: set[str] = set()


# What the in-process moto server accepts; the S3 reader tests sign with these.
MOTO_CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "region_name": "us-east-1",
}


def moto_client(url: str) -> Any:
    """A boto3 S3 client of the moto server at ``url``."""
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=url, **MOTO_CREDENTIALS)


@contextlib.contextmanager
def moto_with_objects(bucket: str, objects: Iterable[tuple[str, bytes]]) -> Iterator[str]:
    """``moto_in_thread`` with ``bucket`` created and holding the (key, body) pairs."""
    with moto_in_thread() as url:
        put_objects(moto_client(url), bucket, objects)
        yield url


def checkpoint_files(root: Path, *samples: str) -> list[tuple[str, bytes]]:
    """(key, body) of every file of the sample checkpoints under ``root``, keyed
    ``<sample>/<relative path>``: what the S3 reader tests upload."""
    return [
        (f"{sample}/{path.relative_to(root / sample).as_posix()}", path.read_bytes())
        for sample in samples
        for path in (root / sample).rglob("*")
        if path.is_file()
    ]


def put_objects(
    client: Any, bucket: str, objects: Iterable[tuple[str, bytes]], *, create: bool = True
) -> None:
    """Create ``bucket`` (unless ``create`` is False) and upload the (key, body) pairs, 16 at a
    time (boto3 clients are thread-safe). Into a moto server of this process (moto_in_thread)
    the objects go straight into its backend, the one its HTTP API serves (a PUT through the
    API costs ~3 ms of this process's CPU: 2,000 state objects took 20-45 s of a module's
    set-up); what the tests read is still answered by moto's S3 API."""
    if create:
        client.create_bucket(Bucket=bucket)
    if client.meta.endpoint_url in _IN_PROCESS:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        for key, body in objects:
            stored = backend.put_object(bucket, key, body)
            # as botocore's PUT leaves it (its default CRC32 checksum, listed by moto)
            crc = zlib.crc32(body).to_bytes(4, "big")
            stored.checksum_algorithm = "CRC32"
            stored.checksum_value = base64.b64encode(crc).decode()
            stored.checksum_type = "FULL_OBJECT"
        return
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects))
