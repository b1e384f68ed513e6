"""HDFS backend over WebHDFS (``hdfs://`` and ``webhdfs://`` URLs) through HdfsCLI, which sends
every request, follows DataNode redirects and fails over between NameNodes; imported on first
use. What is still done here, and the test that shows why: docs/connections.md ("HDFS")."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from airflow_sparklag.errors import (
    DelegationTokenRejected,
    InvalidParameter,
    StorageAccessDenied,
    StorageAlreadyExists,
    StorageError,
    StorageNotFound,
    TokenFileInvalid,
    UnsupportedStorageURL,
    UsageError,
)
from airflow_sparklag.location import HDFS_SCHEMES, Location, url_parts
from airflow_sparklag.storage import (
    BackendOptions,
    Children,
    ObjectInfo,
    RequestCounter,
    Storage,
    seconds_option,
)
from airflow_sparklag.storage.hadoop_conf import NAMENODES_HINT, HadoopConf
from airflow_sparklag.storage.hadoop_tokens import Bytes, Token, pick_hdfs_token, read_token_file

_RENEW_BEFORE = 30  # seconds of ticket life left below which a keytab login is renewed
# What HdfsCLI fails over on: raised once every NameNode answered it.
_STANDBY = frozenset({"StandbyException", "RetriableException"})
_NOT_FOUND = frozenset({"FileNotFoundException"})
_ACCESS_DENIED = frozenset({"AccessControlException", "SecurityException"})
_ALREADY_EXISTS = frozenset({"FileAlreadyExistsException"})


def hdfs_path(url: str) -> str:
    """``hdfs://nn:8020/a/b`` -> ``/a/b``; a bare ``/a/b`` is returned as is."""
    if "://" not in url:
        return url
    if urlsplit(url).scheme.lower() not in HDFS_SCHEMES:
        raise UnsupportedStorageURL(f"{url!r} is not an hdfs:// or webhdfs:// URL")
    return url_parts(url)[1] or "/"


class Kerberos:
    """SPNEGO for WebHDFS (requests-gssapi) from a principal + keytab (a private in-memory
    ticket cache, logged in again before the ticket runs out), else from the ticket cache
    ``kinit`` left (docs/hdfs.md, "Credentials"). The service name is ``HTTP@<host of the
    URL>``: name NameNodes as their principals do. ``reason`` says why Kerberos is used when
    nobody asked for it: the Hadoop configuration, or :data:`CHALLENGED`.
    """

    def __init__(
        self, principal: str | None = None, keytab: str | None = None, *, reason: str = ""
    ) -> None:
        if bool(principal) != bool(keytab):
            raise InvalidParameter(
                "give both a Kerberos principal and its keytab, or neither (then the ticket "
                "cache that kinit left is used)",
                "webhdfs_options.principal" if keytab else "webhdfs_options.keytab",
            )
        self.principal = principal
        self.keytab = keytab
        self.reason = reason

    def auth(self) -> Any:
        """The requests auth handler; a keytab that cannot log in fails here, naming why."""
        from requests_gssapi import OPTIONAL

        return _per_thread_spnego()(
            self._keytab_login if self.keytab else None,  # else the ambient cache, at each login
            mutual_authentication=OPTIONAL,
            opportunistic_auth=self.reason != CHALLENGED,  # told: a token with the first request
        )

    def _keytab_login(self) -> Any:
        """Credentials from the keytab, in a private in-memory cache (never KRB5CCNAME's)."""
        import gssapi

        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
        store: dict[bytes | str, bytes | str] = {
            "client_keytab": str(self.keytab),
            "ccache": f"MEMORY:sparklag-{uuid.uuid4().hex}",
        }
        try:
            creds = gssapi.Credentials(name=name, usage="initiate", store=store)
            creds.inquire()  # logs in now: a wrong keytab is named here, not as a 401
        except gssapi.exceptions.GSSError as exc:
            raise StorageAccessDenied(
                f"Kerberos login of {self.principal} with keytab {self.keytab} failed: "
                f"{_gss_reason(exc)}. Check that the keytab holds this principal's current "
                "key (klist -kt) and that the KDC in krb5.conf is the realm's"
            ) from None
        return creds

    def problem(self) -> str:
        """Why a 401 happened, as far as the client can tell (after why Kerberos was used)."""
        why = f"{self.reason}: " if self.reason else ""
        if self.keytab:
            return why + (
                f"the NameNode refused the ticket of {self.principal} (keytab {self.keytab}): "
                "a keytab or ticket from another KDC or realm, or a clock skew over 5 minutes"
            )
        import gssapi

        cache = os.environ.get("KRB5CCNAME", "the default ticket cache")
        try:
            creds = gssapi.Credentials(usage="initiate")
            who, lifetime = str(creds.name), creds.lifetime
        except gssapi.exceptions.ExpiredCredentialsError:
            of = cache_principal(os.environ.get("KRB5CCNAME", ""))
            of = f" of {of}" if of else ""
            return f"{why}the Kerberos ticket{of} in {cache} has expired: {RENEW_TICKET}"
        except gssapi.exceptions.GSSError as exc:
            return f"{why}no Kerberos ticket in {cache} ({_gss_reason(exc)}): {RENEW_TICKET}"
        return why + (
            f"the NameNode refused the ticket of {who} (valid {lifetime} s more): a ticket "
            "from another KDC or realm, or a clock skew over 5 minutes"
        )


# Under Airflow's `[core] security = kerberos` the `airflow kerberos` service keeps the cache.
RENEW_TICKET = (
    "run kinit (or start `airflow kerberos`, which keeps Airflow's ticket cache), or give a "
    "principal and keytab"
)
CHALLENGED = "the NameNode asks for Kerberos (SPNEGO)"


def cache_principal(cache: str) -> str:
    """The principal a FILE ticket cache is for (its header: MIT's file format, versions 2-4),
    ``""`` for any other cache or an unreadable one. GSSAPI names no principal once its
    ticket has expired; the message should."""
    path = cache[5:] if cache.startswith("FILE:") else cache
    if not path or ":" in path:
        return ""
    with contextlib.suppress(OSError, ValueError), open(path, "rb") as file:
        head = Bytes(file.read(4096), lambda at, what: ValueError(at))
        version = head.number(2)
        if version not in (0x0502, 0x0503, 0x0504):
            return ""
        if version == 0x0504:
            head.sized(2)  # the header's tags
        head.number(4)  # the name type
        count = head.number(4)
        realm, *names = (head.sized(4).decode() for _ in range(count + 1))
        return f"{'/'.join(names)}@{realm}" if names else ""
    return ""


def _no_kerberos(user: str | None, may_infer: bool) -> str:
    """A 401 when no Kerberos was set up: a user name given (simple authentication), Kerberos
    turned off, or no requests-gssapi to answer with."""
    if not (user or may_infer):
        return f"{CHALLENGED}, which webhdfs_options['kerberos']=False turned off"
    if user:
        return (
            f"{CHALLENGED}, but user {user!r} was given (simple authentication: "
            "webhdfs_options['user']), which comes first: "
            "leave it out to log in from the ticket cache kinit left, or give a principal and "
            "keytab"
        )
    return (
        f"{CHALLENGED}, which needs requests-gssapi: pip install "
        "'airflow-provider-sparklag[kerberos]'; the ticket cache kinit left is then used"
    )


def _per_thread_spnego() -> type:
    """requests-gssapi's auth with its per-request state (each host's security context, the
    body position to rewind) kept per thread. One session serves a fleet scan's threads: with
    one shared context, concurrent SPNEGO logins step each other's contexts and fail
    (``MutualAuthenticationError`` on an HTTP 200). Given a keytab ``login``, it logs in again
    when the ticket is (nearly) expired."""
    import gssapi
    from requests_gssapi import HTTPSPNEGOAuth

    class State(threading.local):
        def __init__(self) -> None:  # runs once in each thread that uses it
            self.context: dict[str, Any] = {}
            self.pos: int | None = None

    def per_thread(name: str) -> Any:
        return property(
            lambda auth: getattr(auth._state, name),
            lambda auth, value: setattr(auth._state, name, value),
        )

    class PerThreadSPNEGO(HTTPSPNEGOAuth):
        creds: Any
        context = per_thread("context")
        pos = per_thread("pos")

        def __init__(self, login: Callable[[], Any] | None, **kwargs: Any) -> None:
            self._state = State()
            self._login, self._renewing = login, threading.Lock()  # one login for all threads
            super().__init__(creds=login() if login else None, **kwargs)

        def generate_request_header(self, *args: Any, **kwargs: Any) -> Any:
            if self._login is not None:
                with self._renewing:
                    try:
                        fresh = self.creds.lifetime > _RENEW_BEFORE
                    except gssapi.exceptions.GSSError:  # expired: a new login
                        fresh = False
                    if not fresh:
                        self.creds = self._login()
            return super().generate_request_header(*args, **kwargs)

        def handle_other(self, response: Any) -> Any:
            answered = super().handle_other(response)
            if response.ok and "Authorization" in response.request.headers:
                # Logged in: Hadoop's hadoop.auth cookie carries it from now on (a token with
                # every request cost ~0.6 ms of CPU and twice the time per request); when the
                # cookie runs out, the NameNode asks again (401) and is answered.
                self.opportunistic_auth = False
            return answered

    return PerThreadSPNEGO


def _on_challenge(build: Callable[[], Any]) -> Any:
    """A requests auth that adds nothing (and imports no GSSAPI) until an answer is a 401
    ``Negotiate``; then it builds the SPNEGO auth once (``build()``), answers with it, and
    hands every later request to it."""
    import requests

    class OnChallenge(requests.auth.AuthBase):
        def __init__(self) -> None:
            self.spnego: Any = None
            self.building = threading.Lock()

        def __call__(self, request: Any) -> Any:
            if self.spnego is not None:
                return self.spnego(request)
            request.register_hook("response", self.challenged)
            return request

        def challenged(self, response: Any, **kwargs: Any) -> Any:
            asked = response.headers.get("WWW-Authenticate", "")
            if response.status_code != 401 or "negotiate" not in asked.lower():
                return response
            with self.building:
                if self.spnego is None:
                    self.spnego = build()
            return self.spnego.handle_response(response, **kwargs)

    return OnChallenge()


def _gss_reason(exc: BaseException) -> str:
    """GSSAPI's own words (major and minor), without the object noise."""
    text = str(getattr(exc, "gen_message", lambda: exc)())
    return " ".join(text.split())[:300]


class Answer(NamedTuple):
    """One request of an operation, as its error reports it."""

    server: str  # scheme://host:port, never credentials
    status: int | None  # None: no answer (refused, timed out, cut short)
    problem: str  # "" for an answer below 400


def noting_session() -> Any:
    """A requests session noting, per thread, the answers of the current operation: HdfsCLI
    moves on to the next NameNode and raises only the last error; ours name every one."""
    import requests

    class NotingSession(requests.Session):
        local = threading.local()  # a class per session: per session, per thread

        def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
            # Per request: requests lets REQUESTS_CA_BUNDLE override a session's `verify`.
            kwargs.setdefault("verify", self.verify)
            try:
                response = super().request(method, url, *args, **kwargs)
            except requests.RequestException as exc:
                failed = exc.request.url if exc.request is not None else url
                self.local.answers.append(Answer(_server(str(failed)), None, _describe(exc)))
                raise
            problem = _problem(response)
            self.local.answers.append(Answer(_server(response.url), response.status_code, problem))
            return response

    return NotingSession()


class WebHDFSStorage:
    """Files in HDFS through WebHDFS; with several NameNode URLs, a connection error or a
    ``StandbyException`` moves on to the next one (the one that answered is tried first next).

    Example::

        options = WebHDFSOptions(user="spark")
        storage = WebHDFSStorage(["http://nn1:9870", "http://nn2:9870"], options)
        storage.list_dir("hdfs://cluster/checkpoints/orders/offsets")
    """

    def __init__(
        self, namenode_urls: str | list[str], options: WebHDFSOptions | None = None
    ) -> None:
        options = options or WebHDFSOptions()
        urls = [namenode_urls] if isinstance(namenode_urls, str) else list(namenode_urls)
        if not urls:
            raise UnsupportedStorageURL("WebHDFS needs at least one NameNode URL")
        self.namenode_urls = [url.rstrip("/") for url in urls]
        self.user = user = options.user
        self.timeout = (
            seconds_option(options.connect_timeout, "connect_timeout"),
            seconds_option(options.read_timeout, "read_timeout"),
        )
        self.requests = RequestCounter()
        kerberos, principal, keytab = options.kerberos, options.principal, options.keytab
        wants_kerberos = kerberos not in (False, None, "", "false", "False") or principal or keytab
        self.kerberos = Kerberos(principal, keytab) if wants_kerberos else None
        # Not said either way (None): the Hadoop configuration, else the NameNode's challenge.
        self.may_infer_kerberos = kerberos in (None, "") and not user
        # True, False or a CA bundle's path (HTTPS NameNodes)
        self.verify = True if options.verify is None else options.verify
        self.token_file = _token_file(options.token_file, principal or keytab or user)
        self.explicit_token_file = bool(options.token_file)
        self.location = self.namenode_urls[0]  # whose NameNode's token to pick (for_url's)
        self.delegation_token: Token | None = None  # the token in use, once connected

    @classmethod
    def for_url(cls, location: str, options: WebHDFSOptions | None = None) -> WebHDFSStorage:
        """Backend for a checkpoint URL; what ``options`` do not give is taken from the Hadoop
        configuration (docs/hdfs.md, "Where each setting comes from")."""
        options = options or WebHDFSOptions()
        credentials = ("user", "kerberos", "principal", "keytab", "token_file")
        told = any(getattr(options, key) for key in credentials)
        settled = options.url and told and options.verify is not None
        conf = HadoopConf() if settled else HadoopConf.from_environment()
        location = conf.qualify(location)
        storage = cls(options.url or conf.namenode_urls(location), options)
        storage.location = location
        https = any(url.lower().startswith("https:") for url in storage.namenode_urls)
        if options.verify is None and https:
            # ssl-client.xml's truststore: what Hadoop's client trusts
            storage.verify = conf.ca_bundle() or storage.verify
        if storage.kerberos is None and storage.may_infer_kerberos and conf.kerberos:
            key = "hadoop.security.authentication"
            storage.kerberos = Kerberos(reason=f"{conf.source(key)} says {key}=kerberos")
        return storage

    def list_dir(self, path: str) -> list[ObjectInfo]:
        return [
            ObjectInfo(
                name=status["pathSuffix"],
                size=int(status.get("length", 0)),
                modified=int(status.get("modificationTime", 0)) / 1000.0,
            )
            for status in self._list_status(path)
            if status.get("type") == "FILE" and status.get("pathSuffix")
        ]

    def read(self, path: str) -> bytes:
        self.requests.add("read")
        # requests follows the NameNode's redirect to a DataNode; HdfsCLI's read() would hand
        # over the raw stream, without the status to check.
        with self._call(path, "OPEN") as client, client._open(hdfs_path(path)) as response:
            kind = response.headers.get("Content-Type", "")
            if response.status_code != 200 or "json" in kind:  # _call names path and server
                raise ValueError(f"{kind or 'no type'}, not the file")
            return bytes(response.content)

    def exists(self, path: str) -> bool:
        self.requests.add("exists")
        return self._file_status(path) is not None

    def is_file(self, path: str) -> bool:
        self.requests.add("stat")
        status = self._file_status(path)
        return status is not None and bool(status.get("type") == "FILE")

    def write_atomic(self, path: str, data: bytes, *, overwrite: bool = False) -> None:
        self.requests.add("write")
        target = hdfs_path(path)
        directory, _, name = target.rpartition("/")
        temp = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"  # dot: no listing counts it
        with self._call(path, "CREATE") as client:
            client.write(temp, data=data, overwrite=False)
        try:
            self._rename2(path, temp, target, overwrite=overwrite)
        except StorageError as exc:
            self._delete_quietly(temp)
            if not isinstance(exc, StorageAlreadyExists):
                raise
            raise StorageAlreadyExists(
                f"{path}: already exists; pass overwrite=True to replace it"
            ) from None

    def list_children(self, path: str) -> Children:
        # a file lists itself with an empty suffix: no children
        listed = [status for status in self._list_status(path) if status.get("pathSuffix")]
        return Children.of(
            (status["pathSuffix"], status["type"] == "DIRECTORY") for status in listed
        )

    def walk(self, root: str, relative: str = "") -> dict[str, int]:
        found: dict[str, int] = {}
        for status in self._list_status(f"{root.rstrip('/')}/{relative}"):
            name = status.get("pathSuffix")
            if not name:  # LISTSTATUS of a file lists the file itself with an empty suffix
                found[relative] = int(status.get("length", 0))
                continue
            child = f"{relative}/{name}" if relative else name
            if status.get("type") == "DIRECTORY":
                found.update(self.walk(root, child))
            else:
                found[child] = int(status.get("length", 0))
        return found

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self.requests.add("delete")
        with contextlib.suppress(StorageNotFound), self._call(path, "DELETE") as client:
            client.delete(hdfs_path(path), recursive=recursive)

    def remove_empty_directories(self, root: str) -> None:
        if self.walk(root):
            raise StorageError(f"{root}: still holds files; not removing it")
        self.delete(root, recursive=True)

    def rename(self, src: str, dst: str) -> bool:
        target = hdfs_path(dst)
        self.requests.add("rename", 2)
        with self._call(dst, "MKDIRS") as client:
            client.makedirs(target.rsplit("/", 1)[0] or "/")
        try:
            self._rename2(src, hdfs_path(src), target, overwrite=False)
        except StorageAlreadyExists:
            raise StorageAlreadyExists(f"{dst}: already exists; not renaming over it") from None
        return True

    def copy_from(self, source: Storage, src: str, dst: str) -> None:  # no server-side copy
        self.write_atomic(dst, source.read(src), overwrite=True)

    def _list_status(self, path: str) -> list[dict[str, Any]]:
        """One LISTSTATUS: the FileStatus entries, ``[]`` when ``path`` is missing. (HdfsCLI's
        list() raises for a missing directory and sends a second request when one entry is in.)
        """
        self.requests.add("list")
        try:
            with self._call(path, "LISTSTATUS") as client:
                return _file_statuses(client._list_status(hdfs_path(path)))
        except StorageNotFound:
            return []

    def _file_status(self, path: str) -> dict[str, Any] | None:
        """One GETFILESTATUS: ``path``'s FileStatus, None when it is missing."""
        try:
            with self._call(path, "GETFILESTATUS") as client:
                status: dict[str, Any] = client.status(hdfs_path(path))
                return status
        except StorageNotFound:
            return None

    def _rename2(self, path: str, src: str, dst: str, *, overwrite: bool) -> None:
        # rename2 (any renameoptions) is atomic and, without OVERWRITE, fails with
        # FileAlreadyExistsException; HdfsCLI's rename() sends plain RENAME, which answers
        # false over a file and moves src INTO an existing directory.
        with self._call(path, "RENAME") as client:
            client._rename(src, destination=dst, renameoptions="OVERWRITE" if overwrite else "NONE")

    def _delete_quietly(self, path: str) -> None:
        # A leftover dot-file temp is ignored by every reader, so a failed cleanup is harmless.
        with contextlib.suppress(StorageError), self._call(path, "DELETE") as client:
            client.delete(path)

    @functools.cached_property
    def _connected(self) -> tuple[Any, Any]:
        """(HdfsCLI client, its session), built on first use, with the credentials of
        docs/hdfs.md ("Credentials"). Credentials in a URL (``http://user:pw@gateway``) become
        the session's basic auth, so that they never reach HdfsCLI's log lines or an error."""
        from hdfs import Client, InsecureClient, TokenClient

        _quiet_library_loggers()
        session = noting_session()
        session.verify = self.verify
        self.delegation_token = self._pick_token()
        if self.delegation_token is None and self.kerberos is not None:
            why = f"Kerberized HDFS ({self.kerberos.reason or 'asked for'}) needs requests-gssapi"
            _require("requests_gssapi", "kerberos", why)
            session.auth = self.kerberos.auth()
        plain = []
        for url in self.namenode_urls:
            parts = urlsplit(url)
            if parts.username is not None and session.auth is None:
                session.auth = (unquote(parts.username), unquote(parts.password or ""))
            plain.append(parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl())
        if session.auth is None and self.delegation_token is None and self.may_infer_kerberos:
            session.auth = self._answer_challenges()
        url = ";".join(plain)  # HdfsCLI's form of a list of NameNodes
        settings = {"timeout": self.timeout, "session": session}
        if self.delegation_token:  # sent as delegation=
            return TokenClient(url, self.delegation_token.url_string(), **settings), session
        if self.user:  # sent as user.name
            return InsecureClient(url, self.user, **settings), session
        return Client(url, **settings), session  # Kerberos (session.auth) or anonymous

    def _answer_challenges(self) -> Any:
        """Nothing said how to log in: SPNEGO from the ticket cache kinit left, should the
        NameNode ask for it (a 401 ``Negotiate``; a cluster without Kerberos never does);
        ``None`` without requests-gssapi (a 401 then says to install it)."""
        import importlib.util

        if importlib.util.find_spec("requests_gssapi") is None:
            return None
        self.kerberos = Kerberos(reason=CHALLENGED)
        return _on_challenge(self.kerberos.auth)

    def _pick_token(self) -> Token | None:
        """The token file's HDFS delegation token for this NameNode. A file from
        HADOOP_TOKEN_FILE_LOCATION without one (YARN without Kerberos) leaves the other
        credentials in charge; a file given explicitly must hold one."""
        if self.token_file is None:
            return None
        token = pick_hdfs_token(read_token_file(self.token_file), self.location)
        if token is None and self.explicit_token_file:
            raise TokenFileInvalid(
                f"Hadoop token file {self.token_file}: holds no HDFS delegation token"
            )
        return token

    @contextlib.contextmanager
    def _call(self, path: str, op: str) -> Iterator[Any]:
        """One operation's requests (yields the HdfsCLI client): whatever goes wrong is a typed
        error naming the path, the operation and where it failed."""
        import requests

        _require("hdfs", "hdfs", "HDFS checkpoints are read through HdfsCLI")
        from hdfs import HdfsError

        client, session = self._connected
        answers: list[Answer] = []
        session.local.answers = answers
        try:
            yield client
        except (HdfsError, requests.RequestException) as exc:
            raise self._error(path, op, exc, answers) from exc
        except (KeyError, TypeError, ValueError) as exc:  # HdfsCLI reading a strange answer
            if not answers:  # about no answer: a bug, to be seen as it is
                raise
            raise self._error(path, op, exc, answers) from exc

    def _error(self, path: str, op: str, exc: Exception, answers: list[Answer]) -> StorageError:
        import requests

        server, status, problem = answers[-1] if answers else ("WebHDFS", None, "")
        problem = problem or _describe(exc)
        exception = getattr(exc, "exception", None)  # HdfsError: the Java exception's name
        if exception in _STANDBY or isinstance(exc, (requests.ConnectionError, requests.Timeout)):
            if server not in {_server(url) for url in self.namenode_urls}:
                return StorageError(f"{path}: {op} failed at DataNode {server}: {problem}")
            tried = "; ".join(f"{a.server}: {a.problem}" for a in answers if a.problem)
            return StorageError(
                f"{path}: {op} failed on every NameNode ({tried}); check that HDFS is up, or "
                f"{NAMENODES_HINT}"
            )
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            return StorageError(
                f"{path}: {op} failed at {server}: the answer was cut short ({problem})"
            )
        if isinstance(exc, (KeyError, TypeError, ValueError)):
            return StorageError(
                f"{path}: {op} answered HTTP {status} at {server} with something that is not "
                f"WebHDFS's ({problem}); check that no proxy rewrites the answer, or "
                f"{NAMENODES_HINT}"
            )
        # The Java exception first: HDFS answers 403 for FileAlreadyExistsException too.
        if exception in _ALREADY_EXISTS:
            return StorageAlreadyExists(f"{path}: already exists ({op} at {server})")
        if exception in _NOT_FOUND or status == 404:
            return StorageNotFound(f"{path}: no such file ({op} at {server}: {problem})")
        if status == 401:
            why = (
                self.kerberos.problem()
                if self.kerberos
                else _no_kerberos(self.user, self.may_infer_kerberos)
            )
            return StorageAccessDenied(f"{path}: {op} at {server}: HTTP 401: {why}")
        if self.delegation_token is not None and "InvalidToken" in f"{exception} {problem}":
            # SecurityException: ...SecretManager$InvalidToken: ... can't be found in cache
            token = self.delegation_token
            return DelegationTokenRejected(
                f"{path}: {op} at {server}: the NameNode refused the delegation token "
                f"({token.kind}, service {token.service}) from {self.token_file} ({problem}): "
                "expired (not renewed in time, or past its max "
                "lifetime, 7 days by default) or cancelled (its application ended). Resubmit "
                "the application for fresh tokens (with spark-submit --principal/--keytab for "
                "jobs that outlive the max lifetime), or give a principal and keytab"
            )
        if exception in _ACCESS_DENIED or status == 403:
            return StorageAccessDenied(
                f"{path}: access denied ({op} at {server}: {problem}); check "
                "webhdfs_options['user'] and the HDFS permissions of the checkpoint directory"
            )
        return StorageError(f"{path}: {op} failed at {server}: {problem}")


def _token_file(option: str | None, other_credentials: str | None) -> str | None:
    """The token file to read: the option, else HADOOP_TOKEN_FILE_LOCATION; none when a
    principal, keytab or user is given (they come first)."""
    if option and other_credentials:
        raise InvalidParameter(
            "give a token file or a principal/keytab or a user, not both",
            "webhdfs_options.token_file",
        )
    if other_credentials:
        return None
    return option or os.environ.get("HADOOP_TOKEN_FILE_LOCATION") or None


def _quiet_library_loggers() -> None:
    """HdfsCLI logs every request at INFO and the body of every error answer at ERROR, and
    requests-gssapi each refused login at ERROR; every one of those failures reaches the
    caller as our typed error naming path, server and cause, so the lines only repeat it."""
    for name, level in (
        ("hdfs", logging.WARNING),
        ("hdfs.client", logging.CRITICAL),
        ("requests_gssapi", logging.CRITICAL),
    ):
        library_logger = logging.getLogger(name)
        if library_logger.level == logging.NOTSET:
            library_logger.setLevel(level)


def _require(module: str, extra: str, why: str) -> None:
    """A clear error, not an ImportError deep in a read, when an optional package is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UsageError(
            f"{why}, which is not installed: pip install 'airflow-provider-sparklag[{extra}]'"
        )


def _server(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _describe(exc: BaseException) -> str:
    """``ConnectionError: <reason>``, without the URL: its query may hold a delegation token."""
    cause = exc.args[0] if exc.args else exc
    return f"{type(exc).__name__}: {getattr(cause, 'reason', cause)}"


def _problem(response: Any) -> str:
    """What an answer says went wrong (``StandbyException: <first line>``, ``HTTP 500``), or
    ``""`` below 400."""
    if response.status_code < 400:
        return ""
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
        remote = response.json()["RemoteException"]
        return f"{remote['exception']}: {str(remote.get('message')).partition(chr(10))[0]}"
    return f"HTTP {response.status_code}"


def _file_statuses(response: Any) -> list[dict[str, Any]]:
    """LISTSTATUS's FileStatus entries, each checked: a proxy's page or a damaged answer is a
    ValueError saying what is wrong (``_call`` names the path), never a KeyError deep inside a
    listing."""
    try:
        document = response.json()
    except ValueError:  # JSONDecodeError, and requests' own subclass of it
        problem = f"a body that is not JSON ({response.text[:80].strip()!r})"
    else:
        wrapper = document.get("FileStatuses") if isinstance(document, dict) else None
        statuses = wrapper.get("FileStatus") if isinstance(wrapper, dict) else None
        if not isinstance(statuses, list):
            problem = f"unexpected JSON, no FileStatuses.FileStatus list ({str(document)[:80]})"
        else:
            wrong = [status for status in statuses if not _is_file_status(status)]
            if not wrong:
                return statuses
            problem = f"a FileStatus entry that is not one ({str(wrong[0])[:120]})"
    raise ValueError(problem)


def _is_file_status(status: Any) -> bool:
    return (
        isinstance(status, dict)
        and isinstance(status.get("pathSuffix"), str)
        and status.get("type") in ("FILE", "DIRECTORY", "SYMLINK")
        and all(_is_count(status.get(key, 0)) for key in ("length", "modificationTime"))
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclasses.dataclass(frozen=True, repr=False)
class WebHDFSOptions(BackendOptions):
    """What :class:`WebHDFSStorage` is opened with (docs/connections.md, "HDFS"; None: inferred,
    docs/hdfs.md). Never printed."""

    url: str | list[str] | None = None
    user: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    kerberos: bool | None = None
    principal: str | None = None
    keytab: str | None = None
    verify: bool | str | None = None
    token_file: str | None = None

    def open(self, location: Location) -> Storage:
        return WebHDFSStorage.for_url(str(location), self)
