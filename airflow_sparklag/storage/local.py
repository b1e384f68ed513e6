"""Local filesystem backend: plain paths and ``file://`` URLs."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from airflow_sparklag.errors import (
    StorageAccessDenied,
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
)
from airflow_sparklag.location import Location
from airflow_sparklag.storage import BackendOptions, Children, ObjectInfo, RequestCounter, Storage


def local_path(path: str) -> str:
    """``/a/b``, ``file:/a/b`` (Hadoop's form) and ``file:///a/b`` all give ``/a/b``."""
    if path.startswith("file:"):
        return unquote(urlsplit(path).path)
    return path


@contextlib.contextmanager
def _os_errors(path: str, action: str) -> Iterator[None]:
    """Turn OSError into the package's typed storage errors, naming the path."""
    try:
        yield
    except FileNotFoundError as exc:
        raise StorageNotFound(f"{path}: no such file ({action})") from exc
    except PermissionError as exc:
        raise StorageAccessDenied(
            f"{path}: permission denied ({action}); check the file's owner and mode"
        ) from exc
    except OSError as exc:
        raise StorageError(f"{path}: {action} failed: {exc.strerror or exc}") from exc


class LocalStorage:
    """Files on a local (or locally mounted) filesystem.

    Example::

        storage = LocalStorage()
        storage.write_atomic("/tmp/ck/metadata", b'{"id":"q"}')
        assert storage.read("file:///tmp/ck/metadata") == b'{"id":"q"}'
    """

    def __init__(self) -> None:
        self.requests = RequestCounter()

    def list_dir(self, path: str) -> list[ObjectInfo]:
        self.requests.add("list")
        entries: list[ObjectInfo] = []
        for entry in _scan(path):
            # An entry purged between scandir and stat must not fail the whole list.
            try:
                if not entry.is_file():
                    continue
                stat = entry.stat()
            except FileNotFoundError:
                continue
            entries.append(ObjectInfo(entry.name, stat.st_size, stat.st_mtime))
        return entries

    def read(self, path: str) -> bytes:
        self.requests.add("read")
        with _os_errors(path, "read"), open(local_path(path), "rb") as handle:
            return handle.read()

    def exists(self, path: str) -> bool:
        self.requests.add("exists")
        return os.path.exists(local_path(path))

    def is_file(self, path: str) -> bool:
        self.requests.add("stat")
        return os.path.isfile(local_path(path))

    def write_atomic(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        self.requests.add("write")
        target = local_path(path)
        directory, name = os.path.split(target)
        # Same directory as the target, so the final rename never crosses filesystems; the
        # dot prefix keeps the temp file out of every batch listing.
        temp = os.path.join(directory or ".", f".{name}.{uuid.uuid4().hex}.tmp")
        with _os_errors(path, "write"):
            if directory:
                os.makedirs(directory, exist_ok=True)
            try:
                with open(temp, "xb") as handle:
                    handle.write(data)
                    handle.flush()
                    # fsync before the rename: otherwise a crash can leave a renamed empty file.
                    os.fsync(handle.fileno())
                if overwrite:
                    os.replace(temp, target)
                else:
                    # link() fails when the target exists: no window between check and rename.
                    try:
                        os.link(temp, target)
                    except FileExistsError as exc:
                        raise StorageAlreadyExists(
                            f"{path}: already exists; pass overwrite=True to replace it"
                        ) from exc
                    except OSError as exc:
                        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
                            raise
                        # Filesystems without hard links: check, then rename.
                        if os.path.exists(target):
                            raise StorageAlreadyExists(
                                f"{path}: already exists; pass overwrite=True to replace it"
                            ) from exc
                        os.replace(temp, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
            _fsync_directory(directory or ".")

    def list_children(self, path: str) -> Children:
        self.requests.add("list")
        listed: list[tuple[str, bool]] = []
        for entry in _scan(path):
            try:
                is_directory = entry.is_dir()
            except FileNotFoundError:
                continue
            except OSError:  # a symlink loop, an unreadable link: nothing to descend
                is_directory = False
            listed.append((entry.name, is_directory))
        return Children.of(listed)

    def walk(self, root: str) -> dict[str, int]:
        base = local_path(root)
        found: dict[str, int] = {}
        for directory, _dirs, files in os.walk(base, onerror=_raise_unless_missing):
            self.requests.add("list")
            for name in files:
                full = os.path.join(directory, name)
                relative = os.path.relpath(full, base).replace(os.sep, "/")
                try:
                    found[relative] = os.path.getsize(full)
                except FileNotFoundError:
                    continue
        return found

    def delete(self, path: str) -> None:
        self.requests.add("delete")
        with _os_errors(path, "delete"), contextlib.suppress(FileNotFoundError):
            os.remove(local_path(path))

    def remove_empty_directories(self, root: str) -> None:
        for directory, _dirs, files in os.walk(local_path(root), topdown=False):
            if files:
                raise StorageError(f"{directory}: still holds files; not removing it")
            self.requests.add("delete")
            with _os_errors(directory, "remove directory"):
                os.rmdir(directory)

    def rename(self, src: str, dst: str) -> bool:
        src_path, dst_path = local_path(src), local_path(dst)
        if os.path.islink(src_path):
            # A checkpoint location that is a symlink: move the directory it names (what the
            # manifest lists), never the link alone (a relative one dangles once moved).
            src_path = os.path.realpath(src_path)
        if os.path.exists(dst_path):
            raise StorageAlreadyExists(f"{dst}: already exists; not renaming over it")
        self.requests.add("rename")
        with _os_errors(dst, "rename"):
            os.makedirs(os.path.dirname(dst_path) or ".", exist_ok=True)
        try:
            os.rename(src_path, dst_path)
        except OSError as exc:
            if exc.errno == errno.EXDEV:  # another filesystem: the caller copies instead
                return False
            raise StorageError(f"{src}: rename to {dst} failed: {exc}") from exc
        return True

    def copy_from(self, source: Storage, src: str, dst: str) -> None:
        self.write_atomic(dst, source.read(src), overwrite=True)


def _scan(path: str) -> list[os.DirEntry[str]]:
    """The entries of directory ``path``; none when it is missing (or a file)."""
    try:
        with os.scandir(local_path(path)) as scan:
            return list(scan)
    except OSError as exc:
        _raise_unless_missing(exc, path)
        return []


def _raise_unless_missing(exc: OSError, path: str | None = None) -> None:
    """A directory gone meanwhile is empty, anything else fails as our typed error (in os.walk,
    a directory skipped silently would be left out of an archive's manifest)."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        with _os_errors(path or str(exc.filename), "list directory"):
            raise exc


def _fsync_directory(directory: str) -> None:
    """Persist the rename itself (POSIX); not possible on every OS, hence best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True, repr=False)
class LocalOptions(BackendOptions):
    """Local files take no options."""

    def open(self, location: Location) -> Storage:
        return LocalStorage()
