"""WebHDFSStorage and CheckpointReader against a real HDFS MiniCluster (fixture ``hdfs``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import StorageAlreadyExists, StorageNotFound
from airflow_sparklag.storage import StorageOptions, open_storage
from airflow_sparklag.storage.webhdfs import WebHDFSStorage

pytestmark = pytest.mark.testbed

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


def _storage(hdfs: Any, **options: Any) -> WebHDFSStorage:
    storage = open_storage(
        hdfs.namenode_uri + "/x",
        StorageOptions(webhdfs={"url": hdfs.webhdfs_url, "user": "root", **options}),
    )
    assert isinstance(storage, WebHDFSStorage)
    return storage


def _upload(storage: WebHDFSStorage, sample: str, root: str) -> None:
    for path in (DATA / sample).rglob("*"):
        if path.is_file():
            relative = path.relative_to(DATA / sample).as_posix()
            storage.write_atomic(f"{root}/{relative}", path.read_bytes())


@pytest.fixture
def root(hdfs: Any) -> str:
    return f"{hdfs.namenode_uri}/checkpoints/{uuid.uuid4().hex[:8]}"


def test_write_list_read_exists(hdfs: Any, root: str) -> None:
    storage = _storage(hdfs)
    storage.write_atomic(f"{root}/offsets/0", b"v1\nx")
    storage.write_atomic(f"{root}/offsets/1", b"v1\ny")
    storage.write_atomic(f"{root}/offsets/sub/2", b"nested")
    listed = {o.name: o for o in storage.list_dir(f"{root}/offsets")}
    assert set(listed) == {"0", "1"}  # files only, no temp files left behind
    assert listed["1"].size == 4 and listed["1"].modified > 0
    assert storage.read(f"{root}/offsets/1") == b"v1\ny"
    assert storage.exists(f"{root}/offsets/0")
    assert storage.exists(f"{root}/offsets")
    assert not storage.exists(f"{root}/offsets/9")
    assert storage.list_dir(f"{root}/missing") == []
    with pytest.raises(StorageNotFound, match=f"{root}/offsets/9: no such file"):
        storage.read(f"{root}/offsets/9")


def test_write_atomic_refuses_then_overwrites(hdfs: Any, root: str) -> None:
    storage = _storage(hdfs)
    path = f"{root}/metadata"
    storage.write_atomic(path, b'{"id":"one"}')
    with pytest.raises(StorageAlreadyExists, match=f"{path}: already exists"):
        storage.write_atomic(path, b'{"id":"two"}')
    assert storage.read(path) == b'{"id":"one"}'
    storage.write_atomic(path, b'{"id":"two"}', overwrite=True)
    assert storage.read(path) == b'{"id":"two"}'
    assert hdfs.list_names(path.split(hdfs.namenode_uri, 1)[1].rsplit("/", 1)[0]) == ["metadata"]


def test_namenode_url_derived_from_webhdfs_scheme(hdfs: Any, root: str) -> None:
    port = hdfs.webhdfs_url.rsplit(":", 1)[1]
    location = root.replace(hdfs.namenode_uri, f"webhdfs://127.0.0.1:{port}")
    storage = open_storage(location, StorageOptions(webhdfs={"user": "root"}))
    storage.write_atomic(f"{location}/metadata", b'{"id":"q"}')
    assert storage.read(f"{location}/metadata") == b'{"id":"q"}'


def test_reader_on_hdfs_checkpoint(hdfs: Any, root: str) -> None:
    _upload(_storage(hdfs), "ckn4.2.1", root)
    storage = _storage(hdfs)
    state = CheckpointReader(storage, root).read(history=1)
    assert state.query_id == "e892574b-ef70-494e-b4f5-ec9fdf4106de"
    assert state.committed_batch_id == 4
    assert state.in_flight is not None and state.in_flight.batch_id == 5
    # metadata, offsets/4, offsets/5, commits/4 (LISTSTATUS carries no content hash)
    assert storage.requests.by_operation == {"list": 2, "read": 4}


@pytest.fixture
def dead_namenode() -> Iterator[tuple[str, list[int]]]:
    """A NameNode address that accepts connections and drops them at once, counting them."""
    connections: list[int] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def drop() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                connections.append(1)
                connection.close()

    threading.Thread(target=drop, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", connections
    listener.close()


def test_ha_fails_over_past_a_dead_namenode_and_stays_on_the_live_one(
    hdfs: Any, root: str, dead_namenode: tuple[str, list[int]]
) -> None:
    dead, connections = dead_namenode
    storage = _storage(hdfs, url=[dead, hdfs.webhdfs_url], connect_timeout=1)
    storage.write_atomic(f"{root}/metadata", b'{"id":"ha"}')
    assert len(connections) == 1  # tried once, then the live NameNode is asked first
    assert storage.read(f"{root}/metadata") == b'{"id":"ha"}'
    assert [o.name for o in storage.list_dir(root)] == ["metadata"]
    assert len(connections) == 1


def test_hdfscli_list_and_rename_fall_short(hdfs: Any, root: str) -> None:
    """Why listings use the raw LISTSTATUS and renames rename2 (docs/connections.md, "HDFS"):
    HdfsCLI's list() asks twice for a directory of one entry and raises for a missing one; its
    rename() moves a file INTO an existing directory and fails over a file without the cause.
    Once this fails, HdfsCLI does better: use it."""
    import requests
    from hdfs import HdfsError, InsecureClient

    sent: list[str] = []
    session = requests.Session()
    session.hooks["response"].append(lambda response, **_: sent.append(response.url))
    client = InsecureClient(hdfs.webhdfs_url, user="root", session=session, timeout=10)
    base = root.split(hdfs.namenode_uri, 1)[1]
    for name in ("one/0", "a", "b"):
        client.write(f"{base}/{name}", b"x")
    client.makedirs(f"{base}/dir")
    sent.clear()
    assert client.list(f"{base}/one") == ["0"]
    assert [url.split("op=")[1].split("&")[0] for url in sent] == ["LISTSTATUS", "GETFILESTATUS"]
    with pytest.raises(HdfsError, match="does not exist"):
        client.list(f"{base}/missing")
    client.rename(f"{base}/one/0", f"{base}/dir")
    assert client.list(f"{base}/dir") == ["0"]  # moved inside, not refused
    with pytest.raises(HdfsError, match="Unable to rename") as raised:
        client.rename(f"{base}/a", f"{base}/b")
    assert raised.value.exception is None  # no FileAlreadyExistsException to map


def test_rename_moves_a_directory_and_refuses_an_existing_target(hdfs: Any, root: str) -> None:
    storage = _storage(hdfs)
    storage.write_atomic(f"{root}/ck/offsets/0", b"v1")
    storage.write_atomic(f"{root}/taken/x", b"x")
    with pytest.raises(StorageAlreadyExists, match=f"{root}/taken: already exists"):
        storage.rename(f"{root}/ck", f"{root}/taken")
    assert storage.walk(f"{root}/taken") == {"x": 1}  # not moved inside it
    assert storage.rename(f"{root}/ck", f"{root}/archive/2026/ck")
    assert storage.walk(f"{root}/archive/2026/ck") == {"offsets/0": 2}
    assert storage.walk(f"{root}/ck") == {}
