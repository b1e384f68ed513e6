"""LocalStorage: plain paths and file:// URLs, atomic writes, typed errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_sparklag.errors import StorageAccessDenied, StorageAlreadyExists, StorageNotFound
from airflow_sparklag.storage.local import LocalStorage, local_path

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/a/b", "/a/b"),
        ("file:/a/b", "/a/b"),
        ("file:///a/b", "/a/b"),
        ("file://localhost/a/b", "/a/b"),
        ("file:///a/with%20space", "/a/with space"),
        ("relative/dir", "relative/dir"),
    ],
)
def test_local_path(given: str, expected: str) -> None:
    assert local_path(given) == expected


def test_list_dir_lists_files_only_with_hidden_crc() -> None:
    storage = LocalStorage()
    names = sorted(o.name for o in storage.list_dir(str(DATA / "ck43")))
    assert names == [".metadata.crc", "metadata"]  # no commits/, offsets/, sources/, state/
    offsets = {o.name: o for o in storage.list_dir((DATA / "ck43" / "offsets").as_uri())}
    assert set(offsets) == {"0", "1", ".0.crc", ".1.crc"}
    stat = (DATA / "ck43" / "offsets" / "1").stat()
    assert (offsets["1"].size, offsets["1"].modified) == (stat.st_size, stat.st_mtime)


def test_list_dir_of_missing_directory_or_file_is_empty(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    storage = LocalStorage()
    assert storage.list_dir(str(tmp_path / "missing")) == []
    assert storage.list_dir(str(tmp_path / "file")) == []


def test_read_and_not_found(tmp_path: Path) -> None:
    storage = LocalStorage()
    assert storage.read(str(DATA / "ck35" / "metadata")).startswith(b'{"id":')
    with pytest.raises(StorageNotFound, match=f"{tmp_path}/nope: no such file"):
        storage.read(str(tmp_path / "nope"))


def test_permission_denied_is_typed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"x")
    secret.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(StorageAccessDenied, match=f"{secret}: permission denied"):
            LocalStorage().read(str(secret))
        return
    # Root ignores file modes: read as an unprivileged user in a child process instead.
    tmp_path.chmod(0o755)
    code = (
        "import os, sys\n"
        "from airflow_sparklag.errors import StorageAccessDenied\n"
        "from airflow_sparklag.storage.local import LocalStorage\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        f"    LocalStorage().read({str(secret)!r})\n"
        "except StorageAccessDenied as exc:\n"
        f"    sys.exit(0 if {str(secret)!r} + ': permission denied' in str(exc) else 3)\n"
        "sys.exit(2)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert result.returncode == 0, result.stderr


def test_write_atomic_create_refuse_overwrite(tmp_path: Path) -> None:
    storage = LocalStorage()
    target = tmp_path / "new" / "dir" / "metadata"
    storage.write_atomic(target.as_uri(), b"one")
    assert target.read_bytes() == b"one"
    with pytest.raises(StorageAlreadyExists, match=f"{target.as_uri()}: already exists"):
        storage.write_atomic(target.as_uri(), b"two")
    assert target.read_bytes() == b"one"
    storage.write_atomic(str(target), b"two", overwrite=True)
    assert target.read_bytes() == b"two"
    # No temp file left behind.
    assert sorted(os.listdir(target.parent)) == ["metadata"]


def test_exists_and_request_counter(tmp_path: Path) -> None:
    storage = LocalStorage()
    assert storage.exists(str(DATA / "ck35" / "offsets"))
    assert not storage.exists(str(tmp_path / "x"))
    storage.list_dir(str(tmp_path))
    storage.read(str(DATA / "ck35" / "metadata"))
    assert storage.requests.by_operation == {"exists": 2, "list": 1, "read": 1}
    assert storage.requests.total == 4
    storage.requests.reset()
    assert storage.requests.total == 0
