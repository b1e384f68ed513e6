"""HDFS backend over the WebHDFS REST API (``hdfs://`` and ``webhdfs://`` URLs).

Uses ``requests`` directly (imported on first use) so that there is no JVM or libhdfs to install;
every call has a timeout. Simple authentication only (``user.name``); Kerberos/SPNEGO is not
supported.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any
from urllib.parse import urlsplit

from airflow_sparklag.errors import (
    StorageAccessDenied,
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
    UnsupportedStorageURL,
)
from airflow_sparklag.storage import (
    HDFS_SCHEMES,
    Children,
    ObjectInfo,
    RequestCounter,
    Storage,
    seconds_option,
)

DEFAULT_HTTP_PORT = 9870  # dfs.namenode.http-address since Hadoop 3
# Exceptions a NameNode returns when another NameNode should be asked instead.
_TRY_NEXT_NAMENODE = frozenset({"StandbyException", "RetriableException", "ObserverRetryOnActive"})
_NOT_FOUND = frozenset({"FileNotFoundException"})
_ACCESS_DENIED = frozenset({"AccessControlException", "SecurityException"})
_ALREADY_EXISTS = frozenset({"FileAlreadyExistsException"})


def hdfs_path(url: str) -> str:
    """``hdfs://nn:8020/a/b`` -> ``/a/b``; a bare ``/a/b`` is returned as is."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.scheme.lower() not in HDFS_SCHEMES:
        raise UnsupportedStorageURL(f"{url!r} is not an hdfs:// or webhdfs:// URL")
    return parts.path or "/"


def namenode_url_for(location: str) -> str:
    """The WebHDFS HTTP URL implied by a checkpoint URL.

    ``webhdfs://host:port`` already names the HTTP port; ``hdfs://host:port`` names the RPC
    port, so the HTTP URL is ``http://host:9870``.
    """
    parts = urlsplit(location)
    if not parts.hostname:
        raise UnsupportedStorageURL(
            f"{location!r} has no NameNode host; name one (hdfs://namenode:8020/...) or give "
            "the WebHDFS URL: --webhdfs-url http://namenode:9870 (repeat it for HA NameNodes), "
            "a webhdfs connection, or webhdfs_options={'url': ...}"
        )
    if parts.scheme.lower() == "webhdfs":
        return f"http://{parts.hostname}:{parts.port or DEFAULT_HTTP_PORT}"
    return f"http://{parts.hostname}:{DEFAULT_HTTP_PORT}"


class _TryNextNameNode(Exception):
    """This NameNode is down or standby."""


class WebHDFSStorage:
    """Files in HDFS through WebHDFS, with NameNode HA fail-over.

    Example::

        storage = WebHDFSStorage(["http://nn1:9870", "http://nn2:9870"], user="spark")
        storage.list_dir("hdfs://cluster/checkpoints/orders/offsets")

    With several NameNode URLs, a connection error or a ``StandbyException`` moves on to the
    next one; the NameNode that answered is tried first next time.
    """

    def __init__(
        self,
        namenode_urls: str | list[str],
        *,
        user: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
    ) -> None:
        urls = [namenode_urls] if isinstance(namenode_urls, str) else list(namenode_urls)
        if not urls:
            raise UnsupportedStorageURL("WebHDFS needs at least one NameNode URL")
        self.namenode_urls = [url.rstrip("/") for url in urls]
        self.user = user
        self.timeout = (
            seconds_option(connect_timeout, "connect_timeout"),
            seconds_option(read_timeout, "read_timeout"),
        )
        self.requests = RequestCounter()
        self._active = 0
        self._session: Any = None

    @classmethod
    def for_url(
        cls,
        location: str,
        /,
        *,
        url: str | list[str] | None = None,
        user: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
    ) -> WebHDFSStorage:
        """Backend for a checkpoint URL; ``url`` (NameNode HTTP URL or list) overrides the host."""
        return cls(
            url if url else namenode_url_for(location),
            user=user,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    # -- Storage interface -------------------------------------------------------------------

    def list_dir(self, path: str) -> list[ObjectInfo]:
        statuses = self._list_status(path)
        return [
            ObjectInfo(
                name=status["pathSuffix"],
                size=int(status.get("length", 0)),
                modified=int(status.get("modificationTime", 0)) / 1000.0,
            )
            for status in statuses
            if status.get("type") == "FILE" and status.get("pathSuffix")
        ]

    def read(self, path: str) -> bytes:
        self.requests.add("read")
        # OPEN answers with a redirect to a DataNode; follow it ourselves so that a DataNode
        # failure is reported as such and not mistaken for a dead NameNode.
        response = self.namenode("GET", path, "OPEN", allow_redirects=False)
        location = _redirect_target(response, path, "OPEN")
        if location is None:
            return bytes(response.content)
        data_response = self._datanode("GET", location, path, "read")
        return bytes(data_response.content)

    def exists(self, path: str) -> bool:
        self.requests.add("exists")
        try:
            self.namenode("GET", path, "GETFILESTATUS")
        except StorageNotFound:
            return False
        return True

    def write_atomic(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        self.requests.add("write")
        target = hdfs_path(path)
        directory, _, name = target.rpartition("/")
        temp = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
        response = self.namenode(
            "PUT", temp, "CREATE", {"overwrite": "false"}, allow_redirects=False
        )
        location = _redirect_target(response, path, "CREATE")
        if location is not None:
            self._datanode("PUT", location, path, "write", data=data)
        try:
            # rename2 (any renameoptions value) is atomic and, without OVERWRITE, fails with
            # FileAlreadyExistsException instead of returning false like plain RENAME.
            self.namenode(
                "PUT",
                temp,
                "RENAME",
                {"destination": target, "renameoptions": "OVERWRITE" if overwrite else "NONE"},
            )
        except StorageAlreadyExists:
            self._delete_quietly(temp)
            raise StorageAlreadyExists(
                f"{path}: already exists; pass overwrite=True to replace it"
            ) from None
        except StorageError:
            self._delete_quietly(temp)
            raise

    def list_children(self, path: str) -> Children:
        files: set[str] = set()
        directories: set[str] = set()
        for status in self._list_status(path):
            name = status.get("pathSuffix")
            if name:  # a file lists itself with an empty suffix: no children
                (directories if status.get("type") == "DIRECTORY" else files).add(name)
        return Children(frozenset(files), frozenset(directories))

    def walk(self, root: str) -> dict[str, int]:
        return self._walk(root, "")

    def _walk(self, root: str, relative: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for status in self._list_status(f"{root.rstrip('/')}/{relative}"):
            name = status.get("pathSuffix")
            if not name:  # LISTSTATUS of a file lists the file itself with an empty suffix
                found[relative] = int(status.get("length", 0))
                continue
            child = f"{relative}/{name}" if relative else name
            if status.get("type") == "DIRECTORY":
                found.update(self._walk(root, child))
            else:
                found[child] = int(status.get("length", 0))
        return found

    def delete(self, path: str) -> None:
        self.requests.add("delete")
        with contextlib.suppress(StorageNotFound):
            self.namenode("DELETE", path, "DELETE", {"recursive": "false"})

    def remove_empty_directories(self, root: str) -> None:
        if self.walk(root):
            raise StorageError(f"{root}: still holds files; not removing it")
        self.requests.add("delete")
        with contextlib.suppress(StorageNotFound):
            self.namenode("DELETE", root, "DELETE", {"recursive": "true"})

    def rename(self, src: str, dst: str) -> bool:
        # Plain RENAME moves src INTO dst when dst is a directory: refuse an existing dst.
        if self.exists(dst):
            raise StorageAlreadyExists(f"{dst}: already exists; not renaming over it")
        target = hdfs_path(dst)
        self.requests.add("rename", 2)
        self.namenode("PUT", target.rsplit("/", 1)[0] or "/", "MKDIRS")
        response = self.namenode("PUT", src, "RENAME", {"destination": target})
        if not _json(response, src, "RENAME").get("boolean"):
            raise StorageError(f"{src}: HDFS refused to rename it to {dst}")
        return True

    def copy_from(self, source: Storage, src: str, dst: str) -> None:
        # WebHDFS has no server-side copy.
        self.write_atomic(dst, source.read(src), overwrite=True)

    def _list_status(self, path: str) -> list[dict[str, Any]]:
        """One LISTSTATUS: the FileStatus entries, ``[]`` when ``path`` is missing."""
        self.requests.add("list")
        try:
            response = self.namenode("GET", path, "LISTSTATUS")
        except StorageNotFound:
            return []
        return _file_statuses(_json(response, path, "LISTSTATUS"), path)

    # -- HTTP plumbing -----------------------------------------------------------------------

    @property
    def session(self) -> Any:
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    def namenode(
        self,
        method: str,
        path: str,
        op: str,
        params: dict[str, str] | None = None,
        *,
        allow_redirects: bool = True,
    ) -> Any:
        """Send one operation to the active NameNode, failing over to the others.

        Public for operations beyond the Storage interface, so that they share the HA
        fail-over and error mapping.
        """
        query = {"op": op, **(params or {})}
        if self.user:
            query["user.name"] = self.user
        hdfs_file = hdfs_path(path)
        failures: list[str] = []
        count = len(self.namenode_urls)
        for attempt in range(count):
            index = (self._active + attempt) % count
            base = self.namenode_urls[index]
            try:
                url = f"{base}/webhdfs/v1{hdfs_file}"
                response = self._send(method, url, query, allow_redirects, path=path, op=op)
                _raise_for_status(response, path, op)
            except _TryNextNameNode as exc:
                failures.append(f"{base}: {exc}")
                continue
            self._active = index
            return response
        raise StorageError(
            f"{path}: {op} failed on every NameNode ({'; '.join(failures)}); check that HDFS "
            "is up and webhdfs_options['url'] lists the NameNodes' HTTP addresses"
        )

    def _datanode(self, method: str, url: str, path: str, action: str, data: bytes = b"") -> Any:
        try:
            response = self._send(
                method,
                url,
                None,
                True,
                data=data if method == "PUT" else None,
                path=path,
                op=action,
            )
        except _TryNextNameNode as exc:
            raise StorageError(f"{path}: {action} failed at DataNode {url}: {exc}") from exc
        try:
            _raise_for_status(response, path, action)
        except _TryNextNameNode as exc:
            raise StorageError(f"{path}: {action} failed at DataNode {url}: {exc}") from exc
        return response

    def _send(
        self,
        method: str,
        url: str,
        params: dict[str, str] | None,
        allow_redirects: bool,
        data: bytes | None = None,
        *,
        path: str,
        op: str,
    ) -> Any:
        import requests

        headers = {"Content-Type": "application/octet-stream"} if data is not None else None
        try:
            return self.session.request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                timeout=self.timeout,
                allow_redirects=allow_redirects,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise _TryNextNameNode(f"{type(exc).__name__}: {exc}") from exc
        except requests.RequestException as exc:
            server = "{0.scheme}://{0.netloc}".format(urlsplit(url))
            problem = (
                "the answer was cut short"
                if isinstance(exc, requests.exceptions.ChunkedEncodingError)
                else "the request failed"
            )
            raise StorageError(f"{path}: {op} failed at {server}: {problem} ({exc})") from exc

    def _delete_quietly(self, path: str) -> None:
        # A leftover dot-file temp is ignored by every reader, so a failed cleanup is harmless.
        with contextlib.suppress(StorageError):
            self.namenode("DELETE", path, "DELETE")


def _json(response: Any, path: str, op: str) -> dict[str, Any]:
    """A NameNode's JSON answer; a truncated or non-JSON body (a proxy's HTML page) is a
    StorageError naming the path and operation."""
    try:
        document = response.json()
    except ValueError as exc:  # JSONDecodeError, and requests' own subclass of it
        snippet = response.text[:80].strip() if isinstance(response.text, str) else ""
        raise StorageError(
            f"{path}: {op} answered HTTP {response.status_code} with a body that is not JSON "
            f"({snippet!r}); check that webhdfs_options['url'] points at the NameNode's HTTP "
            "address and no proxy rewrites the answer"
        ) from exc
    if not isinstance(document, dict):
        raise StorageError(f"{path}: {op} answered with unexpected JSON: {str(document)[:80]}")
    return document


def _file_statuses(document: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """LISTSTATUS's FileStatus entries, each checked: a damaged answer is a StorageError naming
    the path, never a KeyError deep inside a listing."""
    wrapper = document.get("FileStatuses")
    statuses = wrapper.get("FileStatus") if isinstance(wrapper, dict) else None
    if not isinstance(statuses, list):
        raise StorageError(
            f"{path}: LISTSTATUS answered without a FileStatuses.FileStatus list "
            f"({str(document)[:80]}); check that webhdfs_options['url'] is a NameNode"
        )
    for status in statuses:
        if not (
            isinstance(status, dict)
            and isinstance(status.get("pathSuffix"), str)
            and status.get("type") in ("FILE", "DIRECTORY", "SYMLINK")
            and _is_count(status.get("length", 0))
            and _is_count(status.get("modificationTime", 0))
        ):
            raise StorageError(
                f"{path}: LISTSTATUS answered with a FileStatus entry that is not one "
                f"({str(status)[:120]})"
            )
    return statuses


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _redirect_target(response: Any, path: str, op: str) -> str | None:
    if response.status_code in (301, 302, 303, 307, 308):
        location = response.headers.get("Location")
        if not location:
            raise StorageError(
                f"{path}: {op} answered HTTP {response.status_code} without a Location to "
                "follow; check that webhdfs_options['url'] is a NameNode"
            )
        return str(location)
    if response.status_code == 200 and "json" in response.headers.get("Content-Type", ""):
        location = _json(response, path, op).get("Location")  # the noredirect=true form
        return str(location) if location else None
    return None


def _raise_for_status(response: Any, path: str, op: str) -> None:
    """Map WebHDFS's RemoteException JSON to typed errors."""
    if response.status_code < 400:
        return
    try:
        remote = response.json().get("RemoteException", {})
    except (ValueError, AttributeError):  # not JSON, or JSON that is not an object
        remote = {}
    if not isinstance(remote, dict):
        remote = {}
    exception = str(remote.get("exception", ""))
    message = str(remote.get("message", "")).splitlines()[0] if remote.get("message") else ""
    detail = f"{exception}: {message}" if exception else f"HTTP {response.status_code}"
    if exception in _TRY_NEXT_NAMENODE:
        raise _TryNextNameNode(detail)
    # Match the Java exception first: HDFS answers 403 for FileAlreadyExistsException too.
    if exception in _ALREADY_EXISTS:
        raise StorageAlreadyExists(f"{path}: already exists ({op})")
    if exception in _NOT_FOUND or response.status_code == 404:
        raise StorageNotFound(f"{path}: no such file ({op}: {detail})")
    if exception in _ACCESS_DENIED or response.status_code in (401, 403):
        raise StorageAccessDenied(
            f"{path}: access denied ({op}: {detail}); check webhdfs_options['user'] and the "
            "HDFS permissions of the checkpoint directory"
        )
    raise StorageError(f"{path}: {op} failed: {detail}")
