"""Any other URL scheme (``gs://``, ``abfs://``, ``oss://``, ...) through fsspec."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from airflow_sparklag.errors import (
    StorageAccessDenied,
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
    UnsupportedStorageURL,
)
from airflow_sparklag.location import Location, scheme_of
from airflow_sparklag.redact import redact_url, scrub, secret_parts
from airflow_sparklag.storage import (
    BackendOptions,
    Children,
    ObjectInfo,
    RequestCounter,
    Storage,
    base64_md5,
    fsspec_options_for,
)

# Where the fsspec implementation of common schemes lives, for the install hint, and the
# provider's extras that install one.
_IMPLEMENTATIONS = (
    dict.fromkeys(("gs", "gcs"), "gcsfs")
    | dict.fromkeys(("abfs", "abfss", "az", "wasb", "wasbs"), "adlfs")
    | {"oss": "ossfs"}
)
_EXTRAS = {"gcsfs": "gcs", "adlfs": "azure"}
# Options that name things rather than prove identity; every other string is kept out of messages.
_PLAIN_OPTIONS = frozenset(
    {"endpoint_url", "project", "account_name", "requester_pays", "default_location", "anon"}
)


def option_secrets(options: Mapping[str, Any]) -> list[str]:
    """Texts of fsspec options never to print: every string outside :data:`_PLAIN_OPTIONS`
    (tokens, keys, a service-account dict's fields), also URL-encoded (as in a request's URL)."""
    found: list[str] = []

    def walk(key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for inner_key, inner in value.items():
                walk(str(inner_key), inner)
        elif isinstance(value, (list, tuple)):
            for inner in value:
                walk(key, inner)
        elif isinstance(value, str) and key not in _PLAIN_OPTIONS:
            parts = secret_parts(value)
            found.extend(parts + [quote(part, safe="") for part in parts])

    walk("", options)
    return found


@contextlib.contextmanager
def _fs_errors(path: str, action: str, secrets: Iterable[str] = ()) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise StorageNotFound(f"{path}: no such object ({action})") from exc
    except PermissionError as exc:
        raise StorageAccessDenied(
            f"{path}: access denied ({action}): {scrub(str(exc), secrets)}"
        ) from None
    except (StorageError, UnsupportedStorageURL):
        raise
    except Exception as exc:  # each fsspec implementation raises its own errors
        raise StorageError(
            f"{path}: {action} failed: {type(exc).__name__}: {scrub(str(exc), secrets)}"
        ) from None


class FsspecStorage:
    """A store reached through an fsspec filesystem, built with the options given (timeouts
    in the implementation's own terms). ``overwrite=False`` checks first (not race-free on
    every store); ``rename`` answers False (fsspec's ``mv`` is not atomic on object stores).

    Example::

        storage = FsspecStorage.for_url("gs://bucket/ck", token="/secrets/sa.json")
        storage.list_dir("gs://bucket/ck/offsets")
    """

    def __init__(self, filesystem: Any, secrets: Iterable[str] = ()) -> None:
        self.filesystem = filesystem
        self.requests = RequestCounter()
        self.secrets = list(secrets)  # option texts kept out of every error message

    @classmethod
    def for_url(cls, location: str, /, **options: Any) -> FsspecStorage:
        scheme = scheme_of(location)
        package = _IMPLEMENTATIONS.get(scheme, f"the fsspec implementation for {scheme}://")
        extra = _EXTRAS.get(package)
        if extra:  # gcsfs / adlfs: the provider's own extra brings them
            package = f"{package} (pip install 'airflow-provider-sparklag[{extra}]')"
        try:
            import fsspec
        except ImportError as exc:
            raise UnsupportedStorageURL(
                f"{location!r}: {scheme}:// URLs need fsspec and {package}; install "
                f"'airflow-provider-sparklag[fsspec]' and {package}"
            ) from exc
        try:  # ValueError: a scheme fsspec does not know; ImportError: its package is missing
            implementation = fsspec.get_filesystem_class(scheme)
        except (ImportError, ValueError) as exc:
            raise UnsupportedStorageURL(
                f"{location!r}: no storage backend for {scheme}:// ({exc}); install {package}"
            ) from exc
        secrets = option_secrets(options)
        try:
            filesystem = implementation(**options)
        except Exception as exc:  # gcsfs/adlfs check credentials while they are built
            raise _setup_failed(location, scheme, exc, secrets) from None
        return cls(filesystem, secrets)

    def _errors(self, path: str, action: str) -> contextlib.AbstractContextManager[None]:
        return _fs_errors(path, action, self.secrets)

    def list_dir(self, path: str) -> list[ObjectInfo]:
        # A listing whose entries are not what they claim (no name, a size that is not a
        # number) is the store's failure, named by path like the others.
        with self._errors(path, "read the listing"):
            return [
                ObjectInfo(name, int(entry.get("size") or 0), _modified(entry), _content_md5(entry))
                for name, entry in self._listing(path)
                if entry.get("type") == "file"
            ]

    def read(self, path: str) -> bytes:
        self.requests.add("read")
        with self._errors(path, "read"):
            return bytes(self.filesystem.cat_file(path))

    def exists(self, path: str) -> bool:
        self.requests.add("exists")
        with self._errors(path, "exists"):
            return bool(self.filesystem.exists(path))

    def is_file(self, path: str) -> bool:
        # One byte read, not fsspec's info(): on a miss gcsfs and s3fs list the path to see
        # whether it is a directory, and a miss is what a poll of a quiet job gets.
        self.requests.add("stat")
        try:
            with self._errors(path, "stat"):
                self.filesystem.cat_file(path, start=0, end=1)
        except StorageNotFound:
            return False
        return True

    def write_atomic(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        if not overwrite and self.exists(path):
            raise StorageAlreadyExists(f"{path}: already exists; pass overwrite=True to replace it")
        self.requests.add("write")
        with self._errors(path, "write"):
            self.filesystem.pipe_file(path, data)

    def list_children(self, path: str) -> Children:
        listed = self._listing(path)
        return Children.of((name, entry.get("type") == "directory") for name, entry in listed)

    def _listing(self, path: str) -> list[tuple[str, dict[str, Any]]]:
        """One ``ls`` of ``path``: (base name, entry) of each child, none when it is missing.
        Some implementations list the directory's own marker object: left out."""
        self.requests.add("list")
        try:
            with self._errors(path, "list directory"):
                entries = self.filesystem.ls(path, detail=True)
        except StorageNotFound:
            return []
        own = self._name(path)
        with self._errors(path, "read the listing"):
            return [
                (full.rsplit("/", 1)[-1], entry)
                for entry in entries
                for full in [str(entry["name"]).rstrip("/")]
                if full != own
            ]

    def walk(self, root: str) -> dict[str, int]:
        entries = self._find(root)
        own = self._name(root)
        found: dict[str, int] = {}
        with self._errors(root, "read the listing"):
            for name, entry in entries.items():
                full = str(name)
                if full.rstrip("/") == own:  # root itself: a file, or a directory marker
                    found[""] = int(entry.get("size") or 0)
                elif full.startswith(own + "/"):
                    found[full[len(own) + 1 :]] = int(entry.get("size") or 0)
        return found

    def delete(self, path: str) -> None:
        self.requests.add("delete")
        with self._errors(path, "delete"), contextlib.suppress(FileNotFoundError):
            self.filesystem.rm_file(path)

    def remove_empty_directories(self, root: str) -> None:
        entries = self._find(root, withdirs=True)
        if any(entry.get("type") != "directory" for entry in entries.values()):
            raise StorageError(f"{root}: still holds files; not removing it")
        top_level = ("", self.filesystem.root_marker)
        for directory in sorted(entries, key=lambda name: name.count("/"), reverse=True):
            # rmdir of a top-level name would remove a bucket or container.
            if self.filesystem._parent(directory) in top_level:
                continue
            self.requests.add("delete")
            with (
                self._errors(directory, "remove directory"),
                contextlib.suppress(FileNotFoundError),
            ):
                self.filesystem.rmdir(directory)  # refuses a directory that is not empty

    def rename(self, src: str, dst: str) -> bool:
        return False  # see the class docstring

    def copy_from(self, source: Storage, src: str, dst: str) -> None:
        self.write_atomic(dst, source.read(src), overwrite=True)

    def _find(self, root: str, withdirs: bool = False) -> dict[str, dict[str, Any]]:
        """Every object (and directory, ``withdirs``) under ``root``; none when it is missing."""
        self.requests.add("list")
        try:
            with self._errors(root, "walk"):
                return dict(self.filesystem.find(root, withdirs=withdirs, detail=True))
        except StorageNotFound:
            return {}

    def _name(self, path: str) -> str:
        """``path`` as the filesystem names it in listings (``gs://b/ck/`` -> ``b/ck``)."""
        return str(self.filesystem._strip_protocol(path)).rstrip("/")


def _modified(entry: dict[str, Any]) -> float:
    """fsspec implementations name and type the modification time differently."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modificationTime", "created"):
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value) / 1000.0 if value > 1e11 else float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return 0.0


def _content_md5(entry: dict[str, Any]) -> str | None:
    """GCS lists ``md5Hash`` (base64); Azure ``content_settings.content_md5`` (bytes)."""
    if entry.get("md5Hash") is not None:
        return base64_md5(entry.get("md5Hash"))
    settings = entry.get("content_settings")
    digest = getattr(settings, "content_md5", None)
    if digest is None and isinstance(settings, dict):
        digest = settings.get("content_md5")
    return base64_md5(digest) if digest is not None else None


def _setup_failed(
    location: str, scheme: str, exc: Exception, secrets: Iterable[str]
) -> StorageError:
    """The client could not be built from its options (a key file that is not one, a token
    dict lacking a field): say which, without any option's value."""
    if isinstance(exc, KeyError):
        detail = f"the credentials lack the field {exc.args[0]!r}" if exc.args else "KeyError"
    else:
        detail = f"{type(exc).__name__}: {scrub(str(exc), secrets)[:300]}"
    return StorageError(
        f"{redact_url(location)}: could not set up the {scheme}:// client from its options or "
        f"connection ({detail}); check the key file / token / connection"
    )


@dataclass(frozen=True, repr=False)
class FsspecOptions(BackendOptions):
    """The keyword arguments of the fsspec filesystems, flat or per scheme
    (:func:`~airflow_sparklag.storage.fsspec_options_for`). Never printed."""

    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any] | None, name: str) -> FsspecOptions:
        return cls(dict(given or {}))  # any keys: each filesystem checks its own

    def open(self, location: Location) -> Storage:
        return FsspecStorage.for_url(
            str(location), **fsspec_options_for(self.values, location.scheme)
        )
