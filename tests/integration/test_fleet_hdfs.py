"""Discovery and FleetChecker on HDFS (MiniCluster, WebHDFS) with real sample checkpoints."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.fleet import FleetChecker, discover_checkpoints
from airflow_sparklag.storage import StorageOptions, open_storage

pytestmark = pytest.mark.testbed

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


def test_discover_and_poll_on_hdfs(hdfs: Any) -> None:
    options = {"url": hdfs.webhdfs_url, "user": "root"}
    prefix = f"{hdfs.namenode_uri}/fleet-{uuid.uuid4().hex[:8]}"
    storage = open_storage(prefix, StorageOptions(webhdfs=options))
    roots = {"ckm3.5.9": f"{prefix}/team-a/clicks", "cka4.0.5": f"{prefix}/team-b/x/stateful"}
    for sample, root in roots.items():
        for path in (DATA / sample).rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                relative = path.relative_to(DATA / sample).as_posix()
                storage.write_atomic(f"{root}/{relative}", path.read_bytes())
    storage.requests.reset()
    found = discover_checkpoints(prefix, storage=storage)
    assert found == sorted(roots.values())
    # prefix, team-a, team-b, team-b/x and the two checkpoints: state/ is never listed
    assert storage.requests.total == 6
    with FleetChecker(
        found, kafka_config={"bootstrap.servers": "127.0.0.1:1"}, webhdfs_options=options, history=1
    ) as checker:
        results = checker.check()
        assert all(r.error is None for r in results)
        # 2 LISTs + GET offsets/C + GET commits/C (no content hash on HDFS), no metadata
        assert checker.storage_requests == 2 * 4
        checker.check()
        assert checker.storage_requests == 2 * 4 + 2 * 2  # the listings only
