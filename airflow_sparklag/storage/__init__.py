"""Storage backends: one small interface over local files, S3, HDFS (WebHDFS) and fsspec
(docs/architecture.md, "Storage interface"). Each backend owns every operation; paths handed to
it are full URLs or local paths built with :func:`join`.

No backend client (boto3, requests, fsspec) is imported here: DAG files import this package and
DAG parsing must stay fast. Each backend imports its client inside its own functions.
"""

from __future__ import annotations

import base64
import binascii
import os
import posixpath
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from airflow_sparklag.errors import InvalidParameter, UnsupportedStorageURL

__all__ = [
    "CHECKPOINT_MARKERS",
    "Children",
    "ObjectInfo",
    "RequestCounter",
    "Storage",
    "checkpoint_listing_end",
    "checkpoint_log_entry",
    "inside",
    "join",
    "open_storage",
    "refuse_bucketless",
    "scheme_of",
    "seconds_option",
    "trim_location",
    "url_parts",
]

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
HDFS_SCHEMES = frozenset({"hdfs", "webhdfs"})
LOCAL_SCHEMES = frozenset({"", "file"})
CHECKPOINT_MARKERS = frozenset({"offsets", "commits"})  # directories that make a checkpoint


class ObjectInfo:
    """One file directly inside a listed directory.

    ``content_md5`` is the hex MD5 of the content when the listing proves it (an S3
    single-part ETag, GCS md5Hash), None when unknown. A raw S3 ``etag`` is parsed only when
    first asked: a reader checks the ETag of one commit among hundreds of listed files.
    A plain class with ``__slots__``: a fleet check builds ~200 per checkpoint, and a frozen
    dataclass costs several times as much to make. Compared by value; treat as read-only.
    """

    __slots__ = ("_etag", "_md5", "modified", "name", "size")

    def __init__(
        self,
        name: str,
        size: int,
        modified: float,
        content_md5: str | None = None,
        *,
        etag: object = None,
    ) -> None:
        self.name = name  # base name inside the listed directory, e.g. "12"
        self.size = size
        self.modified = modified  # epoch seconds (storage LastModified / modificationTime)
        self._md5 = content_md5
        self._etag = etag

    @property
    def content_md5(self) -> str | None:
        etag = self._etag  # once: another thread may parse it meanwhile
        if etag is not None:
            md5 = self._md5 = etag_md5(etag)
            self._etag = None
            return md5
        return self._md5

    def _key(self) -> tuple[str, int, float, str | None]:
        return self.name, self.size, self.modified, self.content_md5

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObjectInfo):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"ObjectInfo(name={self.name!r}, size={self.size!r}, modified={self.modified!r}, "
            f"content_md5={self.content_md5!r})"
        )


_HEX = frozenset("0123456789abcdef")


def etag_md5(etag: object) -> str | None:
    """The content MD5 an S3 ETag proves: a single-part upload's quoted 32-hex-digit ETag.

    A multipart ETag (``"...-3"``) is not an MD5 and gives None. SSE-KMS/SSE-C ETags look like
    one but are not: a mismatch only means "read the file", never a wrong answer.
    """
    if not isinstance(etag, str):
        return None
    value = etag.strip().strip('"').lower()
    return value if len(value) == 32 and set(value) <= _HEX else None


def base64_md5(value: object) -> str | None:
    """The hex MD5 from a base64 ``md5Hash`` (GCS) or a raw 16-byte digest (Azure)."""
    raw: bytes | None = None
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        raw = bytes(value)
    elif isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
    return raw.hex() if raw is not None and len(raw) == 16 else None


def checkpoint_log_entry(key: str, root: str) -> tuple[str, str] | None:
    """Where a listed key of the checkpoint at key prefix ``root`` (``""`` or ending in
    ``/``) belongs: ``("commits", "12")``, ``("offsets", "12")``, ``("metadata", "metadata")``,
    or None for anything else (``state/``, ``metadata.crc``, directory markers such as
    ``offsets/``, nested keys). The one filter of every store that lists a checkpoint in one
    request (S3 through boto3 or obstore).

    >>> checkpoint_log_entry("ck/offsets/12", "ck/"), checkpoint_log_entry("ck/offsets/", "ck/")
    (('offsets', '12'), None)
    """
    directory, slash, name = key[len(root) :].partition("/")
    if slash:
        if directory in CHECKPOINT_MARKERS and name and "/" not in name:
            return directory, name
        return None
    return ("metadata", "metadata") if directory == "metadata" else None


def checkpoint_listing_end(root: str) -> str:
    """The first key after every ``<root>offsets/...`` key ("0" follows "/"): a listing that
    starts after ``<root>commits`` has seen both logs and ``metadata`` once it reaches it."""
    return root + "offsets0"


@dataclass(frozen=True)
class Children:
    """What one directory listing shows: the names of files and of subdirectories."""

    files: frozenset[str]
    directories: frozenset[str]

    @property
    def is_checkpoint(self) -> bool:
        return "metadata" in self.files or bool(CHECKPOINT_MARKERS & self.directories)


class RequestCounter:
    """Counts the requests a backend sends, per operation (``requests["read"]``, ``.total``),
    so callers can check a budget."""

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()
        self._lock = threading.Lock()  # readers share a backend across threads

    def add(self, operation: str, count: int = 1) -> None:
        with self._lock:
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
    """What the package needs from a store. The checkpoint reader needs the first four
    methods; fleet discovery needs ``list_children``; archiving needs the rest. A backend that
    cannot do an operation raises :class:`~airflow_sparklag.errors.UnsupportedOperation`,
    naming itself and the path. Every method counts the requests it sends in ``requests``.
    """

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

    def is_file(self, path: str) -> bool:
        """Is there a file at ``path``? ONE point request (S3 HEAD, WebHDFS GETFILESTATUS, a
        local stat, fsspec a one-byte read), never a listing: how a poll asks "anything new?"."""
        ...

    def list_children(self, path: str) -> Children:
        """Names of the files and subdirectories directly under ``path``, in one listing
        (paginated where the store pages); no children when the directory is missing."""
        ...

    def walk(self, root: str) -> dict[str, int]:
        """Every object under ``root``, recursively, hidden ones too: relative path -> size.

        Relative paths are ``/``-separated. On S3 a directory marker (an object whose key ends
        with ``/``, written by s3a) is an object like any other: ``""`` for ``<root>/`` itself,
        ``"offsets/"`` for one inside. A missing ``root`` gives ``{}``.
        """
        ...

    def delete(self, path: str) -> None:
        """Delete one object (file); nothing happens when it is already gone."""
        ...

    def remove_empty_directories(self, root: str) -> None:
        """Remove ``root`` and the directories under it once they hold no file.

        Never deletes a file: raises :class:`~airflow_sparklag.errors.StorageError` naming a
        directory that still holds one. Nothing to do on stores without directories (S3).
        """
        ...

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` (a file or a whole directory) to ``dst`` in one atomic step.

        ``True`` when renamed; ``False`` when this store cannot rename atomically (object
        stores, another filesystem): the caller copies instead. Raises
        :class:`~airflow_sparklag.errors.StorageAlreadyExists` when ``dst`` exists.
        """
        ...

    def copy_from(self, source: Storage, src: str, dst: str) -> None:
        """Copy object ``src`` of ``source`` (this store or another) to ``dst`` on this store,
        overwriting ``dst``; server-side where the store can (same S3 client)."""
        ...


def scheme_of(url: str) -> str:
    """Lower-case URL scheme, ``""`` for a plain local path."""
    if "://" not in url and not url.startswith("file:"):
        return ""
    return urlsplit(url).scheme.lower()


def url_parts(url: str) -> tuple[str, str]:
    """(authority, path) of a storage URL as Hadoop's ``Path`` reads it: the path is everything
    after the authority, verbatim. ``?``, ``#`` and ``%41`` are characters of a key or file
    name there, not a query, a fragment or an escape (Spark writes ``s3a://b/ck ?x #1`` to the
    keys ``ck ?x #1/...``), where ``urlsplit`` would cut the path at ``?`` or ``#``.

    >>> url_parts("s3a://bucket/my ck ?x #y%41/offsets")
    ('bucket', '/my ck ?x #y%41/offsets')
    >>> url_parts("s3a://bucket")
    ('bucket', '')
    """
    rest = url.partition("://")[2]
    authority, slash, path = rest.partition("/")
    return authority, slash + path


def inside(inner: str, outer: str) -> bool:
    """Whether ``inner`` is ``outer`` or a path under it, on the same store: ``.``, ``..`` and
    repeated slashes normalised, local paths resolved (relative ones, symlinks), ``s3``,
    ``s3a`` and ``s3n`` one store.

    >>> inside("s3a://b/ck/orders/archive", "s3://b/ck/orders/"), inside("/a/bc", "/a/b")
    (True, False)
    """
    (store, path), (other, boundary) = _store_path(inner), _store_path(outer)
    return store == other and (path == boundary or path.startswith(boundary.rstrip("/") + "/"))


def _store_path(location: str) -> tuple[str, str]:
    scheme = scheme_of(location)
    if scheme in LOCAL_SCHEMES:
        from airflow_sparklag.storage.local import local_path

        return "", os.path.realpath(local_path(location))
    authority, path = url_parts(location)
    family = "s3" if scheme in S3_SCHEMES else scheme
    return f"{family}://{authority}", posixpath.normpath("/" + path.lstrip("/"))


def trim_location(location: str) -> str:
    """``location`` without trailing slashes, but never less than its scheme and authority:
    ``"s3a://b/ck/"`` -> ``"s3a://b/ck"``, while ``"s3a://"`` and ``"/"`` stay as they are (a
    bare ``"s3a:"`` would be read as a local directory named ``s3a:``).

    >>> trim_location("s3a://bucket/ck//"), trim_location("s3a://"), trim_location("/")
    ('s3a://bucket/ck', 's3a://', '/')
    """
    scheme, found, rest = location.partition("://")
    if not found:
        return location.rstrip("/") or location
    trimmed = rest.rstrip("/")
    return f"{scheme}://{trimmed}" if trimmed else location


def refuse_bucketless(location: str) -> None:
    """A checkpoint on an object store needs a bucket (container): ``s3a://`` or ``gs:///ck``
    is :class:`~airflow_sparklag.errors.UnsupportedStorageURL` naming it. (A bare scheme is
    fine for building that scheme's client, as a connection test does.)"""
    scheme = scheme_of(location)
    if scheme in LOCAL_SCHEMES or scheme in HDFS_SCHEMES or urlsplit(location).netloc:
        return
    raise UnsupportedStorageURL(
        f"{location!r} names no bucket or container; expected {scheme}://bucket/path/to/checkpoint"
    )


def join(root: str, *parts: str) -> str:
    """Join a checkpoint root (URL or path) and relative parts with ``/``.

    >>> join("s3a://bucket/ck/", "offsets", "12")
    's3a://bucket/ck/offsets/12'
    """
    base = trim_location(root)
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
    """The backend for ``url``'s scheme: local paths and ``file://``, S3 (``s3``, ``s3a``,
    ``s3n``), HDFS (``hdfs``, ``webhdfs``), else fsspec (``gs://``, ``abfs://``, ...). The
    options of each are in docs/architecture.md ("Storage interface") and their time bounds in
    docs/connections.md ("Time bounds"); an option the backend does not know (``read_timout``)
    raises :class:`~airflow_sparklag.errors.InvalidParameter` naming it.
    """
    scheme = scheme_of(url)
    if scheme in LOCAL_SCHEMES:
        from airflow_sparklag.storage.local import LocalStorage

        return LocalStorage()
    if scheme in S3_SCHEMES:
        from airflow_sparklag.storage.s3 import S3Storage

        return S3Storage(**_known_options(S3Storage, s3_options, "s3_options"))
    if scheme in HDFS_SCHEMES:
        from airflow_sparklag.storage.webhdfs import WebHDFSStorage

        options = _known_options(WebHDFSStorage, webhdfs_options, "webhdfs_options", "url")
        return WebHDFSStorage.for_url(url, **options)
    from airflow_sparklag.storage.fsspec_store import FsspecStorage

    return FsspecStorage.for_url(url, **fsspec_options_for(fsspec_options, scheme))


# Schemes served by one fsspec implementation: options given for the first name apply to all.
FSSPEC_FAMILIES = {"gcs": "gs", "abfss": "abfs", "az": "abfs"}
# Keys that name a scheme when their value is a dict (per-scheme fsspec options).
FSSPEC_SCHEME_KEYS = frozenset(
    {"gs", "gcs", "abfs", "abfss", "az", "adl", "wasb", "wasbs", "oss", "memory", "s3", "hf"}
)


def fsspec_options_for(options: Mapping[str, Any] | None, scheme: str) -> dict[str, Any]:
    """The fsspec options for ``scheme``: a flat dict applies to every scheme; keys naming a
    scheme hold that scheme's own (``{"gs": {"token": ...}, "abfs": {"account_name": ...}}``),
    merged over the flat ones; ``gs`` options serve ``gcs://`` too, ``abfs`` ones ``abfss://``
    and ``az://`` (:data:`FSSPEC_FAMILIES`), an exact scheme's own win."""
    options = dict(options or {})

    def per_scheme(key: str) -> bool:
        return key in FSSPEC_SCHEME_KEYS and isinstance(options[key], Mapping)

    merged = {key: value for key, value in options.items() if not per_scheme(key)}
    for key in (FSSPEC_FAMILIES.get(scheme), scheme):
        if key and key in options and per_scheme(key):
            merged.update(options[key])
    return merged


def _known_options(
    backend: Any, options: dict[str, Any] | None, name: str, *also: str
) -> dict[str, Any]:
    """``options`` if ``backend`` (or ``also``) takes every one of them; a misspelt option
    (``read_timout``) is an error naming it, not a TypeError from deep inside."""
    import inspect

    options = dict(options or {})
    parameters = inspect.signature(backend).parameters.values()
    keyword_only = (p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)
    known = sorted([*also, *keyword_only])
    unknown = sorted(key for key in options if key not in known)
    if unknown:
        raise InvalidParameter(
            f"unknown option(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}", name
        )
    return options


def seconds_option(value: Any, name: str) -> float:
    """A timeout option: a finite number of seconds > 0, or an error naming the option."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise InvalidParameter(f"must be a finite number of seconds > 0, got {value!r}", name)
    return float(value)
