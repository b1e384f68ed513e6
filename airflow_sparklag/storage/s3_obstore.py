"""The S3 read path over obstore (Rust ``object_store``), the default on Python >= 3.11, set
up from the boto3 client and session: docs/connections.md ("How checkpoint files are read on
S3"). obstore is imported when the first store is built."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from airflow_sparklag.errors import StorageError
from airflow_sparklag.redact import scrub
from airflow_sparklag.storage import ObjectInfo, checkpoint_log_entry

# Frozen credentials are handed to obstore for this long at most (botocore refreshes the
# underlying ones itself, 15 minutes before an assumed role's expire; a role may last 15 min).
CREDENTIAL_TTL = timedelta(minutes=5)
# Keys converted to Python objects at a time while a checkpoint listing is walked: Rust
# parses a whole page (1,000 keys), Python only looks at keys until the first one past
# offsets/, so a stateful checkpoint's state/ keys are never turned into objects.
LIST_CHUNK = 256
PAGE_KEYS = 1000  # keys of a full ListObjectsV2 page
# What obstore's error text carries of S3's answer: the HTTP status and the XML error code.
_STATUS = re.compile(r"non-2xx status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_REDIRECT = "Received redirect without LOCATION"  # object_store's own words for S3's 301
# How each reader's listing entries name an object's size, modification time and ETag.
BOTO3_KEYS = ("Size", "LastModified", "ETag")
OBSTORE_KEYS = ("size", "last_modified", "e_tag")


@dataclass(frozen=True)
class ObstoreSettings:
    """How to reach S3, in obstore's terms, from the settings of the boto3 client."""

    region: str
    endpoint_url: str | None  # None: AWS itself (object_store builds the regional URL)
    virtual_hosted: bool  # the bucket in the host name (botocore's addressing_style)
    client_options: dict[str, Any]  # obstore's ClientConfig
    retry: dict[str, Any]  # obstore's RetryConfig


def settings_from(client: Any, verify: bool | str | None, attempts: int) -> ObstoreSettings:
    """obstore's settings from a boto3 S3 client, its ``verify`` (None: ``AWS_CA_BUNDLE``'s)
    and its attempts in all (the table in docs/connections.md)."""
    import os
    import urllib.request

    config = client.meta.config
    endpoint_url = client.meta.endpoint_url
    if verify is None:
        verify = os.environ.get("AWS_CA_BUNDLE") or None
    proxies = config.proxies or urllib.request.getproxies()
    on_aws = endpoint_url is None or (urlsplit(endpoint_url).hostname or "").endswith(
        ".amazonaws.com"
    )
    style = ((getattr(config, "s3", None) or {}).get("addressing_style") or "auto").lower()
    virtual = style == "virtual" or (style == "auto" and on_aws)
    connect = float(config.connect_timeout)
    read = float(config.read_timeout)
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=connect),
        "read_timeout": timedelta(seconds=read),
        "timeout": timedelta(seconds=connect + read),
        "pool_max_idle_per_host": str(config.max_pool_connections),
        "allow_http": bool(endpoint_url and endpoint_url.startswith("http://")),
    }
    if verify is False:
        options["allow_invalid_certificates"] = True
    elif isinstance(verify, str) and verify:
        options["root_certificate"] = _pem(verify, "verify (CA bundle)")
    scheme = "http" if options["allow_http"] else "https"
    proxy = proxies.get(scheme) or proxies.get("https" if scheme == "http" else "http")
    if proxy:
        options["proxy_url"] = proxy
        proxy_ca = (getattr(config, "proxies_config", None) or {}).get("proxy_ca_bundle")
        if proxy_ca:
            options["proxy_ca_certificate"] = _pem(proxy_ca, "proxy_ca_bundle")
        no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy")
        if no_proxy:
            options["proxy_excludes"] = no_proxy
    return ObstoreSettings(
        region=client.meta.region_name or "us-east-1",
        endpoint_url=None if on_aws else endpoint_url,
        virtual_hosted=virtual,
        client_options=options,
        retry={
            "max_retries": max(0, attempts - 1),
            "retry_timeout": timedelta(seconds=(connect + read) * attempts),
        },
    )


def header_safe_credentials(provider: Any) -> bool:
    """Whether the provider's credentials can go into an HTTP header as object_store signs
    them (printable ASCII only); False also when they cannot be had now."""
    try:
        credentials = provider()
    except Exception:
        return False
    values = (credentials.get(k) for k in ("access_key_id", "secret_access_key", "token"))
    return all(
        value is None or (isinstance(value, str) and all(" " <= ch <= "~" for ch in value))
        for value in values
    )


def _pem(path: str, what: str) -> str:
    try:
        with open(path, encoding="ascii") as bundle:
            return bundle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"{path}: the {what} cannot be read: {exc}") from None


def answer_of(exc: BaseException) -> tuple[str, str]:
    """(S3 error code, HTTP status) of a failed obstore request, "" where it carries none
    (connection refused, timeouts): the same two things boto3's ``ClientError`` names."""
    text = str(exc)
    if _REDIRECT in text:  # S3's 301 to a bucket's own region (it has no Location header)
        return "PermanentRedirect", "301"
    status = _STATUS.search(text)
    code = _CODE.search(text)
    return (code.group(1) if code else "", status.group(1) if status else "")


def checkpoint_files(
    listed: Iterable[tuple[str, Mapping[str, Any]]], root: str, keys: tuple[str, str, str]
) -> tuple[dict[str, list[ObjectInfo]], int, bool]:
    """Both readers' one filter: a listing from ``<root>commits`` on, as ``(key, entry)``
    pairs (entries named by ``keys``), sorted into ``commits``, ``offsets`` and ``metadata``
    up to the first key past ``offsets/``; also the keys taken before it, and whether it was
    reached (the listing stops there)."""
    # The first key after every <root>offsets/... key ("0" follows "/"): a listing that starts
    # after <root>commits has seen both logs and metadata once it reaches it.
    end = root + "offsets0"
    found: dict[str, list[ObjectInfo]] = {"commits": [], "offsets": [], "metadata": []}
    seen = 0
    for key, entry in listed:
        if key >= end:
            return found, seen, True
        seen += 1
        where = checkpoint_log_entry(key, root)
        if where is not None:
            found[where[0]].append(listed_object(where[1], entry, keys))
    return found, seen, False


def listed_object(
    name: str, entry: Mapping[str, Any], keys: tuple[str, str, str] = BOTO3_KEYS
) -> ObjectInfo:
    """The ObjectInfo of a listing entry, in either reader's names (``keys``)."""
    size, modified, etag = keys
    when = entry.get(modified)
    seconds = when.timestamp() if when is not None else 0.0
    return ObjectInfo(name, int(entry.get(size, 0)), seconds, etag=entry.get(etag))


class ObstoreReader:
    """List and read S3 objects through obstore; one ``S3Store`` per bucket (object_store
    scopes a store, and its connection pool, to one bucket), all sharing one credential
    provider. ``secrets`` are scrubbed from every error message.

    Example::

        reader = ObstoreReader(Boto3CredentialProvider(session), settings_from(...))
        reader.read("bucket", "ck/offsets/3")
    """

    def __init__(
        self, provider: Any, settings: ObstoreSettings, secrets: list[str] | None = None
    ) -> None:
        self._provider = provider
        self.settings = settings
        self._secrets = list(secrets or [])
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def store(self, bucket: str) -> Any:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._new_store(bucket)
        return store

    def _new_store(self, bucket: str) -> Any:
        from obstore.store import S3Store

        settings = self.settings
        config: dict[str, Any] = {
            "region": settings.region,
            "virtual_hosted_style_request": settings.virtual_hosted,
        }
        endpoint = settings.endpoint_url
        if endpoint and settings.virtual_hosted:
            # object_store takes a virtual-hosted endpoint as the bucket's own URL
            parts = urlsplit(endpoint)
            endpoint = f"{parts.scheme}://{bucket}.{parts.netloc}{parts.path}"
        if endpoint:
            config["endpoint"] = endpoint.rstrip("/")
        return S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=settings.client_options,  # type: ignore[arg-type]
            retry_config=settings.retry,  # type: ignore[arg-type]
            credential_provider=self._provider,
        )

    def read(self, bucket: str, key: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.store(bucket), key).bytes())

    def has_object(self, bucket: str, key: str) -> bool:
        """One HEAD: is there an object at ``key``?"""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            obstore.head(self.store(bucket), key)
        except (FileNotFoundError, NotFoundError):  # obstore raises the builtin for a 404
            return False
        return True

    def list_checkpoint(self, bucket: str, root: str) -> tuple[dict[str, list[ObjectInfo]], int]:
        """``S3Storage.list_checkpoint``'s answer at key prefix ``root``, and the pages it
        took (S3 pages hold 1,000 keys)."""
        import obstore

        stream = obstore.list(
            self.store(bucket),
            root.rstrip("/") or None,
            offset=root + "commits",
            chunk_size=LIST_CHUNK,
        )
        listed_keys = ((meta["path"], meta) for chunk in stream for meta in chunk)
        found, seen, ended = checkpoint_files(listed_keys, root, OBSTORE_KEYS)
        return found, 1 + (seen if ended else max(0, seen - 1)) // PAGE_KEYS

    def list_children(self, bucket: str, prefix: str) -> tuple[set[str], set[str], int]:
        """Names of the files and the subdirectories directly under key prefix ``prefix``
        (``""`` or ending in ``/``), and the pages it took."""
        import obstore

        listed = obstore.list_with_delimiter(self.store(bucket), prefix.rstrip("/") or None)
        files = {meta["path"][len(prefix) :] for meta in listed["objects"]}
        directories = {common[len(prefix) :] for common in listed["common_prefixes"]}
        seen = len(listed["objects"]) + len(listed["common_prefixes"])
        pages = 1 + max(0, seen - 1) // PAGE_KEYS
        return {f for f in files if f and "/" not in f}, {d for d in directories if d}, pages

    def describe(self, exc: BaseException) -> str:
        """The first line of ``exc``'s text without credentials."""
        text = scrub(str(exc), self._secrets).strip()
        return text.splitlines()[0][:300] if text else type(exc).__name__
