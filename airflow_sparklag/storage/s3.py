"""S3 backend (``s3://``, ``s3a://``, ``s3n://``: same bucket and key): reads through obstore
(``s3_obstore``, Python >= 3.11) or boto3, everything else through boto3; both imported on the
first request (docs/connections.md, "S3")."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_sparklag.errors import (
    BucketNotFound,
    ConditionalWriteUnsupported,
    InvalidParameter,
    SparkLagError,
    StorageAccessDenied,
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
    UnsupportedStorageURL,
    UsageError,
)
from airflow_sparklag.location import S3_SCHEMES, Location, url_parts
from airflow_sparklag.redact import scrub, secret_parts
from airflow_sparklag.storage import (
    BackendOptions,
    Children,
    ObjectInfo,
    RequestCounter,
    Storage,
    seconds_option,
)
from airflow_sparklag.storage.s3_obstore import (
    BOTO3_KEYS,
    CREDENTIAL_TTL,
    ObstoreReader,
    answer_of,
    checkpoint_files,
    header_safe_credentials,
    listed_object,
    settings_from,
)

_ACCESS_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "403",
        "Forbidden",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidToken",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# Every request is bounded: at most DEFAULT_MAX_ATTEMPTS attempts in all (the first one
# included), each at most connect + read timeout: (5 + 15) x 3 = 60 s for a hung endpoint.
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 15.0
DEFAULT_MAX_ATTEMPTS = 3
# Members every ListObjectsV2 answer has; a body without any of them is not S3's.
_LISTING_MEMBERS = ("IsTruncated", "KeyCount", "Name")
# First page of list_checkpoint: Spark's default retention (minBatchesToRetain=100) keeps
# ~101 offsets + ~101 commits files + metadata; the rest is margin for a lagging async purge.
FIRST_PAGE_KEYS = 320
# botocore's default is 10; a check has 128 GETs in flight (judge.WINDOW_READERS)
MAX_POOL_CONNECTIONS = 128
# Who sends a check's reads (list_checkpoint, read): obstore (Rust object_store; see s3_obstore),
# the default wherever it installs (Python >= 3.11, where it comes with boto3), or boto3.
READERS = ("boto3", "obstore")
# S3's answers to a request signed for the wrong region: boto3 follows them to the bucket's own.
_REGION_REDIRECT = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed"})
_THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "ServiceUnavailable"})
# object_store's words for a key it cannot name (an empty, "." or ".." segment: "a//b"), in
# a listing or in the path asked: S3 has such keys, so that request goes through boto3.
_PATHS_OBJECT_STORE_REFUSES = ("Encountered object with invalid path", "Could not parse path")
# How object_store names an answer it could not parse.
_UNREADABLE = "invalid list response"
# What an obstore error names instead of S3's message (its text is Rust's debug output).
_ERROR_MESSAGE = {"AccessDenied": "Access Denied", "NoSuchKey": "no such key"}
# Servers that do not know conditional writes answer one of these to If-None-Match.
_CONDITIONAL_WRITE_UNSUPPORTED = frozenset({"NotImplemented", "501", "InvalidArgument"})


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3a://bucket/a/b`` -> ``("bucket", "a/b")``."""
    bucket, path = url_parts(url)
    if urlsplit(url).scheme.lower() not in S3_SCHEMES or not bucket:
        raise UnsupportedStorageURL(
            f"{url!r} is not an S3 URL; expected s3://bucket/key (also s3a:// or s3n://)"
        )
    return bucket, path.lstrip("/")


def client_config(
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> dict[str, Any]:
    """botocore ``Config`` arguments bounding every S3 request, for our clients and the Airflow
    hook's; ``max_attempts`` is botocore's ``total_max_attempts`` (its own counts retries only).

    >>> client_config(1, 2, 3)["retries"]
    {'total_max_attempts': 3, 'mode': 'standard'}
    """
    connect, read, attempts = _checked_bounds(connect_timeout, read_timeout, max_attempts)
    return {
        "connect_timeout": connect,
        "read_timeout": read,
        "retries": {"total_max_attempts": attempts, "mode": "standard"},
    }


def worst_case_seconds(
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> float:
    """How long one request may take on a hung endpoint: (connect + read timeout) x attempts
    (botocore's back-off adds at most 0.15 s for 3 attempts, except after throttling).

    >>> worst_case_seconds()
    60.0
    """
    connect, read, attempts = _checked_bounds(connect_timeout, read_timeout, max_attempts)
    return (connect + read) * attempts


def _checked_bounds(
    connect_timeout: Any, read_timeout: Any, max_attempts: Any
) -> tuple[float, float, int]:
    connect = seconds_option(connect_timeout, "connect_timeout")
    read = seconds_option(read_timeout, "read_timeout")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidParameter(
            f"must be a whole number of attempts >= 1 (the first one included), got "
            f"{max_attempts!r}",
            "max_attempts",
        )
    return connect, read, max_attempts


def _checked_reader(reader: str | None, client: Any, session: Any) -> str:
    if reader is not None and reader not in READERS:
        raise InvalidParameter(f"must be one of {', '.join(READERS)}, got {reader!r}", "reader")
    if client is not None and session is None:
        # a bare client hands its credentials to nobody: boto3 reads with it
        if reader == "obstore":
            raise InvalidParameter(
                "obstore reads need the boto3 session the client was made from (session=...)",
                "reader",
            )
        return "boto3"
    installed = importlib.util.find_spec("obstore") is not None
    if reader == "obstore" and not installed:
        raise InvalidParameter(
            "obstore is not installed (it installs with boto3 on Python >= 3.11: pip install "
            "'airflow-provider-sparklag[amazon]'); use boto3",
            "reader",
        )
    return reader or ("obstore" if installed else "boto3")  # obstore where it is installed


def _attempts(retries: Mapping[str, Any]) -> int:
    """Attempts in all, the first included, from botocore's ``retries`` setting
    (``max_attempts`` there counts retries only)."""
    if retries.get("total_max_attempts"):
        return int(retries["total_max_attempts"])
    return int(retries.get("max_attempts", DEFAULT_MAX_ATTEMPTS - 1)) + 1


def _directory_prefix(url: str) -> str:
    """The key prefix of the objects under a "directory": ``s3://b/a/`` -> ``a/``, and ``""``
    for the bucket itself."""
    key = split_s3_url(url)[1].rstrip("/")
    return key + "/" if key else ""


class S3Storage:
    """Objects in S3 or an S3-compatible store (MinIO, Ceph, ...), opened with
    :class:`S3Options` (docs/connections.md, "S3"); every request is bounded
    (:func:`worst_case_seconds`).

    Example::

        storage = S3Storage(S3Options(endpoint_url="http://minio:9000", region_name="us-east-1",
                                      aws_access_key_id="...", aws_secret_access_key="..."))
        storage.list_dir("s3a://bucket/checkpoints/orders/offsets")
    """

    def __init__(self, options: S3Options | None = None) -> None:
        options = self.options = options or S3Options()
        # Checked now: a bound that cannot be applied must fail before anything is read.
        self._config = client_config(
            options.connect_timeout, options.read_timeout, options.max_attempts
        )
        self.reader = _checked_reader(options.reader, options.client, options.session)
        self._fast: Any = None  # the obstore reader, once built (False: reads go through boto3)
        self._fast_lock = threading.Lock()
        self._boto3_buckets: set[str] = set()  # buckets in another region (see _fast_call)
        self.requests = RequestCounter()
        self._client = options.client
        self._session = options.session

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            import botocore.session
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError

            # a check reads many checkpoints at once through this one client
            config = Config(**self._config, max_pool_connections=MAX_POOL_CONNECTIONS)
            options = self.options
            try:
                # A session of our own: boto3's default session is shared and not thread-safe.
                session = self._session or boto3.session.Session(
                    botocore_session=botocore.session.get_session(),
                    aws_access_key_id=options.aws_access_key_id,
                    aws_secret_access_key=options.aws_secret_access_key,
                    aws_session_token=options.aws_session_token,
                    region_name=options.region_name,
                )
                self._client = session.client(
                    "s3", config=config, endpoint_url=options.endpoint_url, verify=options.verify
                )
            except (BotoCoreError, ValueError) as exc:  # no request yet: the AWS setup itself
                raise self._setup_error(exc) from None  # the original may quote a credential
            self._session = session
        return self._client

    def _setup_error(self, exc: BaseException) -> SparkLagError:
        """Why no S3 client could be made: a credential provider failed (``credential_process``,
        SSO), or the configuration is not usable (a profile, a file, keys, region, endpoint)."""
        from botocore.exceptions import CredentialRetrievalError, SSOError, TokenRetrievalError

        text = f"{type(exc).__name__}: {self._scrubbed(exc)}"
        if isinstance(exc, (CredentialRetrievalError, SSOError, TokenRetrievalError)):
            return StorageAccessDenied(f"S3: could not get AWS credentials ({text})")
        return UsageError(
            f"S3: the AWS configuration is not usable ({text}); check AWS_PROFILE, "
            "AWS_CONFIG_FILE, the AWS_* keys, the region and the endpoint URL"
        )

    @property
    def boto3_session(self) -> Any:
        """The boto3 session the client was made from (None for a bare client handed in)."""
        _ = self.client
        return self._session

    def prepare(self) -> None:
        """Build the clients now (the session does, under its lock: threads share them)."""
        _ = self.client
        self._obstore()

    def _obstore(self, bucket: str = "") -> ObstoreReader | None:
        """The obstore reader, or None when reads (of ``bucket``) go through boto3."""
        if bucket in self._boto3_buckets:
            return None
        fast = self._fast
        if fast is None:
            with self._fast_lock:
                if self._fast is None:
                    self._fast = self._build_obstore() or False
                fast = self._fast
        return fast or None

    def _build_obstore(self) -> ObstoreReader | None:
        if self.reader != "obstore":
            return None
        from obstore.auth.boto3 import Boto3CredentialProvider

        client = self.client  # the settings every request of this backend is made with
        try:
            provider = Boto3CredentialProvider(self._session, ttl=CREDENTIAL_TTL)
        except ValueError:
            return None  # no credentials anywhere: boto3 reports NoCredentials as usual
        if not header_safe_credentials(provider):
            # object_store panics signing a header value with CR/LF, control or non-ASCII
            # characters; boto3 refuses such a credential with an error naming the request.
            return None
        attempts = _attempts(client.meta.config.retries or self._config["retries"])
        settings = settings_from(client, self.options.verify, attempts)
        return ObstoreReader(provider, settings, self._secrets())

    def list_dir(self, path: str) -> list[ObjectInfo]:
        listed = self._delimited(path)
        return [listed_object(name, item) for name, item in listed if item is not None]

    def list_checkpoint(
        self, location: str, *, first_page: int = FIRST_PAGE_KEYS
    ) -> dict[str, list[ObjectInfo]]:
        """``{"commits": [...], "offsets": [...], "metadata": [...]}`` of a checkpoint in ONE
        ListObjectsV2 from ``<ck>/commits`` on, stopped past ``offsets/``: never paging through
        ``state/`` (docs/architecture.md). The first page asks for ``first_page`` keys
        (1..1000): botocore parses every key of a page, so a caller that knows the size asks
        for less."""
        bucket = split_s3_url(location)[0]
        root = _directory_prefix(location)
        answer = self._fast_call(
            location, "list", bucket, lambda fast: fast.list_checkpoint(bucket, root)
        )
        if answer is not None:  # pages of 1,000 keys, parsed in Rust: first_page does not apply
            listed, pages = answer
            self.requests.add("list", pages)
            if any(listed.values()):
                return listed
            # Nothing listed: object_store reads any XML (an XHTML page, another service's
            # answer) as an empty listing, which would pass for "no batch yet". boto3 asks
            # again and checks the answer is S3's (one request more, only when empty).
        first = {"StartAfter": root + "commits", "MaxKeys": max(1, min(1000, first_page))}
        listed_keys = (
            (item["Key"], item)
            for response in self._pages(location, first)
            for item in response.get("Contents", [])
        )
        return checkpoint_files(listed_keys, root, BOTO3_KEYS)[0]

    def read(self, path: str) -> bytes:
        bucket, key = split_s3_url(path)
        self.requests.add("read")
        data = self._fast_point(path, "read", ObstoreReader.read)
        if data is not None:
            return bytes(data)
        response = self.call(path, "read", self.client.get_object, Bucket=bucket, Key=key)
        body = response["Body"]
        try:
            return bytes(body.read())
        except Exception as exc:  # a reset connection while streaming the body
            raise StorageError(f"{path}: reading the object body failed: {exc}") from exc
        finally:
            body.close()

    def exists(self, path: str) -> bool:
        self.requests.add("exists")
        return self._head(path, "exists")

    def is_file(self, path: str) -> bool:
        self.requests.add("stat")
        found = self._fast_point(path, "stat", ObstoreReader.has_object)
        return self._head(path, "stat") if found is None else bool(found)

    def _fast_point(
        self, path: str, action: str, method: Callable[[ObstoreReader, str, str], Any]
    ) -> Any:
        """obstore's ``method(reader, bucket, key)`` of the object at ``path``, None when it
        goes through boto3: also for a key ending in "/" (object_store's paths drop it, so a
        directory marker "ck/", which s3a writes, would be asked as "ck")."""
        bucket, key = split_s3_url(path)
        if key.endswith("/"):
            return None
        return self._fast_call(path, action, bucket, lambda fast: method(fast, bucket, key))

    def _head(self, path: str, action: str) -> bool:
        bucket, key = split_s3_url(path)
        try:
            self.call(path, action, self.client.head_object, Bucket=bucket, Key=key)
        except BucketNotFound:
            raise
        except StorageNotFound:
            return False
        return True

    def write_atomic(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        # A single PUT is atomic on S3: readers see the old object or the new one.
        bucket, key = split_s3_url(path)

        def put(**condition: str) -> None:
            self.requests.add("write")
            put_object = self.client.put_object
            self.call(path, "write", put_object, Bucket=bucket, Key=key, Body=data, **condition)

        if overwrite:
            put()
            return
        # Check first (some S3-compatible servers ignore If-None-Match), then let the server
        # enforce it with IfNoneMatch="*" to close the race where the server supports it.
        if self.exists(path):
            raise StorageAlreadyExists(f"{path}: already exists; pass overwrite=True to replace it")
        try:
            put(IfNoneMatch="*")
        except ConditionalWriteUnsupported:
            put()

    def list_children(self, path: str) -> Children:
        prefix = _directory_prefix(path)
        bucket = split_s3_url(path)[0]
        answer = self._fast_call(
            path, "list", bucket, lambda fast: fast.list_children(bucket, prefix)
        )
        if answer is not None:  # fleet discovery: one listing per directory visited
            files, directories, pages = answer
            self.requests.add("list", pages)
            return Children(frozenset(files), frozenset(directories))
        return Children.of((name, item is None) for name, item in self._delimited(path))

    def walk(self, root: str) -> dict[str, int]:
        found: dict[str, int] = {}
        prefix = _directory_prefix(root)
        for response in self._pages(root):
            for item in response.get("Contents", []):
                # "<root>/" itself (an s3a directory marker) is the relative path "".
                found[item["Key"][len(prefix) :]] = int(item.get("Size", 0))
        return found

    def delete(self, path: str) -> None:
        bucket, key = split_s3_url(path)
        self.requests.add("delete")
        self.call(path, "delete", self.client.delete_object, Bucket=bucket, Key=key)

    def remove_empty_directories(self, root: str) -> None:
        """S3 has no directories: once the objects are deleted nothing is left."""

    def rename(self, src: str, dst: str) -> bool:
        return False  # S3 has no rename: the caller copies, verifies and deletes

    def copy_from(self, source: Storage, src: str, dst: str) -> None:
        if source is not self:
            self.write_atomic(dst, source.read(src), overwrite=True)
            return
        src_bucket, src_key = split_s3_url(src)
        dst_bucket, dst_key = split_s3_url(dst)
        self.requests.add("copy")
        self.call(
            dst,
            "copy",
            self.client.copy_object,
            Bucket=dst_bucket,
            Key=dst_key,
            CopySource={"Bucket": src_bucket, "Key": src_key},
        )

    def _pages(
        self, path: str, first: Mapping[str, Any] | None = None, **options: Any
    ) -> Iterator[dict[str, Any]]:
        """ListObjectsV2 pages of the keys under ``<path>/`` (one request each), ``first``'s
        options on the first request only."""
        bucket, _key = split_s3_url(path)
        asked = {"Bucket": bucket, "Prefix": _directory_prefix(path), **options}
        kwargs = {**asked, **(first or {})}
        while True:
            self.requests.add("list")
            response = self.call(path, "list", self.client.list_objects_v2, **kwargs)
            yield response
            token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
            if not token:
                return
            kwargs = {**asked, "ContinuationToken": token}

    def _delimited(self, path: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """The direct children of ``path`` (Delimiter="/": a checkpoint's state/ can hold 100k
        objects and must never be walked): ``(name, its listing entry)`` of each file (not a
        directory marker), ``(name, None)`` of each subdirectory."""
        prefix = _directory_prefix(path)
        for response in self._pages(path, Delimiter="/"):
            for item in response.get("Contents", []):
                name = item["Key"][len(prefix) :]
                if name and "/" not in name:
                    yield name, item
            for common in response.get("CommonPrefixes", []):
                name = common["Prefix"][len(prefix) :].rstrip("/")
                if name:
                    yield name, None

    def call(self, path: str, action: str, method: Any, **kwargs: Any) -> Any:
        """Run one boto3 call and turn its errors into the package's typed errors."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
        from botocore.parsers import ResponseParserError

        endpoint = self._endpoint
        try:
            response = method(**kwargs)
        except ClientError as exc:
            answer, error = exc.response, exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            if action in ("list", "read") and code.isdigit() and _has_body(answer):
                seen = f"{_answered(answer)}: not S3's XML, or cut short"
                raise _not_s3(path, action, endpoint, seen) from exc
            status = str(answer.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            message = error.get("Message") or code or status
            bucket = kwargs.get("Bucket", "")
            conditional = "IfNoneMatch" in kwargs
            raise s3_error(code, status, message, path, action, bucket, conditional) from exc
        except (ResponseParserError, ValueError, TypeError, KeyError) as exc:
            # An answer botocore could not read: a listing with a LastModified or Size that is
            # not one, XML cut short, a body of another API.
            seen = f"{type(exc).__name__}: {self._scrubbed(exc)[:200]}"
            raise _not_s3(
                path, action, endpoint, seen, unreadable=True
            ) from None  # the original may quote a credential (a refused header value)
        except NoCredentialsError as exc:
            raise StorageAccessDenied(
                f"{path}: no AWS credentials found ({action}); give them in the aws connection, or "
                "in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or an AWS profile (the default "
                "credential chain)"
            ) from exc
        except (BotoCoreError, RecursionError) as exc:  # refused, timeouts, a bad endpoint
            # urllib3 may catch the redirect loop (_redirect_loop) and say so itself
            if isinstance(exc, RecursionError) or "maximum recursion depth" in str(exc):
                raise _redirect_loop(path, action, endpoint, kwargs.get("Bucket")) from None
            raise StorageError(
                f"{path}: {action} failed, could not talk to {endpoint}: {self._scrubbed(exc)}"
            ) from None  # the original may quote a credential
        if action == "list" and not any(member in response for member in _LISTING_MEMBERS):
            # botocore reads any well-formed XML (an XHTML page) as an empty listing, which
            # would pass for "no batch committed yet".
            seen = f"{_answered(response)}, no ListObjectsV2 result"
            raise _not_s3(path, action, endpoint, seen)
        return response

    def _fast_call(
        self, path: str, action: str, bucket: str, method: Callable[[ObstoreReader], Any]
    ) -> Any:
        """``method(reader)``, one obstore read of ``bucket``, its errors typed as boto3's are.
        None when the read must go through boto3: no obstore reader, a key object_store
        refuses, or a redirect to the bucket's own region (object_store follows none, so that
        bucket's reads go through boto3 from then on)."""
        fast = self._obstore(bucket)
        if fast is None:
            return None
        try:
            return method(fast)
        except Exception as exc:
            code, status = answer_of(exc)
            described = fast.describe(exc)
        except BaseException as exc:  # a Rust panic (pyo3's PanicException): never a crash
            if type(exc).__name__ != "PanicException":
                raise
            raise StorageError(
                f"{path}: {action} failed inside obstore (object_store panicked: "
                f"{scrub(str(exc), self._secrets())[:200]}); s3_options={{'reader': 'boto3'}} "
                "reads through boto3"
            ) from None
        if code in _REGION_REDIRECT:
            self._boto3_buckets.add(bucket)
            return None
        if any(words in described for words in _PATHS_OBJECT_STORE_REFUSES):
            return None  # a key such as "logs//x" (S3 takes any): boto3 lists it as it is
        if code:
            message = _ERROR_MESSAGE.get(code, code)
            raise s3_error(code, status, message, path, action, bucket) from None
        if status:  # an error answer without S3's XML: a web page, a proxy
            raise _not_s3(path, action, self._endpoint, f"HTTP {status}, not S3's XML error")
        if _UNREADABLE in described:  # a 200 answer object_store could not parse
            raise _not_s3(path, action, self._endpoint, described, unreadable=True)
        raise StorageError(
            f"{path}: {action} failed, could not talk to {self._endpoint}: {described}"
        )  # not chained: the original may quote a credential

    @property
    def _endpoint(self) -> str:  # as error messages name it
        return self.options.endpoint_url or "the S3 endpoint"

    def _secrets(self) -> list[str]:
        options = self.options
        secrets = (options.aws_secret_access_key, options.aws_session_token)
        return [part for secret in secrets if secret for part in secret_parts(str(secret))]

    def _scrubbed(self, exc: BaseException) -> str:
        """``exc``'s text without credentials (botocore may quote a header, token included)."""
        return scrub(str(exc), self._secrets())


def _answered(response: Mapping[str, Any]) -> str:
    """What came back, as an error about an answer that is not S3's names it."""
    metadata = response.get("ResponseMetadata", {})
    content_type = metadata.get("HTTPHeaders", {}).get("content-type") or "none"
    return f"HTTP {metadata.get('HTTPStatusCode', '?')}, Content-Type {content_type}"


def _has_body(response: Mapping[str, Any]) -> bool:
    """Did an error answer come with a body? S3's errors are XML naming a code (``NoSuchKey``);
    botocore gives a bare status code instead when the body held none, and turns an unreadable
    200 (an HTML page, XML cut short) into a bare "500": a bare code with a body is not S3's.
    Only asked of answers we read: HEAD has no body, and writes are judged by their status (a
    501 to If-None-Match may come with any page)."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return str(headers.get("content-length", "0")) != "0" or "html" in str(
        headers.get("content-type", "")
    )


def _not_s3(
    path: str, action: str, endpoint: str, seen: str, *, unreadable: bool = False
) -> StorageError:
    """The error of an answer that is not S3's (``seen``: what came back), or with
    ``unreadable`` of one that could not be read at all (``seen``: why)."""
    if unreadable:
        seen, then = f"the answer could not be read: {seen}", " and any proxy in between"
    else:
        then = ": a web page, a login portal or a proxy answered"
    return StorageError(
        f"{path}: {action} failed: {endpoint} did not answer like S3 ({seen}); check the S3 "
        f"endpoint (--s3-endpoint-url, the connection's endpoint_url){then}"
    )


def _redirect_loop(path: str, action: str, endpoint: str, bucket: Any) -> StorageError:
    """botocore asks HeadBucket for the region of a 301 that names none, and follows the
    HeadBucket's own 301 the same way, until Python's recursion limit."""
    return StorageError(
        f"{path}: {action} failed: {endpoint} answered a redirect (HTTP 301) naming no region, "
        f"to every request; if bucket {bucket!r} is in another region give it (--s3-region, "
        "region_name in s3_options, the aws connection's region_name), else check the endpoint "
        "(--s3-endpoint-url, endpoint_url)"
    )


def s3_error(
    code: str,
    status: str,
    message: str,
    path: str,
    action: str,
    bucket: str,
    conditional: bool = False,
) -> StorageError:
    """The typed error of an S3 error answer, by its code (``NoSuchKey``) and HTTP status:
    the one mapping of both readers."""
    if code == "NoSuchBucket":
        return BucketNotFound(
            f"{path}: bucket {bucket!r} does not exist; check the bucket name and the endpoint"
        )
    if code in ("PreconditionFailed", "412") or status == "412":
        return StorageAlreadyExists(f"{path}: already exists; pass overwrite=True to replace it")
    if conditional and (code in _CONDITIONAL_WRITE_UNSUPPORTED or status == "501"):
        return ConditionalWriteUnsupported(f"{path}: server does not support If-None-Match")
    if code in _ACCESS_DENIED_CODES or status == "403":
        hint = ""
        if action == "exists":
            # S3 answers 403 rather than 404 for a missing key without s3:ListBucket.
            hint = " (S3 also answers 403 for a missing key when s3:ListBucket is not granted)"
        return StorageAccessDenied(
            f"{path}: access denied ({action}): {message}{hint}; check the credentials and "
            f"the bucket/IAM policy for s3:GetObject and s3:ListBucket on {bucket!r}"
        )
    if code in _NOT_FOUND_CODES or status == "404":
        return StorageNotFound(f"{path}: no such object ({action})")
    hint = ""
    if code in _REGION_REDIRECT or status == "301":
        hint = (
            f"; bucket {bucket!r} is in another region than the client's: give its region "
            "(--s3-region, region_name in s3_options, the aws connection's region_name)"
        )
    elif code in _THROTTLED or status == "503":
        hint = "; S3 throttled or was unavailable through every attempt: check again later"
    return StorageError(f"{path}: {action} failed: {code or status}: {message}{hint}")


@dataclass(frozen=True, repr=False)
class S3Options(BackendOptions):
    """What :class:`S3Storage` is opened with, for every bucket: credentials, region and
    endpoint (else boto3's chain), or a ready boto3 ``client`` with the ``session`` it was
    made from (without it reads go through boto3), bounds, ``reader`` (docs/connections.md).
    Never printed."""

    client: Any = None
    session: Any = None
    endpoint_url: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    region_name: str | None = None
    verify: bool | str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    reader: str | None = None

    def open(self, location: Location) -> Storage:
        return S3Storage(self)
