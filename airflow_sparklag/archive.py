"""Move a directory tree (a checkpoint, a sink log) to an archive location, verified.

The checkpoint reader only needs ``list_dir``/``read``; archiving needs more: list a tree
recursively, copy, delete and (where the store has it) rename. Those live here, on top of the
storage backends' own clients, so the ``Storage`` interface stays tiny::

    from airflow_sparklag.archive import archive_tree

    report = archive_tree(storage, "s3a://b/ck/orders", "s3a://b/archive/orders/checkpoint",
                          manifest_path="s3a://b/archive/orders/checkpoint.manifest.json")

Order of work, so that nothing is ever deleted unverified:

1. a manifest (every object's relative path, size and sha256) is written first, once;
2. local disk and HDFS: one atomic rename of the directory, then the archived tree is checked
   against the manifest; S3 (and different stores): every object is copied and its copy checked
   (size + sha256), then the originals are deleted, each only after its copy was verified;
3. a re-run with the same manifest picks up where an interrupted one stopped.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_sparklag.errors import SparkLagError, StorageError, StorageNotFound
from airflow_sparklag.storage import Storage

__all__ = ["ArchiveError", "ArchiveReport", "ManifestEntry", "archive_tree", "list_tree"]

MANIFEST_FORMAT = "sparklag-archive-manifest"


class ArchiveError(SparkLagError):
    """An archived copy does not match the original, or the original changed meanwhile."""


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative to the tree root, "/"-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class ArchiveReport:
    source: str
    target: str
    method: str  # "rename" | "copy"
    objects: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "method": self.method,
            "objects": self.objects,
            "bytes": self.bytes,
        }


# -- per-backend operations ------------------------------------------------------------------


def _kind(storage: Storage) -> str:
    from airflow_sparklag.storage.local import LocalStorage
    from airflow_sparklag.storage.s3 import S3Storage
    from airflow_sparklag.storage.webhdfs import WebHDFSStorage

    if isinstance(storage, LocalStorage):
        return "local"
    if isinstance(storage, S3Storage):
        return "s3"
    if isinstance(storage, WebHDFSStorage):
        return "hdfs"
    raise StorageError(
        f"archiving is supported on local disk, S3 and HDFS, not on {type(storage).__name__}"
    )


def _under(root: str, relative: str) -> str:
    # On S3 the relative path "" is the directory marker "<root>/" (s3a writes them) and
    # "offsets/" a marker inside: both are objects and are archived like any other.
    return root.rstrip("/") + "/" + relative


def list_tree(storage: Storage, root: str) -> dict[str, int]:
    """Every object under ``root`` (recursively, hidden files too): relative path -> size."""
    kind = _kind(storage)
    storage.requests.add("list")
    if kind == "local":
        from airflow_sparklag.storage.local import local_path

        base = local_path(root)
        found: dict[str, int] = {}
        for directory, _dirs, files in os.walk(base):
            for name in files:
                full = os.path.join(directory, name)
                relative = os.path.relpath(full, base).replace(os.sep, "/")
                try:
                    found[relative] = os.path.getsize(full)
                except FileNotFoundError:
                    continue
        return found
    if kind == "s3":
        from airflow_sparklag.storage.s3 import split_s3_url

        bucket, key = split_s3_url(root)
        prefix = key.rstrip("/") + "/"
        found = {}
        token = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            response = storage.call(root, "list", storage.client.list_objects_v2, **kwargs)  # type: ignore[attr-defined]
            for item in response.get("Contents", []):
                found[item["Key"][len(prefix) :]] = int(item.get("Size", 0))
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return found
    return _hdfs_walk(storage, root, "")


def _hdfs_walk(storage: Any, root: str, relative: str) -> dict[str, int]:
    try:
        response = storage.namenode("GET", _under(root, relative), "LISTSTATUS")
    except StorageNotFound:
        return {}
    found: dict[str, int] = {}
    for status in response.json().get("FileStatuses", {}).get("FileStatus", []):
        name = status.get("pathSuffix")
        if not name:  # LISTSTATUS of a file lists the file itself with an empty suffix
            found[relative] = int(status.get("length", 0))
            continue
        child = f"{relative}/{name}" if relative else name
        if status.get("type") == "DIRECTORY":
            found.update(_hdfs_walk(storage, root, child))
        else:
            found[child] = int(status.get("length", 0))
    return found


def _digest(storage: Storage, path: str) -> tuple[int, str]:
    data = storage.read(path)
    return len(data), hashlib.sha256(data).hexdigest()


def _copy(source: Storage, src: str, target: Storage, dst: str) -> None:
    if source is target and _kind(source) == "s3":
        from airflow_sparklag.storage.s3 import split_s3_url

        src_bucket, src_key = split_s3_url(src)
        dst_bucket, dst_key = split_s3_url(dst)
        source.requests.add("copy")
        source.call(  # type: ignore[attr-defined]
            dst,
            "copy",
            source.client.copy_object,  # type: ignore[attr-defined]
            Bucket=dst_bucket,
            Key=dst_key,
            CopySource={"Bucket": src_bucket, "Key": src_key},
        )
        return
    target.write_atomic(dst, source.read(src), overwrite=True)


def _delete(storage: Storage, path: str) -> None:
    kind = _kind(storage)
    storage.requests.add("delete")
    if kind == "local":
        from airflow_sparklag.storage.local import local_path

        with contextlib.suppress(FileNotFoundError):
            os.remove(local_path(path))
        return
    if kind == "s3":
        from airflow_sparklag.storage.s3 import split_s3_url

        bucket, key = split_s3_url(path)
        storage.call(path, "delete", storage.client.delete_object, Bucket=bucket, Key=key)  # type: ignore[attr-defined]
        return
    with contextlib.suppress(StorageNotFound):
        storage.namenode("DELETE", path, "DELETE", {"recursive": "false"})  # type: ignore[attr-defined]


def _remove_empty_directories(storage: Storage, root: str) -> None:
    """After every file is gone, drop the empty directory skeleton (local, HDFS)."""
    kind = _kind(storage)
    if kind == "local":
        from airflow_sparklag.storage.local import local_path

        base = local_path(root)
        for directory, _dirs, files in os.walk(base, topdown=False):
            if files:
                raise ArchiveError(f"{directory}: still holds files; not removing it")
            os.rmdir(directory)
    elif kind == "hdfs":
        if list_tree(storage, root):
            raise ArchiveError(f"{root}: still holds files; not removing it")
        with contextlib.suppress(StorageNotFound):
            storage.namenode("DELETE", root, "DELETE", {"recursive": "true"})  # type: ignore[attr-defined]


def _rename(source: Storage, src: str, target: Storage, dst: str) -> bool:
    """Atomic directory rename when both sides are the same local disk or HDFS."""
    if source is not target:
        return False
    kind = _kind(source)
    if kind == "local":
        from airflow_sparklag.storage.local import local_path

        src_path, dst_path = local_path(src), local_path(dst)
        if os.path.exists(dst_path):
            raise ArchiveError(f"{dst}: archive target already exists; not renaming over it")
        os.makedirs(os.path.dirname(dst_path) or ".", exist_ok=True)
        try:
            os.rename(src_path, dst_path)
        except OSError as exc:
            if exc.errno == errno.EXDEV:  # another filesystem: copy instead
                return False
            raise StorageError(f"{src}: rename to {dst} failed: {exc}") from exc
        return True
    if kind == "hdfs":
        from airflow_sparklag.storage.webhdfs import hdfs_path

        if source.exists(dst):
            raise ArchiveError(f"{dst}: archive target already exists; not renaming over it")
        parent = hdfs_path(dst).rsplit("/", 1)[0] or "/"
        source.namenode("PUT", parent, "MKDIRS")  # type: ignore[attr-defined]
        response = source.namenode(  # type: ignore[attr-defined]
            "PUT", src, "RENAME", {"destination": hdfs_path(dst)}
        )
        if not response.json().get("boolean"):
            raise StorageError(f"{src}: HDFS refused to rename it to {dst}")
        return True
    return False


# -- the archive procedure -------------------------------------------------------------------


def _manifest(
    source: Storage, root: str, manifest_store: Storage, manifest_path: str
) -> list[ManifestEntry]:
    """The manifest: read if an earlier run wrote it, else computed from the tree and written."""
    try:
        data = manifest_store.read(manifest_path)
    except StorageNotFound:
        data = None
    if data is not None:
        document = json.loads(data)
        if document.get("format") != MANIFEST_FORMAT:
            raise ArchiveError(f"{manifest_path}: not an archive manifest")
        return [ManifestEntry(e["path"], int(e["size"]), e["sha256"]) for e in document["objects"]]
    entries = []
    for relative, _size in sorted(list_tree(source, root).items()):
        size, sha = _digest(source, _under(root, relative))
        entries.append(ManifestEntry(relative, size, sha))
    document = {
        "format": MANIFEST_FORMAT,
        "source": root,
        "objects": [e.__dict__ for e in entries],
    }
    manifest_store.write_atomic(
        manifest_path, json.dumps(document, indent=1).encode(), overwrite=False
    )
    return entries


def _verify(target: Storage, root: str, entries: list[ManifestEntry]) -> None:
    present = list_tree(target, root)
    for entry in entries:
        if entry.path not in present:
            raise ArchiveError(f"{_under(root, entry.path)}: missing from the archive")
        size, sha = _digest(target, _under(root, entry.path))
        if (size, sha) != (entry.size, entry.sha256):
            raise ArchiveError(
                f"{_under(root, entry.path)}: archived copy differs from the original "
                f"(size {size} vs {entry.size}, sha256 {sha[:12]} vs {entry.sha256[:12]})"
            )


def archive_tree(
    source: Storage,
    source_root: str,
    target_root: str,
    *,
    manifest_path: str,
    target: Storage | None = None,
    fault: Callable[[str], None] | None = None,
) -> ArchiveReport:
    """Move ``source_root`` to ``target_root``, verified; safe to call again after a crash.

    ``fault`` is a test hook called with a step name (``archive:manifest``,
    ``archive:copied``, ``archive:deleting``) so tests can simulate a crash there.
    """
    target = target or source
    hit = fault or (lambda step: None)
    entries = _manifest(source, source_root, target, manifest_path)
    total = sum(e.size for e in entries)
    hit("archive:manifest")
    remaining = list_tree(source, source_root)
    expected = {e.path: e.size for e in entries}
    unknown = sorted(p for p, size in remaining.items() if expected.get(p) != size)
    if unknown:
        raise ArchiveError(
            f"{source_root}: changed since its manifest {manifest_path} was written "
            f"({len(unknown)} object(s) new or resized, e.g. {unknown[0]}): is the job running "
            "again? Stop it; nothing was deleted"
        )
    if not remaining:
        # Nothing left at the source: an earlier run moved it. The archive must hold it all.
        _verify(target, target_root, entries)
        if _kind(source) != "s3" and source.exists(source_root):
            _remove_empty_directories(source, source_root)
        return ArchiveReport(source_root, target_root, "resumed", len(entries), total)
    if len(remaining) == len(entries) and _rename(source, source_root, target, target_root):
        hit("archive:renamed")
        _verify(target, target_root, entries)
        return ArchiveReport(source_root, target_root, "rename", len(entries), total)
    for entry in entries:
        src = _under(source_root, entry.path)
        dst = _under(target_root, entry.path)
        if entry.path not in remaining:
            continue  # deleted by an earlier run, after its copy was verified
        try:
            already = _digest(target, dst) == (entry.size, entry.sha256)
        except StorageNotFound:
            already = False
        if not already:
            _copy(source, src, target, dst)
    hit("archive:copied")
    _verify(target, target_root, entries)
    hit("archive:deleting")
    for entry in entries:
        if entry.path in remaining:
            _delete(source, _under(source_root, entry.path))
            hit("archive:deleted-one")
    if _kind(source) != "s3":
        _remove_empty_directories(source, source_root)
    return ArchiveReport(source_root, target_root, "copy", len(entries), total)
