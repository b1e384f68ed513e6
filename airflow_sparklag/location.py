"""A checkpoint location, read once where it enters (a CLI argument, an operator's rendered field,
a connection extra, a fleet listing): :class:`Location`. Below that the core never parses the
text again. This module sits at the bottom of the package (only :mod:`errors` and :mod:`redact`
below it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_sparklag.errors import InvalidParameter, UnsupportedStorageURL
from airflow_sparklag.redact import redact_url, shown

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
HDFS_SCHEMES = frozenset({"hdfs", "webhdfs"})
LOCAL_SCHEMES = frozenset({"", "file"})


@dataclass(frozen=True)
class Location:
    """Where a checkpoint (or a snapshot or archive root) is: a local path or a store URL.

    >>> where = Location.parse(" s3a://lake/ck/orders/ ")
    >>> str(where), where.scheme, where.authority, where.path, where.kind
    ('s3a://lake/ck/orders', 's3a', 'lake', '/ck/orders', 's3')
    >>> where.join("offsets", "12")
    's3a://lake/ck/orders/offsets/12'
    """

    text: str  # canonical: trimmed of surrounding blanks and trailing slashes
    scheme: str  # lower case; "" for a plain local path
    authority: str  # bucket, container or host[:port]; "" for a local path
    path: str  # after the authority, verbatim (the whole path for a local one)

    @classmethod
    def parse(cls, value: Any, name: str = "location", *, bucket: bool = True) -> Location:
        """The location ``value`` (text or a ``pathlib.Path``) names, or a typed error naming
        parameter ``name``. A bare scheme (``bucket=False``) still names a store: a connection
        test opens its client."""
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, (list, tuple)):
            raise InvalidParameter(
                f"must be one location, got a list of {len(value)}; check many jobs with the "
                "fleet check (SparkLagFleetCheckOperator / `sparklag status --prefix`)",
                name,
            )
        if not isinstance(value, str) or not value.strip():
            raise InvalidParameter(f"must be a checkpoint path or URL, got {shown(value)}", name)
        if "\x00" in value:
            raise InvalidParameter(
                f"must be a checkpoint path or URL, got {ascii(value)[:200]} (a NUL)", name
            )
        _refuse_credentials(value.strip())
        found = cls._of_text(trim_location(value.strip()))
        if bucket:
            found.require_bucket()
        return found

    @classmethod
    def _of_text(cls, text: str) -> Location:
        authority, path = url_parts(text) if "://" in text else ("", text)
        return cls(text, scheme_of(text), authority, path)

    @classmethod
    def of(cls, value: Location | Any, name: str = "location", *, bucket: bool = True) -> Location:
        """``value`` if it is already a Location, else :meth:`parse` of it."""
        if isinstance(value, Location):
            if bucket:
                value.require_bucket()
            return value
        return cls.parse(value, name, bucket=bucket)

    def __str__(self) -> str:
        return self.text

    @property
    def kind(self) -> str:
        """The kind of store: ``local``, ``s3``, ``hdfs``, else the scheme (served by fsspec)."""
        if self.scheme in LOCAL_SCHEMES:
            return "local"
        if self.scheme in S3_SCHEMES:
            return "s3"
        return "hdfs" if self.scheme in HDFS_SCHEMES else self.scheme

    @property
    def store(self) -> tuple[str, str]:
        """Which backend serves it: one for every S3 bucket (one client), one for local disk,
        one per host for the others."""
        if self.kind in ("s3", "local"):
            return (self.kind if self.kind == "s3" else "", "")
        return (self.scheme, urlsplit(self.text).netloc)

    def require_bucket(self) -> None:
        """A checkpoint on an object store needs a bucket (container)."""
        if self.kind in ("local", "hdfs") or urlsplit(self.text).netloc:
            return
        raise UnsupportedStorageURL(
            f"{self.text!r} names no bucket or container; expected "
            f"{self.scheme}://bucket/path/to/checkpoint"
        )

    def join(self, *parts: str) -> str:
        return join(self.text, *parts)

    def child(self, *parts: str) -> Location:
        """The location of a path under this one (a listed directory): nothing to check again,
        a name inside a store adds no scheme, bucket or credentials."""
        return self._of_text(self.join(*parts))


def _refuse_credentials(text: str) -> None:
    """Credentials written into a location (``s3a://KEY:SECRET@bucket/...``) would end up in
    every message that names the location: refuse them, without repeating them."""
    clean = redact_url(text)
    if clean != text:
        raise UnsupportedStorageURL(
            f"{clean}: the location holds credentials (user:secret@), which are never read "
            "from a URL nor printed; give them through the connection or the AWS environment"
        )


def scheme_of(url: str) -> str:
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
