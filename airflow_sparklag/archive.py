"""Move a directory tree (a checkpoint, a sink log) to an archive location, verified, on any
storage backend: a manifest (every object's size and sha256) is written first, once; then one
rename or a copy of every object; the archive is checked against the manifest before any
original is deleted, and a re-run picks up where one stopped (docs/snapshots.md, "Storage
operations").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from airflow_sparklag.errors import (
    ArchiveError,
    StorageAlreadyExists,
    StorageNotFound,
    UnsupportedOperation,
)
from airflow_sparklag.storage import Storage

MANIFEST_FORMAT = "sparklag-archive-manifest"


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
        return asdict(self)


# -- what archiving needs from the stores ----------------------------------------------------

_OPERATIONS = ("walk", "copy_from", "delete", "remove_empty_directories", "rename")


def _require_operations(storage: Storage, root: str) -> None:
    """Fail before the manifest is written when a store lacks an operation archiving uses."""
    missing = [name for name in _OPERATIONS if not callable(getattr(storage, name, None))]
    if missing:
        raise UnsupportedOperation(
            f"{root}: archiving needs {', '.join(missing)} from the store, which "
            f"{type(storage).__name__} does not offer"
        )


def _under(root: str, relative: str) -> str:
    # On S3 the relative path "" is the directory marker "<root>/" (s3a writes them) and
    # "offsets/" a marker inside: both are objects and are archived like any other.
    return root.rstrip("/") + "/" + relative


def _digest(storage: Storage, path: str) -> tuple[int, str]:
    data = storage.read(path)
    return len(data), hashlib.sha256(data).hexdigest()


def _remove_empty_directories(storage: Storage, root: str) -> None:
    """After every file is gone, drop the empty directory skeleton (nothing to do on S3)."""
    if storage.walk(root):
        raise ArchiveError(f"{root}: still holds files; not removing it")
    storage.remove_empty_directories(root)


def _rename(source: Storage, src: str, target: Storage, dst: str) -> bool:
    """One atomic rename when both sides are the same store and the store has one."""
    if source is not target:
        return False
    try:
        return source.rename(src, dst)
    except StorageAlreadyExists as exc:
        raise ArchiveError(f"{dst}: archive target already exists; not renaming over it") from exc


# -- the archive procedure -------------------------------------------------------------------


def _read_manifest(data: bytes, manifest_path: str) -> list[ManifestEntry]:
    """A manifest an earlier run wrote; anything else is an :class:`ArchiveError` naming it."""
    try:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
            raise ValueError("no manifest format marker")
        return [
            ManifestEntry(str(e["path"]), int(e["size"]), str(e["sha256"]))
            for e in document["objects"]
        ]
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ArchiveError(
            f"{manifest_path}: not an archive manifest ({type(exc).__name__}); move it aside"
        ) from None


def _manifest(
    source: Storage, root: str, manifest_store: Storage, manifest_path: str
) -> list[ManifestEntry]:
    """The manifest: read if an earlier run wrote it, else computed from the tree and written."""
    try:
        return _read_manifest(manifest_store.read(manifest_path), manifest_path)
    except StorageNotFound:
        pass
    entries = [
        ManifestEntry(relative, *_digest(source, _under(root, relative)))
        for relative in sorted(source.walk(root))
    ]
    document = {"format": MANIFEST_FORMAT, "source": root, "objects": [e.__dict__ for e in entries]}
    manifest_store.write_atomic(
        manifest_path, json.dumps(document, indent=1).encode(), overwrite=False
    )
    return entries


def _verify(target: Storage, root: str, entries: list[ManifestEntry]) -> None:
    present = target.walk(root)
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
    _require_operations(source, source_root)
    _require_operations(target, target_root)
    hit = fault or (lambda step: None)
    entries = _manifest(source, source_root, target, manifest_path)
    total = sum(e.size for e in entries)
    hit("archive:manifest")
    remaining = source.walk(source_root)
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
        if source.exists(source_root):
            _remove_empty_directories(source, source_root)
        return ArchiveReport(source_root, target_root, "resumed", len(entries), total)
    if len(remaining) == len(entries) and _rename(source, source_root, target, target_root):
        hit("archive:renamed")
        _verify(target, target_root, entries)
        return ArchiveReport(source_root, target_root, "rename", len(entries), total)
    for entry in entries:
        if entry.path not in remaining:
            continue  # deleted by an earlier run, after its copy was verified
        dst = _under(target_root, entry.path)
        try:
            already = _digest(target, dst) == (entry.size, entry.sha256)
        except StorageNotFound:
            already = False
        if not already:
            target.copy_from(source, _under(source_root, entry.path), dst)
    hit("archive:copied")
    _verify(target, target_root, entries)
    hit("archive:deleting")
    for entry in entries:
        if entry.path in remaining:
            source.delete(_under(source_root, entry.path))
            hit("archive:deleted-one")
    _remove_empty_directories(source, source_root)
    return ArchiveReport(source_root, target_root, "copy", len(entries), total)
