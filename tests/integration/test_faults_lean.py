"""Real faults between the lean S3 read path (storage/s3_lean.py) and the test bed's S3 (moto),
made by toxiproxy: a hung server, reset connections, answers cut short and a slow link end as
a StorageError within the same bound as boto3's: ``max_attempts`` attempts, each within
connect + read timeout (``worst_case_seconds``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import StorageError
from airflow_sparklag.storage.s3 import S3Storage, worst_case_seconds
from testbed.s3_server import S3Server
from testbed.toxiproxy import Proxy

# The fault module's proxy and checkpoint (ck35 + a 64 KiB object) and its autouse fixture
# that clears the proxy's toxics after each test.
from tests.integration.test_faults import _no_toxics_left, _timed, s3_checkpoint, s3_proxy

pytestmark = pytest.mark.testbed

SLACK = 1.0  # seconds of scheduling slack on a loaded 2-core machine
BOUNDS = {"connect_timeout": 1.0, "read_timeout": 1.5, "max_attempts": 2}


__all__ = ["_no_toxics_left", "s3_checkpoint", "s3_proxy"]


def _lean(proxy: Proxy, s3: S3Server, **bounds: Any) -> S3Storage:
    return S3Storage(**{**s3.options, "endpoint_url": proxy.url}, reader="lean", **bounds)


def test_lean_reads_through_the_proxy(s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str) -> None:
    storage = _lean(s3_proxy, s3)
    state = CheckpointReader(storage, f"{s3_checkpoint}/ck35").read(history=1)
    assert state.committed_batch_id == 6
    assert storage._client is None  # no boto3 client was built for the reads


def test_lean_hang_fails_within_attempts_times_timeouts(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str
) -> None:
    storage = _lean(s3_proxy, s3, **BOUNDS)
    reader = CheckpointReader(storage, f"{s3_checkpoint}/ck35")
    # The connection opens, the request never arrives, no answer ever comes.
    with s3_proxy.toxic("timeout", "upstream", timeout=0):
        elapsed, error = _timed(lambda: reader.read(history=1))
        read_elapsed, read_error = _timed(lambda: storage.read(f"{s3_checkpoint}/big"))
    bound = worst_case_seconds(**BOUNDS)  # (1 + 1.5) x 2 = 5 s
    for took, failure, what in [(elapsed, error, "ck35: list"), (read_elapsed, read_error, "big")]:
        assert isinstance(failure, StorageError), failure
        message = str(failure)
        assert message.startswith(f"{s3_checkpoint}/{what}"), message
        assert "after 2 attempt(s): could not talk to" in message and "timed out" in message
        # Each attempt waits its read timeout (the connect succeeds at once through the proxy).
        assert 2 * 1.5 <= took <= bound + SLACK, took
    print(f"S3 hang (lean): {elapsed:.2f} s / {read_elapsed:.2f} s (bound {bound:g} s)")


def test_lean_reset_peer_is_a_storage_error(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str
) -> None:
    storage = _lean(s3_proxy, s3, **BOUNDS)
    with s3_proxy.toxic("reset_peer", timeout=0):
        elapsed, error = _timed(lambda: CheckpointReader(storage, f"{s3_checkpoint}/ck35").read())
    assert isinstance(error, StorageError), error
    assert str(error).startswith(f"{s3_checkpoint}/ck35: list failed after 2 attempt(s)")
    assert elapsed < worst_case_seconds(**BOUNDS)
