"""Storage backends: one tiny interface over local files, S3, HDFS (WebHDFS) and fsspec.

Paths handed to a backend are full URLs or local paths, built with :func:`join`::

    from airflow_sparklag.storage import join, open_storage

    root = "s3a://bucket/checkpoints/orders"
    storage = open_storage(root, s3_options={"region_name": "eu-west-1"})
    names = [o.name for o in storage.list_dir(join(root, "offsets"))]
    data = storage.read(join(root, "offsets", "12"))

No backend client (boto3, requests, fsspec) is imported here: DAG files import this package and
DAG parsing must stay fast. Each backend imports its client inside its own functions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

__all__ = [
    "ObjectInfo",
    "RequestCounter",
    "Storage",
    "join",
    "open_storage",
    "scheme_of",
]

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
HDFS_SCHEMES = frozenset({"hdfs", "webhdfs"})
LOCAL_SCHEMES = frozenset({"", "file"})


@dataclass(frozen=True)
class ObjectInfo:
    """One file directly inside a listed directory."""

    name: str  # base name inside the listed directory, e.g. "12"
    size: int
    modified: float  # epoch seconds (storage LastModified / modificationTime)


class RequestCounter:
    """Counts the requests a backend sends, per operation, so callers can check a budget.

    Example::

        storage.requests.reset()
        storage.read(path)
        assert storage.requests.total == 1 and storage.requests["read"] == 1
    """

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()

    def add(self, operation: str, count: int = 1) -> None:
        self.by_operation[operation] += count

    def __getitem__(self, operation: str) -> int:
        return self.by_operation[operation]

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())

    def reset(self) -> None:
        self.by_operation.clear()

    def __repr__(self) -> str:
        return f"RequestCounter({dict(self.by_operation)})"


@runtime_checkable
class Storage(Protocol):
    """What the checkpoint reader needs from a store. Every backend also has ``requests``."""

    requests: RequestCounter

    def list_dir(self, path: str) -> list[ObjectInfo]:
        """Direct children of ``path`` that are files; ``[]`` when the directory is missing."""
        ...

    def read(self, path: str) -> bytes:
        """The whole object; raises :class:`~airflow_sparklag.errors.StorageNotFound`."""
        ...

    def write_atomic(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        """Write so that readers see the old object or the new one, never a partial one.

        With ``overwrite=False`` raises :class:`~airflow_sparklag.errors.StorageAlreadyExists`
        when ``path`` exists.
        """
        ...

    def exists(self, path: str) -> bool:
        """True when ``path`` is an object (or, where the store has them, a directory)."""
        ...


def scheme_of(url: str) -> str:
    """Lower-case URL scheme, ``""`` for a plain local path."""
    if "://" not in url and not url.startswith("file:"):
        return ""
    return urlsplit(url).scheme.lower()


def join(root: str, *parts: str) -> str:
    """Join a checkpoint root (URL or path) and relative parts with ``/``.

    >>> join("s3a://bucket/ck/", "offsets", "12")
    's3a://bucket/ck/offsets/12'
    """
    base = root.rstrip("/") or root  # keep a bare "/" as it is
    pieces = [part.strip("/") for part in parts if part.strip("/")]
    if not pieces:
        return base
    separator = "" if base.endswith("/") else "/"
    return base + separator + "/".join(pieces)


def open_storage(
    url: str,
    *,
    s3_options: dict[str, Any] | None = None,
    webhdfs_options: dict[str, Any] | None = None,
    fsspec_options: dict[str, Any] | None = None,
) -> Storage:
    """Return the backend for ``url``'s scheme.

    - local paths and ``file://`` URLs: :class:`~airflow_sparklag.storage.local.LocalStorage`
    - ``s3://``, ``s3a://``, ``s3n://``: :class:`~airflow_sparklag.storage.s3.S3Storage`
      (``s3_options``: ``endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``,
      ``aws_session_token``, ``region_name`` or a ready ``client``)
    - ``hdfs://``, ``webhdfs://``: :class:`~airflow_sparklag.storage.webhdfs.WebHDFSStorage`
      (``webhdfs_options``: ``url`` or a list of NameNode URLs for HA, ``user``)
    - anything else (``gs://``, ``abfs://``, ...): :class:`~.fsspec_store.FsspecStorage`
      when fsspec and the scheme's implementation are installed.
    """
    scheme = scheme_of(url)
    if scheme in LOCAL_SCHEMES:
        from airflow_sparklag.storage.local import LocalStorage

        return LocalStorage()
    if scheme in S3_SCHEMES:
        from airflow_sparklag.storage.s3 import S3Storage

        return S3Storage(**(s3_options or {}))
    if scheme in HDFS_SCHEMES:
        from airflow_sparklag.storage.webhdfs import WebHDFSStorage

        return WebHDFSStorage.for_url(url, **(webhdfs_options or {}))
    from airflow_sparklag.storage.fsspec_store import FsspecStorage

    return FsspecStorage.for_url(url, **(fsspec_options or {}))
