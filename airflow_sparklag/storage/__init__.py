"""Storage backends: one small interface over local files, S3, HDFS (WebHDFS) and fsspec
(docs/architecture.md, "Storage interface"). No client (boto3, requests, fsspec) is imported
here: DAG files import this package, and each backend imports its client when first used."""

from __future__ import annotations

import base64
import binascii
import os
import posixpath
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar, runtime_checkable

from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.location import LOCAL_SCHEMES, S3_SCHEMES, Location, scheme_of, url_parts

Options = TypeVar("Options", bound="BackendOptions")

CHECKPOINT_MARKERS = frozenset({"offsets", "commits"})  # directories that make a checkpoint


class ObjectInfo:
    """One file directly inside a listed directory; ``content_md5``: the hex MD5 of the content
    when the listing proves it (an S3 single-part ETag, GCS md5Hash), else None. A raw S3
    ``etag`` is parsed when first asked (a reader checks one commit's among hundreds). A plain
    class with ``__slots__``: a fleet check builds ~200 per checkpoint, and a frozen dataclass
    costs several times as much to make. Compared by value; treat as read-only."""

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
    """Where a listed key of the checkpoint at key prefix ``root`` (``""`` or ending in ``/``)
    belongs: ``("commits", "12")``, ``("offsets", "12")``, ``("metadata", "metadata")``, or
    None (``state/``, ``metadata.crc``, directory markers, nested keys). The one filter of both
    S3 readers' single-request checkpoint listing.

    >>> checkpoint_log_entry("ck/offsets/12", "ck/"), checkpoint_log_entry("ck/offsets/", "ck/")
    (('offsets', '12'), None)
    """
    directory, slash, name = key[len(root) :].partition("/")
    if slash:
        if directory in CHECKPOINT_MARKERS and name and "/" not in name:
            return directory, name
        return None
    return ("metadata", "metadata") if directory == "metadata" else None


@dataclass(frozen=True)
class Children:
    """The names of the files and of the subdirectories one directory listing shows."""

    files: frozenset[str]
    directories: frozenset[str]

    @classmethod
    def of(cls, listed: Iterable[tuple[str, bool]]) -> Children:
        """From the ``(name, is a directory)`` of each child."""
        names = list(listed)
        files = frozenset(name for name, directory in names if not directory)
        return cls(files, frozenset(name for name, directory in names if directory))

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
        """Write so that readers see the old object or the new one, never a partial one;
        :class:`~airflow_sparklag.errors.StorageAlreadyExists` when ``path`` exists, unless
        ``overwrite``."""
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
        """Every object under ``root``, recursively, hidden ones too: ``/``-separated relative
        path -> size; ``{}`` when ``root`` is missing. An S3 directory marker (written by s3a)
        is an object like any other: ``""`` for ``<root>/`` itself."""
        ...

    def delete(self, path: str) -> None:
        """Delete one object (file); nothing happens when it is already gone."""
        ...

    def remove_empty_directories(self, root: str) -> None:
        """Remove ``root`` and the directories under it once they hold no file; never deletes
        a file (:class:`~airflow_sparklag.errors.StorageError` names a directory holding one)."""
        ...

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` (a file or a whole directory) to ``dst`` in one atomic step; ``False``
        when this store cannot (object stores, another filesystem): the caller copies instead.
        :class:`~airflow_sparklag.errors.StorageAlreadyExists` when ``dst`` exists."""
        ...

    def copy_from(self, source: Storage, src: str, dst: str) -> None:
        """Copy object ``src`` of ``source`` (this store or another) to ``dst`` on this store,
        overwriting ``dst``; server-side where the store can (same S3 client)."""
        ...


def inside(inner: str | Location, outer: str | Location) -> bool:
    """Whether ``inner`` is ``outer`` or a path under it, on the same store: ``.``, ``..`` and
    repeated slashes normalised, local paths resolved (relative ones, symlinks), ``s3``,
    ``s3a`` and ``s3n`` one store.

    >>> inside("s3a://b/ck/orders/archive", "s3://b/ck/orders/"), inside("/a/bc", "/a/b")
    (True, False)
    """
    (store, path), (other, boundary) = _store_path(inner), _store_path(outer)
    return store == other and (path == boundary or path.startswith(boundary.rstrip("/") + "/"))


def _store_path(given: str | Location) -> tuple[str, str]:
    location = str(given)
    scheme = scheme_of(location)
    if scheme in LOCAL_SCHEMES:
        from airflow_sparklag.storage.local import local_path

        return "", os.path.realpath(local_path(location))
    authority, path = url_parts(location)
    family = "s3" if scheme in S3_SCHEMES else scheme
    return f"{family}://{authority}", posixpath.normpath("/" + path.lstrip("/"))


# The backends, one line per scheme: the options type of the backend serving it, "module:Class"
# under airflow_sparklag.storage, imported on first use (DAG parsing never loads a client).
# Adding a backend is its file (a Storage class and a BackendOptions that opens it) and its lines
# here; any scheme not listed is served by fsspec.
BACKENDS = {
    "": "local:LocalOptions",
    "file": "local:LocalOptions",
    "s3": "s3:S3Options",
    "s3a": "s3:S3Options",
    "s3n": "s3:S3Options",
    "hdfs": "webhdfs:WebHDFSOptions",
    "webhdfs": "webhdfs:WebHDFSOptions",
}
OTHER_SCHEMES = "fsspec_store:FsspecOptions"


def options_type(scheme: str) -> type[BackendOptions]:
    import importlib

    module, _, name = BACKENDS.get(scheme, OTHER_SCHEMES).partition(":")
    found: type[BackendOptions] = getattr(
        importlib.import_module(f"airflow_sparklag.storage.{module}"), name
    )
    return found


@dataclass(frozen=True, repr=False)
class BackendOptions:
    """How to open one kind of backend: a frozen dataclass per backend (``S3Options``, ...); a
    None given is "the backend's default". Never printed: options hold secrets."""

    @classmethod
    def from_mapping(cls: type[Options], given: Mapping[str, Any] | None, name: str) -> Options:
        """The options a mapping gives (``Session(s3_options=...)``, CLI flags, connection
        extras); an unknown key (``read_timout``) is InvalidParameter naming ``name`` and it."""
        given = dict(given or {})
        known = sorted(each.name for each in fields(cls))
        unknown = sorted(repr(key) for key in given if key not in known)
        if unknown:
            raise InvalidParameter(
                f"unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}", name
            )
        return cls(**{key: value for key, value in given.items() if value is not None})

    def open(self, location: Location) -> Storage:
        raise NotImplementedError


@dataclass(frozen=True, repr=False)
class StorageOptions:
    """How to open each kind of store, one typed value per backend (docs/connections.md);
    mappings given are read into their type once. ``s3`` may also be a function returning
    them, called on first S3 use (the Airflow hook builds its client only when a checkpoint on
    S3 is read). Never printed: the options hold credentials."""

    s3: BackendOptions | Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None
    webhdfs: BackendOptions | Mapping[str, Any] | None = None
    fsspec: BackendOptions | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for kind in ("s3", "webhdfs", "fsspec"):
            value = getattr(self, kind)
            if isinstance(value, Mapping):
                object.__setattr__(self, kind, _typed(kind, value))

    def options_for(self, wanted: type[BackendOptions]) -> BackendOptions:
        """The options of the backend ``wanted`` types (its defaults when none were given)."""
        for value in (self.s3, self.webhdfs, self.fsspec):
            if callable(value) and wanted is options_type("s3"):  # only an S3 backend calls it
                value = _typed("s3", value())
            if isinstance(value, wanted):
                return value
        return wanted()

    def open(self, location: Location | str) -> Storage:
        """A new backend for ``location``'s scheme (``s3://``: no bucket needed)."""
        where = Location.of(location, bucket=False)
        return self.options_for(options_type(where.scheme)).open(where)


def _typed(kind: str, given: Mapping[str, Any]) -> BackendOptions:
    scheme = {"s3": "s3", "webhdfs": "hdfs", "fsspec": "gs"}[kind]  # one each kind serves
    return options_type(scheme).from_mapping(given, f"{kind}_options")


def open_storage(location: Location | str, options: StorageOptions | None = None) -> Storage:
    """The backend for ``location``'s scheme (:data:`BACKENDS`, else fsspec), opened with its
    options from ``options``; time bounds: docs/connections.md ("Time bounds")."""
    return (options or StorageOptions()).open(location)


# Schemes served by one fsspec implementation: options given for the first name apply to all.
FSSPEC_FAMILIES = {"gcs": "gs", "abfss": "abfs", "az": "abfs"}
# Keys that name a scheme when their value is a dict (per-scheme fsspec options).
FSSPEC_SCHEME_KEYS = frozenset(
    {"gs", "gcs", "abfs", "abfss", "az", "adl", "wasb", "wasbs", "oss", "memory", "s3", "hf"}
)


def fsspec_options_for(options: Mapping[str, Any] | None, scheme: str) -> dict[str, Any]:
    """The fsspec options for ``scheme``: the flat keys, then a scheme's own mapping
    (``{"gs": {"token": ...}}``) merged over them; a family's (:data:`FSSPEC_FAMILIES`) serve
    its other names, and an exact scheme's own win."""
    options = dict(options or {})

    def per_scheme(key: str) -> bool:
        return key in FSSPEC_SCHEME_KEYS and isinstance(options[key], Mapping)

    merged = {key: value for key, value in options.items() if not per_scheme(key)}
    for key in (FSSPEC_FAMILIES.get(scheme), scheme):
        if key and key in options and per_scheme(key):
            merged.update(options[key])
    return merged


def seconds_option(value: Any, name: str) -> float:
    """A timeout option: a finite number of seconds > 0, or an error naming the option."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise InvalidParameter(f"must be a finite number of seconds > 0, got {value!r}", name)
    return float(value)
