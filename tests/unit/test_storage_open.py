"""open_storage dispatch, join, lazy imports, fsspec and WebHDFS pieces that need no cluster."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import StorageAlreadyExists, StorageError, UnsupportedStorageURL
from airflow_sparklag.location import join
from airflow_sparklag.storage import StorageOptions, open_storage
from airflow_sparklag.storage.fsspec_store import FsspecStorage
from airflow_sparklag.storage.hadoop_conf import HadoopConf
from airflow_sparklag.storage.local import LocalStorage
from airflow_sparklag.storage.s3 import S3Storage, split_s3_url
from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage, hdfs_path

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


@pytest.mark.parametrize(
    ("root", "parts", "expected"),
    [
        ("s3a://bucket/ck/", ("offsets", "12"), "s3a://bucket/ck/offsets/12"),
        ("s3a://bucket/ck", ("/offsets/",), "s3a://bucket/ck/offsets"),
        ("/tmp/ck", ("metadata",), "/tmp/ck/metadata"),
        ("/", ("ck",), "/ck"),
        ("hdfs://nn:8020/ck", (), "hdfs://nn:8020/ck"),
    ],
)
def test_join(root: str, parts: tuple[str, ...], expected: str) -> None:
    assert join(root, *parts) == expected


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("/tmp/ck", LocalStorage),
        ("relative/ck", LocalStorage),
        ("file:///tmp/ck", LocalStorage),
        ("file:/tmp/ck", LocalStorage),
        ("s3://b/ck", S3Storage),
        ("S3A://b/ck", S3Storage),
        ("s3n://b/ck", S3Storage),
        ("hdfs://nn:8020/ck", WebHDFSStorage),
        ("webhdfs://nn:9870/ck", WebHDFSStorage),
        ("memory://ck", FsspecStorage),
    ],
)
def test_open_storage_dispatches_on_scheme(url: str, backend: type) -> None:
    assert isinstance(open_storage(url), backend)


def test_s3_url_split() -> None:
    assert split_s3_url("s3a://bucket/a/b") == ("bucket", "a/b")
    assert split_s3_url("s3n://bucket") == ("bucket", "")
    # Hadoop's Path keeps ?, # and %XX as characters of the key (urlsplit cut them off)
    assert split_s3_url("s3a://b/ck ?x #y%41/offsets") == ("b", "ck ?x #y%41/offsets")
    with pytest.raises(UnsupportedStorageURL, match="'gs://b/k' is not an S3 URL"):
        split_s3_url("gs://b/k")


def test_unknown_scheme_names_the_scheme() -> None:
    with pytest.raises(UnsupportedStorageURL, match=r"nosuchfs://"):
        open_storage("nosuchfs://bucket/ck")


def test_scheme_without_installed_implementation_names_the_package(monkeypatch) -> None:
    import importlib

    registry = importlib.import_module("fsspec.registry")  # the module, not fsspec.registry
    # As if gcsfs were not installed (the dev extra installs it): importing it fails, and
    # fsspec has not registered its class yet.
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    monkeypatch.delitem(registry._registry, "gs", raising=False)
    with pytest.raises(UnsupportedStorageURL, match=r"gs://.*install gcsfs"):
        open_storage("gs://bucket/ck")


def test_storage_modules_do_not_import_clients_at_import_time() -> None:
    code = (
        "import sys, airflow_sparklag.storage, airflow_sparklag.checkpoint, "
        "airflow_sparklag.storage.s3, airflow_sparklag.storage.webhdfs, "
        "airflow_sparklag.storage.fsspec_store, airflow_sparklag.storage.local\n"
        "from airflow_sparklag.storage import open_storage\n"
        "open_storage('s3a://b/ck'); open_storage('hdfs://nn:8020/ck')\n"
        "heavy = {'boto3', 'botocore', 'requests', 'fsspec', 'hdfs', 'pyspark'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- fsspec (memory:// is built into fsspec) ---------------------------------------------------


def _memory_checkpoint(sample: str) -> str:
    storage = FsspecStorage.for_url("memory://")
    root = f"memory://ck-{sample}"
    for path in (DATA / sample).rglob("*"):
        if path.is_file() and "state" not in path.parts:
            storage.write_atomic(
                f"{root}/{path.relative_to(DATA / sample).as_posix()}", path.read_bytes()
            )
    return root


def test_fsspec_backend_reads_a_checkpoint() -> None:
    root = _memory_checkpoint("ckn4.2.1")
    storage = open_storage(root)
    state = CheckpointReader(storage, root).read(history=2)
    assert state.committed_batch_id == 4
    assert state.in_flight is not None and state.in_flight.batch_id == 5
    assert [s.source_id for s in state.in_flight.sources] == ["alpha", "beta_1"]
    # memory:// lists no content hash: commits/4 is read too
    assert storage.requests.by_operation == {"list": 2, "read": 5}


def test_fsspec_list_read_write_errors() -> None:
    root = _memory_checkpoint("cka")
    storage = FsspecStorage.for_url(root)
    assert sorted(o.name for o in storage.list_dir(f"{root}/offsets")) == [
        ".0.crc",
        ".3.crc",
        ".6.crc",
        "0",
        "3",
        "6",
    ]
    assert storage.list_dir(f"{root}/missing") == []
    with pytest.raises(StorageAlreadyExists, match=f"{root}/metadata: already exists"):
        storage.write_atomic(f"{root}/metadata", b"{}")
    storage.write_atomic(f"{root}/metadata", b'{"id":"x"}', overwrite=True)
    assert storage.read(f"{root}/metadata") == b'{"id":"x"}'
    assert not storage.exists(f"{root}/nope")


# -- WebHDFS pieces that need no cluster (the rest: tests/integration/test_storage_hdfs.py) ----


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("hdfs://nn1.example:8020/ck", "http://nn1.example:9870"),
        ("hdfs://nn1.example/ck", "http://nn1.example:9870"),
        ("webhdfs://nn1.example:50070/ck", "http://nn1.example:50070"),
        ("webhdfs://nn1.example/ck", "http://nn1.example:9870"),
    ],
)
def test_namenode_url_derived_from_location(location: str, expected: str) -> None:
    assert HadoopConf().namenode_urls(location) == [expected]  # no Hadoop configuration


def test_hdfs_url_without_host_needs_explicit_namenode() -> None:
    with pytest.raises(
        UnsupportedStorageURL, match=r"has no NameNode host; name one .* --webhdfs-url"
    ):
        open_storage("hdfs:///ck")
    storage = open_storage(
        "hdfs:///ck", StorageOptions(webhdfs={"url": ["http://a:9870", "http://b:9870"]})
    )
    assert isinstance(storage, WebHDFSStorage)
    assert storage.namenode_urls == ["http://a:9870", "http://b:9870"]


def test_hdfs_path() -> None:
    assert hdfs_path("hdfs://nn:8020/a/b") == "/a/b"
    assert hdfs_path("webhdfs://nn/a") == "/a"
    assert hdfs_path("/a") == "/a"
    assert hdfs_path("hdfs://nn:8020/ck ?x #y%41") == "/ck ?x #y%41"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def standby_namenode() -> Iterator[str]:
    """An HTTP server answering every WebHDFS call like a standby NameNode does."""

    class Standby(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(
                {
                    "RemoteException": {
                        "exception": "StandbyException",
                        "javaClassName": "org.apache.hadoop.ipc.StandbyException",
                        "message": "Operation category READ is not supported in state standby",
                    }
                }
            ).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Standby)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_namenode_down_or_standby_is_a_storage_error(standby_namenode: str) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    options = WebHDFSOptions(user="spark", connect_timeout=1, read_timeout=2)
    storage = WebHDFSStorage([dead, standby_namenode], options)
    with pytest.raises(StorageError) as raised:
        storage.read("hdfs://cluster/ck/offsets/3")
    message = str(raised.value)
    assert message.startswith("hdfs://cluster/ck/offsets/3: OPEN failed on every NameNode")
    assert dead in message and "ConnectionError" in message
    assert standby_namenode in message and "StandbyException" in message


def test_hdfscli_alone_names_no_namenode(standby_namenode: str) -> None:
    """Why WebHDFSStorage notes every answer (docs/connections.md, "HDFS"): after its fail-over
    HdfsCLI raises the last NameNode's error only, naming neither NameNode."""
    from hdfs import Client, HdfsError

    dead = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(HdfsError) as raised:
        Client(f"{dead};{standby_namenode}", timeout=2).status("/ck")
    assert raised.value.exception == "StandbyException"
    assert "127.0.0.1" not in str(raised.value) and "Connection" not in str(raised.value)


@pytest.mark.parametrize("url", ["s3a://", "s3://", "gs://", "gs:///ck", "abfs://", "az:///x"])
def test_a_url_without_bucket_is_refused_naming_it(url: str) -> None:
    from airflow_sparklag.session import Session

    with pytest.raises(UnsupportedStorageURL, match="names no bucket or container"):
        Session().reader(url)
    with pytest.raises(UnsupportedStorageURL, match="names no bucket or container"):
        CheckpointReader(open_storage("/"), url)


@pytest.mark.parametrize(
    ("given", "trimmed", "joined"),
    [
        ("s3a://b/ck/", "s3a://b/ck", "s3a://b/ck/offsets"),
        ("s3a://b/ck//", "s3a://b/ck", "s3a://b/ck/offsets"),
        ("s3a://", "s3a://", "s3a://offsets"),  # never "s3a:", a local directory name
        ("file:///", "file:///", "file:///offsets"),
        ("hdfs:///ck/", "hdfs:///ck", "hdfs:///ck/offsets"),
        ("/", "/", "/offsets"),
        ("/data/ck/", "/data/ck", "/data/ck/offsets"),
        ("ck/", "ck", "ck/offsets"),
    ],
)
def test_trim_location_keeps_scheme_and_authority(given: str, trimmed: str, joined: str) -> None:
    from airflow_sparklag.location import join, trim_location

    assert trim_location(given) == trimmed
    assert join(given, "offsets") == joined


@pytest.mark.parametrize(
    ("missing", "options", "extra"),
    [("hdfs", {}, "[hdfs]"), ("requests_gssapi", {"kerberos": True}, "[kerberos]")],
)
def test_hdfs_without_its_extra_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch, missing: str, options: dict, extra: str
) -> None:
    # A package that is not installed cannot be made so in this venv: hide it from the finder.
    import importlib.util

    from airflow_sparklag.errors import UsageError
    from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a)
    )
    storage = WebHDFSStorage("http://127.0.0.1:9", WebHDFSOptions(**options))
    with pytest.raises(UsageError, match=rf"pip install 'airflow-provider-sparklag\{extra}'"):
        storage.list_dir("/checkpoints/orders/offsets")
