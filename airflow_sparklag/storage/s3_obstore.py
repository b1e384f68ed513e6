"""The S3 read path of a fleet check (one ListObjectsV2 per checkpoint, GETs) over obstore.

obstore is the Python binding of Rust's ``object_store``: signing, HTTP, retries and the XML
parse of a listing run in Rust, outside the GIL. A first fleet check through boto3 spent ~60%
of its client CPU in botocore's per-request machinery and ~22% parsing listings
(docs/benchmarks.md, "Fleet check with network latency"). Only reads go through here; writes,
deletes, copies, HEADs and delimiter listings stay with boto3 (conditional writes, the error
mapping the migration relies on).

Credentials still come from boto3 / the amazon provider: from the boto3 client the backend
would use (static keys, the default chain, an assumed role's refreshing credentials), asked
again before they expire. The endpoint and region come from the same options or client.

obstore is imported when the first store is built, never at module import.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_sparklag.errors import (
    BucketNotFound,
    StorageAccessDenied,
    StorageError,
    StorageNotFound,
)
from airflow_sparklag.redact import scrub
from airflow_sparklag.storage import ObjectInfo

# Frozen credentials are asked again this often at most (botocore refreshes the underlying
# ones itself, ~15 minutes before an assumed role's expire).
CREDENTIAL_TTL = timedelta(minutes=5)
# Keys converted to Python objects at a time while a checkpoint listing is walked: Rust
# parses a whole page (1,000 keys), Python only looks at keys until the first one past
# offsets/, so a stateful checkpoint's state/ keys are never turned into objects.
LIST_CHUNK = 256


def obstore_available() -> bool:
    try:
        import obstore  # noqa: F401
    except ImportError:
        return False
    return True


def credential_provider(credentials: Any) -> Callable[[], dict[str, Any]]:
    """An obstore credential provider reading a botocore ``Credentials`` object (refreshable
    or not): each call hands over its current frozen keys, valid for ``CREDENTIAL_TTL``."""

    def provide() -> dict[str, Any]:
        frozen = credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(timezone.utc) + CREDENTIAL_TTL,
        }

    return provide


class ObstoreReader:
    """List and read S3 objects through obstore: one ``S3Store`` per bucket, built once.

    ``credentials`` is a botocore ``Credentials`` object (``client._request_signer._credentials``
    or ``session.get_credentials()``); ``secrets`` are scrubbed from every error message.
    """

    def __init__(
        self,
        *,
        credentials: Any,
        region: str | None,
        endpoint_url: str | None,
        connect_timeout: float,
        read_timeout: float,
        max_attempts: int,
        pool_size: int,
        secrets: list[str] | None = None,
    ) -> None:
        self._provider = credential_provider(credentials)
        self._region = region or "us-east-1"
        self._endpoint = endpoint_url
        self._client_options = {
            "connect_timeout": timedelta(seconds=connect_timeout),
            "timeout": timedelta(seconds=read_timeout),
            "allow_http": bool(endpoint_url and endpoint_url.startswith("http://")),
            "pool_max_idle_per_host": str(pool_size),
        }
        self._retry = {
            "max_retries": max(0, max_attempts - 1),
            "retry_timeout": timedelta(seconds=(connect_timeout + read_timeout) * max_attempts),
        }
        self._secrets = list(secrets or [])
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def store(self, bucket: str) -> Any:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                from obstore.store import S3Store

                config: dict[str, Any] = {"region": self._region}
                if self._endpoint:
                    config["endpoint"] = self._endpoint
                store = S3Store(
                    bucket,
                    config=config,  # type: ignore[arg-type]
                    client_options=self._client_options,  # type: ignore[arg-type]
                    retry_config=self._retry,  # type: ignore[arg-type]
                    credential_provider=self._provider,  # type: ignore[arg-type]
                )
                self._stores[bucket] = store
        return store

    def read(self, path: str, bucket: str, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self.store(bucket), key).bytes())
        except Exception as exc:
            raise self._error(exc, path, "read", bucket) from None

    def list_checkpoint(self, location: str, bucket: str, root: str) -> dict[str, list[ObjectInfo]]:
        """``commits/``, ``offsets/`` and ``metadata`` of the checkpoint at key prefix ``root``
        (``""`` or ending in ``/``): one ListObjectsV2 from ``<root>commits`` on, stopped at
        the first key past ``offsets/`` (see ``S3Storage.list_checkpoint``)."""
        import obstore

        end = root + "offsets0"
        found: dict[str, list[ObjectInfo]] = {"commits": [], "offsets": [], "metadata": []}
        try:
            stream = obstore.list(
                self.store(bucket),
                root.rstrip("/") or None,
                offset=root + "commits",
                chunk_size=LIST_CHUNK,
            )
            for chunk in stream:
                if _collect(chunk, root, end, found):
                    break
        except Exception as exc:
            raise self._error(exc, location, "list", bucket) from None
        return found

    def _error(self, exc: Exception, path: str, action: str, bucket: str) -> StorageError:
        from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

        text = scrub(str(exc), self._secrets)
        if "NoSuchBucket" in text:
            return BucketNotFound(
                f"{path}: bucket {bucket!r} does not exist; check the bucket name and the endpoint"
            )
        if isinstance(exc, FileNotFoundError):  # obstore's NotFound
            return StorageNotFound(f"{path}: no such object ({action})")
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or "AccessDenied" in text:
            return StorageAccessDenied(
                f"{path}: access denied ({action}); check the credentials and the bucket/IAM "
                f"policy for s3:GetObject and s3:ListBucket on {bucket!r}"
            )
        endpoint = self._endpoint or "the S3 endpoint"
        first = text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
        return StorageError(f"{path}: {action} failed ({endpoint}): {first}")


def _collect(chunk: Any, root: str, end: str, found: dict[str, list[ObjectInfo]]) -> bool:
    """Add a chunk's log files and ``metadata`` to ``found``; True once past ``offsets/``.

    Per key: one slice looked up among the two log directories (``commits/`` and
    ``offsets/`` have the same length), then the ObjectInfo; ~30% less than partitioning
    every key (a fleet check walks ~200 keys per checkpoint)."""
    start = len(root) + len("commits/")
    logs = {root + "commits/": found["commits"], root + "offsets/": found["offsets"]}
    metadata = root + "metadata"
    for meta in chunk:
        full = meta["path"]
        if full >= end:
            return True
        entries = logs.get(full[:start])
        if entries is not None:
            name = full[start:]
            if not name or "/" in name:
                continue  # the directory marker, nested keys
        elif full == metadata:
            entries, name = found["metadata"], "metadata"
        else:
            continue  # "metadata.crc" and other top-level files
        entries.append(
            ObjectInfo(
                name, int(meta["size"]), meta["last_modified"].timestamp(), etag=meta.get("e_tag")
            )
        )
    return False
