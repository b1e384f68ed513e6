"""Each storage capability, one table across backends: local disk, S3 (a real moto server, the
``s3`` fixture) and fsspec's built-in ``memory://`` filesystem. Plus archiving on fsspec (verified
copy) and the errors of a store that cannot do what archiving needs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.archive import archive_tree
from airflow_sparklag.errors import (
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
    UnsupportedOperation,
)
from airflow_sparklag.location import join
from airflow_sparklag.storage import Storage, StorageOptions, open_storage
from airflow_sparklag.storage.local import LocalStorage
from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage

BACKENDS = ["local", "s3", "memory"]
TREE = {
    "metadata": b'{"id":"q"}',
    ".hidden": b"h",
    "offsets/0": b"v1\n{}\n{}",
    "offsets/.0.crc": b"crc",
    "state/0/1/1.delta": b"\x00" * 300,
}


@dataclass(frozen=True)
class Store:
    backend: str
    storage: Storage
    root: str  # a fresh directory, with TREE written under it


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    name = f"capabilities-{uuid.uuid4().hex[:8]}"
    storage: Storage
    if request.param == "local":
        storage, root = LocalStorage(), str(tmp_path / name)
    elif request.param == "s3":
        s3 = request.getfixturevalue("s3")
        root = f"s3a://checkpoints/{name}"
        storage = open_storage(root, StorageOptions(s3=s3.options))
    else:
        root = f"memory://{name}"
        storage = open_storage(root)
    for relative, data in TREE.items():
        storage.write_atomic(join(root, relative), data)
    storage.requests.reset()
    return Store(request.param, storage, root)


def _sizes(tree: dict[str, bytes]) -> dict[str, int]:
    return {relative: len(data) for relative, data in tree.items()}


# -- list_children -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "files", "directories", "is_checkpoint"),
    [
        ("", {"metadata", ".hidden"}, {"offsets", "state"}, True),
        ("offsets", {"0", ".0.crc"}, set(), False),
        ("state/0", set(), {"1"}, False),
        ("missing", set(), set(), False),
    ],
)
def test_list_children(
    store: Store, relative: str, files: set[str], directories: set[str], is_checkpoint: bool
) -> None:
    children = store.storage.list_children(join(store.root, relative))
    assert children.files == files and children.directories == directories
    assert children.is_checkpoint is is_checkpoint
    assert store.storage.requests.by_operation == {"list": 1}  # one listing, one request


# -- walk --------------------------------------------------------------------------------------


def test_walk(store: Store) -> None:
    # hidden files and nested directories included, directories themselves not
    assert store.storage.walk(store.root) == _sizes(TREE)
    assert store.storage.walk(join(store.root, "state")) == {"0/1/1.delta": 300}
    assert store.storage.walk(join(store.root, "missing")) == {}
    assert store.storage.walk(store.root + "/") == _sizes(TREE)


def test_walk_keeps_s3_directory_markers(s3: Any) -> None:
    root = f"s3a://checkpoints/markers-{uuid.uuid4().hex[:8]}"
    storage = open_storage(root, StorageOptions(s3=s3.options))
    key = root.split("/", 3)[3]
    for marker in (f"{key}/", f"{key}/offsets/"):  # what s3a's mkdirs writes
        s3.client().put_object(Bucket="checkpoints", Key=marker, Body=b"")
    storage.write_atomic(join(root, "offsets", "0"), b"v1")
    assert storage.walk(root) == {"": 0, "offsets/": 0, "offsets/0": 2}
    assert storage.list_children(root).directories == {"offsets"}


# -- delete ------------------------------------------------------------------------------------


def test_delete(store: Store) -> None:
    storage = store.storage
    storage.delete(join(store.root, "offsets", "0"))
    storage.delete(join(store.root, "offsets", "0"))  # already gone: nothing happens
    storage.delete(join(store.root, "never-there"))
    remaining = {k: v for k, v in TREE.items() if k != "offsets/0"}
    assert storage.walk(store.root) == _sizes(remaining)
    with pytest.raises(StorageNotFound):
        storage.read(join(store.root, "offsets", "0"))
    assert storage.requests["delete"] == 3


HAS_DIRECTORIES = {"local": True, "s3": False, "memory": True}  # S3: nothing to remove


def test_remove_empty_directories(store: Store) -> None:
    storage = store.storage
    for relative in TREE:
        if relative != "state/0/1/1.delta":
            storage.delete(join(store.root, relative))
    if HAS_DIRECTORIES[store.backend]:
        with pytest.raises(StorageError, match="still holds files; not removing it"):
            storage.remove_empty_directories(store.root)
    else:
        storage.remove_empty_directories(store.root)
        assert storage.requests.total == len(TREE) - 1  # the deletes: no request of its own
    assert storage.read(join(store.root, "state/0/1/1.delta")) == TREE["state/0/1/1.delta"]
    storage.delete(join(store.root, "state/0/1/1.delta"))
    storage.remove_empty_directories(store.root)
    assert not storage.exists(store.root) and storage.walk(store.root) == {}
    storage.remove_empty_directories(store.root)  # already gone: nothing happens


# -- rename ------------------------------------------------------------------------------------


RENAMES = {"local": True, "s3": False, "memory": False}  # object stores: the caller copies


def test_rename(store: Store) -> None:
    renames = RENAMES[store.backend]
    target = store.root + "-renamed/ck"
    assert store.storage.rename(store.root, target) is renames
    moved, left = (target, store.root) if renames else (store.root, target)
    assert store.storage.walk(moved) == _sizes(TREE)
    assert store.storage.walk(left) == {}


def test_rename_refuses_an_existing_target(tmp_path: Path) -> None:
    storage = LocalStorage()
    storage.write_atomic(str(tmp_path / "a" / "metadata"), b"a")
    storage.write_atomic(str(tmp_path / "b" / "metadata"), b"b")
    with pytest.raises(StorageAlreadyExists, match="b: already exists; not renaming over it"):
        storage.rename(str(tmp_path / "a"), str(tmp_path / "b"))
    assert storage.read(str(tmp_path / "b" / "metadata")) == b"b"


# -- copy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("from_local", [False, True], ids=["same-store", "from-local"])
def test_copy(store: Store, tmp_path: Path, from_local: bool) -> None:
    source: Storage = store.storage
    src = join(store.root, "offsets", "0")
    if from_local:
        source, src = LocalStorage(), str(tmp_path / "elsewhere" / "0")
        source.write_atomic(src, TREE["offsets/0"])
    dst = join(store.root, "copied", "0")
    store.storage.write_atomic(dst, b"stale")
    store.storage.requests.reset()
    store.storage.copy_from(source, src, dst)  # overwrites
    if store.backend == "s3" and not from_local:
        # server-side: one CopyObject, the bytes never come through the client
        assert store.storage.requests.by_operation == {"copy": 1}
    assert store.storage.read(dst) == TREE["offsets/0"]
    assert source.read(src) == TREE["offsets/0"]


# -- archiving on any backend ------------------------------------------------------------------


def test_archive_on_fsspec_copies_verifies_and_deletes() -> None:
    root = f"memory://archive-{uuid.uuid4().hex[:8]}"
    storage = open_storage(root)
    for relative, data in TREE.items():
        storage.write_atomic(join(root, "ck", relative), data)
    report = archive_tree(
        storage, join(root, "ck"), join(root, "old", "ck"), manifest_path=join(root, "m.json")
    )
    assert report.method == "copy" and report.objects == len(TREE)
    assert report.bytes == sum(len(data) for data in TREE.values())
    archived = join(root, "old", "ck")
    assert {rel: storage.read(join(archived, rel)) for rel in storage.walk(archived)} == TREE
    assert storage.walk(join(root, "ck")) == {} and not storage.exists(join(root, "ck"))
    # a second run finds everything archived and only checks it
    again = archive_tree(storage, join(root, "ck"), archived, manifest_path=join(root, "m.json"))
    assert again.method == "resumed"


class FilesOnly:
    """A store with the reader's interface only: no walk, copy, delete or rename."""

    def __init__(self) -> None:
        self.inner = LocalStorage()
        self.requests = self.inner.requests
        self.read = self.inner.read
        self.exists = self.inner.exists
        self.list_dir = self.inner.list_dir
        self.write_atomic = self.inner.write_atomic


def test_archive_on_a_store_without_the_operations_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "metadata").write_text("{}")
    with pytest.raises(UnsupportedOperation) as raised:
        archive_tree(
            FilesOnly(),  # type: ignore[arg-type]
            str(tmp_path / "ck"),
            str(tmp_path / "old"),
            manifest_path=str(tmp_path / "m.json"),
        )
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'ck'}: archiving needs walk, copy_from, delete")
    assert "FilesOnly" in message
    assert not (tmp_path / "m.json").exists() and (tmp_path / "ck" / "metadata").exists()


# -- WebHDFS answers that are not JSON ---------------------------------------------------------


@pytest.fixture
def html_namenode() -> Iterator[str]:
    """An HTTP server answering every call with HTTP 200 and an HTML page (a proxy's)."""

    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer()

        def do_PUT(self) -> None:
            self._answer()

        def _answer(self) -> None:
            body = b"<html><body>Gateway login</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")  # lies, like some proxies
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("call", "op"),
    [
        (lambda s: s.list_dir("hdfs://nn/ck/offsets"), "LISTSTATUS"),
        (lambda s: s.list_children("hdfs://nn/ck"), "LISTSTATUS"),
        (lambda s: s.walk("hdfs://nn/ck"), "LISTSTATUS"),
        (lambda s: s.read("hdfs://nn/ck/offsets"), "OPEN"),
    ],
)
def test_webhdfs_body_that_is_not_json_is_a_storage_error(
    html_namenode: str, call: Any, op: str
) -> None:
    storage = WebHDFSStorage(html_namenode, WebHDFSOptions(connect_timeout=1, read_timeout=2))
    with pytest.raises(StorageError, match=f"^hdfs://nn/ck[a-z/]*: {op} answered HTTP 200"):
        call(storage)
