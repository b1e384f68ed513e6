"""Kafka side of the lag: log start, log end and last stable offsets, in a few batched requests.

`confluent_kafka` is imported inside the methods only, so DAG files that import this module stay
fast to parse.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_sparklag.errors import (
    InvalidParameter,
    KafkaConfigInvalid,
    KafkaError,
    KafkaUnavailable,
    UsageError,
)
from airflow_sparklag.redact import kafka_secrets, redact_kafka_config, scrub
from airflow_sparklag.storage import seconds_option

log = logging.getLogger(__name__)

# Error codes that mean "the cluster did not answer", as opposed to "it answered with an error".
_UNAVAILABLE_CODES = frozenset(
    {"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT_QUEUE", "_DESTROY"}
)
_MISSING_TOPIC_CODES = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_ID"})
# The cluster refused who we are (bad password, certificate): librdkafka reports these through
# the error callback and lets requests fail as "_TRANSPORT" or time out.
_AUTHENTICATION_CODES = frozenset({"SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION", "_SSL"})
# The cluster knows who we are and refuses the request.
_AUTHORIZATION_CODES = frozenset(
    {"TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}
)
_AUTH_CODES = _AUTHENTICATION_CODES | _AUTHORIZATION_CODES
# Topics Kafka marks internal: Spark's subscribePattern never matches them (its Admin listing
# leaves them out), and neither do we.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_ANSWER_GRACE = 1.0  # seconds other bootstrap servers get once one answered (cluster check)
_POLL_INTERVAL = 0.2  # seconds between two looks at librdkafka's error callbacks while waiting


@dataclasses.dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition at `KafkaSnapshot.fetched_at`."""

    log_start: int
    log_end: int  # high watermark
    last_stable: int | None  # LSO, only when read_committed was asked


@dataclasses.dataclass(frozen=True)
class KafkaSnapshot:
    """Offsets of every partition of some topics, fetched at one moment.

    >>> snap = KafkaSnapshot({"t": {0: PartitionOffsets(0, 10, None)}}, frozenset(), 1.0, None)
    >>> snap.partitions["t"][0].log_end
    10
    """

    partitions: Mapping[str, Mapping[int, PartitionOffsets]]  # topic -> partition -> offsets
    missing_topics: frozenset[str]
    fetched_at: float  # epoch seconds
    cluster_id: str | None
    # The subscribePattern the cluster's topics were matched against, and the topics that
    # matched it (their offsets are in `partitions` too); None: no pattern was asked for.
    pattern: str | None = None
    pattern_topics: frozenset[str] = dataclasses.field(default_factory=frozenset)


@dataclasses.dataclass(frozen=True)
class TopicRetention:
    """What deletes a topic's records: ``retention.ms`` and ``retention.bytes`` (None:
    unlimited, Kafka's -1) and whether ``cleanup.policy`` deletes at all (compact only:
    records are never deleted by age or size, only superseded by key).

    >>> TopicRetention(604_800_000, None, deletes=True).seconds
    604800.0
    """

    retention_ms: int | None
    retention_bytes: int | None
    deletes: bool

    @property
    def seconds(self) -> float | None:
        """Retention by time in seconds; None when records are not deleted by age."""
        if not self.deletes or self.retention_ms is None:
            return None
        return self.retention_ms / 1000.0


# How long a topic's retention settings are taken as known (a check, a sensor's polls).
RETENTION_TTL_SECONDS = 300.0


def subscribe_regex(pattern: str) -> re.Pattern[str]:
    """Spark's ``subscribePattern`` as a Python regex. Spark (its default Admin-based offset
    reader) subscribes to every topic the pattern is FOUND in (``findFirstIn``, not a match of
    the whole name); anchor it (``^orders\\..*$``) to mean the whole name. Java syntax that
    Python does not read (``\\p{Alpha}``, ``(?<name>...)``) is refused, naming the pattern.

    >>> bool(subscribe_regex(r"orders\\..*").search("old-orders.a"))
    True
    """
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidParameter(
            f"cannot read {pattern!r} as a regular expression ({exc}); give the pattern in the "
            "syntax Java and Python share",
            "subscribe_pattern",
        ) from None


# What a bootstrap server that never answered leaves (dead, hung or filtered).
_NO_ANSWER_CODES = frozenset({"_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN", "REQUEST_TIMED_OUT"})
_SOCKET_TIMEOUT_MAX_MS = 300_000  # librdkafka's largest socket.timeout.ms
# ListOffsets errors of a partition whose leadership is moving: asked again within the timeout.
_LEADER_MOVING = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
    }
)


def error_name(exc: BaseException) -> str:
    """librdkafka's error name (e.g. "_TRANSPORT") of a KafkaException, or "" if none."""
    try:
        return str(exc.args[0].name())
    except Exception:  # no error object, or a malformed one: it must not hide the real error
        return ""


def _error_text(exc: BaseException) -> str:
    """What went wrong, never empty: librdkafka's text, completed with the error's name and
    standard description when the broker gave no reason (``"ConsumerGroupDescribe: "``)."""
    error: Any = exc.args[0] if exc.args else None
    try:
        text = str(error.str()) if hasattr(error, "str") else str(exc)
    except Exception:
        text = ""
    prefix = text.strip().rstrip(":").strip()
    if prefix and not text.rstrip().endswith(":"):
        return text
    code = error_name(exc)
    described = code or type(exc).__name__
    if code:
        with contextlib.suppress(Exception):  # an error object without a code: its name alone
            from confluent_kafka import KafkaError as LibKafkaError

            standard = LibKafkaError(error.code()).str()
            described = f"{code} ({standard})" if standard else code
    return f"{prefix}: {described}" if prefix else described


# librdkafka's lines about a broker connection: "[rdkafka#producer-1] [thrd:host:9092/bootstrap]:
# host:9092/bootstrap: Failed to resolve 'host:9092': ... (after 1ms in state CONNECT)".
_LOG_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)*\[thrd:[^\]]*\]:\s*(\S+/(bootstrap|\d+):\s*)?")
_LOG_SUFFIX = re.compile(r"\s*\(after \d+ms in state \w+\)(, \d+ identical error\(s\) suppressed)?")
_CONNECTION_FACILITY = "FAIL"  # librdkafka's facility of a failed broker connection


class _ClientLog:
    """librdkafka's log callback (the `logger` setting): each distinct line is logged once at its
    own level, repeats at DEBUG, and the last connection failure is kept as the cause that a
    "did not answer" error names (a mistyped host retried every 100 ms is 40 lines in 4 s)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._log = logging.getLogger(f"{__name__}.librdkafka")
        self._secrets = list(secrets)
        self._seen: dict[str, int] = {}
        self._cause: str | None = None  # the last connection failure
        self._lock = threading.Lock()

    def log(self, level: int, fmt: str, *args: Any) -> None:
        try:
            line = fmt % args if args else str(fmt)
        except (TypeError, ValueError):  # not the format librdkafka sends: keep it whole
            line = " ".join(str(a) for a in (fmt, *args))
        facility = str(args[0]) if args else ""
        text = scrub(
            _LOG_SUFFIX.sub("", _LOG_PREFIX.sub("", str(args[-1]) if args else line)), self._secrets
        )
        with self._lock:
            repeats = self._seen.get(text, 0)
            self._seen[text] = repeats + 1
            if len(self._seen) > 200:  # a long-lived client: forget, do not grow
                self._seen = {text: repeats + 1}
            if facility == _CONNECTION_FACILITY and level >= logging.WARNING:
                self._cause = text
        self._log.log(level if repeats == 0 else logging.DEBUG, "%s", scrub(line, self._secrets))

    def answered(self) -> None:
        """The cluster answered: an earlier connection failure is history, no cause."""
        with self._lock:
            self._cause = None

    def cause(self) -> str | None:
        """The last connection failure librdkafka logged since the cluster last answered,
        with how often it was seen. (Not "in the last N seconds": librdkafka logs a repeated
        failure once, so a handshake refused at the first connection is the cause still.)"""
        with self._lock:
            text = self._cause
            if text is None:
                return None
            count = self._seen.get(text, 1)
        return text + (f" (seen {count} times)" if count > 1 else "")


def check_bootstrap_servers(servers: Any) -> None:
    """Refuse what librdkafka would take and then misreport: a server with ``user:password@``
    (never a Kafka address; it would be printed in every error naming the servers), no server
    at all (``,,``), a port outside 1-65535 (librdkafka wraps 99999 to 34463).

    >>> check_bootstrap_servers("b1:9092, [::1]:9093,SASL_SSL://b2:9094,b3")
    """
    text = str(servers)
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if not entries:
        raise InvalidParameter(f"no server in {text!r}", "bootstrap.servers")
    for entry in entries:
        if "@" in entry:  # the entry is not quoted: it holds a secret
            raise InvalidParameter(
                "a server holds user info (user:password@): Kafka takes credentials from "
                "sasl.username/sasl.password (--kafka-config, the connection), never the address",
                "bootstrap.servers",
            )
        address = entry.rpartition("://")[2]
        if address.isdigit():  # librdkafka takes "9092" for a host name
            raise InvalidParameter(f"{entry!r} is a port without a host", "bootstrap.servers")
        host, colon, port = address.rpartition(":")
        if address.startswith("[") and not host.endswith("]"):  # [::1] without a port
            continue
        if colon and (not host or not port.isdigit() or not 0 < int(port) < 65536):
            raise InvalidParameter(
                f"{entry!r} is not host:port with a port from 1 to 65535", "bootstrap.servers"
            )


class KafkaOffsetsClient:
    """Reads partition offsets with a confluent-kafka AdminClient, every call bounded in time.

    `config` is plain librdkafka configuration (the `extra` of Airflow's `kafka` connection).
    Each round of requests (metadata; then the ListOffsets of all partitions at once) gets
    `timeout` seconds (docs/connections.md, "Time bounds"); refused credentials fail as soon as
    librdkafka reports them. Thread-safe: librdkafka handles are, the one admin handle is built
    under a lock, and the rest of each call's state is local.
    """

    def __init__(self, config: Mapping[str, Any], timeout: float = 10.0) -> None:
        if not config.get("bootstrap.servers"):
            raise KafkaError("Kafka config has no 'bootstrap.servers': give host:port of a broker.")
        check_bootstrap_servers(config["bootstrap.servers"])
        self._timeout = seconds_option(timeout, "timeout")
        self._config = dict(config)
        # Ours is installed instead (refused credentials are seen through it); theirs still runs.
        self._user_error_cb = self._config.pop("error_cb", None)
        self._secrets = kafka_secrets(self._config)  # scrubbed from every message
        self._oauth_failure: str | None = None  # why the oauth_cb failed, if it did
        self._admin: Any = None
        self._admin_lock = threading.Lock()
        self._retention: dict[str, tuple[float, TopicRetention | None]] = {}
        # (when, code, text) of the last refusal; replaced whole, so read without a lock
        self._refusal: tuple[float, str, str] | None = None
        self._client_log = _ClientLog(self._secrets)
        self._one_cluster: str | None = None  # the cluster id all bootstrap servers agreed on

    @property
    def timeout(self) -> float:
        """Seconds one round of requests may take (see the class docstring)."""
        return self._timeout

    @property
    def bootstrap_servers(self) -> str:
        return str(self._config["bootstrap.servers"])

    def _client_config(self) -> dict[str, Any]:
        # librdkafka refuses a socket.timeout.ms above 5 minutes (and a setup timeout above
        # a 32-bit int): a longer timeout is kept by our own deadline on each round.
        timeout_ms = max(1000, min(int(self._timeout * 1000), _SOCKET_TIMEOUT_MAX_MS))
        # The user's settings win, except that no request may outlive our own timeout: without
        # these an unreachable broker makes librdkafka retry for its defaults (60 s and more).
        bounded = ("socket.timeout.ms", "socket.connection.setup.timeout.ms")
        base: dict[str, Any] = {
            **dict.fromkeys(bounded, timeout_ms),
            # Admin handles are producers in librdkafka, which default to auto-creating topics
            # on metadata requests; a monitor must never create the topic it looks for.
            "allow.auto.create.topics": False,
            # No KIP-714 telemetry: it costs a round trip on every new connection, which a
            # slow link pays within our timeout.
            "enable.metrics.push": False,
            # librdkafka's own log lines go to Python logging instead of raw stderr, repeats
            # collapsed, the last connection failure kept for our error message.
            "logger": self._client_log,
        }
        base.update(self._config)
        base["error_cb"] = self._on_error
        if callable(base.get("oauth_cb")):
            base["oauth_cb"] = self._guarded_oauth_cb(base["oauth_cb"])
        for key in bounded:
            base[key] = min(int(base[key]), timeout_ms)
        return base

    def _guarded_oauth_cb(self, callback: Any) -> Any:
        """``callback`` that remembers why it failed: librdkafka only says "OAuth token not
        set" after its own wait, never what the token provider (MSK IAM, an IdP) answered."""

        def oauth_cb(config_str: str) -> Any:
            try:
                return callback(config_str)
            except Exception as exc:
                self._oauth_failure = f"{type(exc).__name__}: {self.describe(exc)[:300]}"
                raise

        return oauth_cb

    def admin(self) -> Any:
        """The AdminClient (built once), for requests this class has no method for; wait for
        its futures with :meth:`outcomes` and turn errors into ours with :meth:`translate`."""
        admin = self._admin
        if admin is not None:
            return admin
        from confluent_kafka.admin import AdminClient

        with self._admin_lock:  # threads arriving together must not each build a handle
            if self._admin is None:
                try:
                    self._admin = AdminClient(self._client_config())
                except Exception as exc:  # bad config values: say which, never echo secrets
                    failure = self._oauth_failure
                    if failure is not None:
                        raise KafkaError(
                            f"Cannot get an OAuth token for Kafka {self.bootstrap_servers}: the "
                            f"oauth_cb token callback failed ({failure}); check the token "
                            "provider (MSK IAM role, identity provider) and the callback's config"
                        ) from None
                    raise self._unbuildable(exc) from exc
            return self._admin

    def _unbuildable(self, exc: BaseException) -> KafkaConfigInvalid:
        """Why librdkafka refused the config; a SASL mechanism missing from the build (GSSAPI in
        the PyPI wheels) says which builds have it, not "recompile librdkafka"."""
        text = self.describe(exc)
        if "No provider for SASL mechanism" in text:
            mechanism = str(
                self._config.get("sasl.mechanism") or self._config.get("sasl.mechanisms")
            )
            built = re.search(r"Current build options: [A-Z_ ]+", text)
            return KafkaConfigInvalid(
                f"Kafka {self.bootstrap_servers}: this confluent-kafka cannot use SASL mechanism "
                f"{mechanism}: its librdkafka was built without it"
                f"{f' ({built.group(0).strip()})' if built else ''}. The PyPI wheels have no "
                "Kerberos (GSSAPI): use a confluent-kafka built against a librdkafka with Cyrus "
                "SASL (for example conda-forge's python-confluent-kafka), or another mechanism "
                "the cluster offers (SCRAM, OAUTHBEARER). See docs/connections.md, 'Kafka with "
                "Kerberos'."
            )
        return KafkaConfigInvalid(
            f"Cannot create a Kafka client for {self.bootstrap_servers}: "
            f"{text} (config: {redact_kafka_config(self._config)})"
        )

    def close(self) -> None:
        """Drop the admin client (librdkafka closes its sockets when the handle is freed).

        Calls in flight in other threads finish with the handle they hold; the next call makes
        a new one."""
        with self._admin_lock:
            self._admin = None

    def __enter__(self) -> KafkaOffsetsClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- errors -------------------------------------------------------------------------------

    def _unavailable(self, what: str, detail: str = "") -> KafkaUnavailable:
        # What librdkafka saw says more than "Broker transport failure": it comes first.
        detail = "; ".join(part for part in (self._client_log.cause(), detail) if part)
        extra = f" ({detail})" if detail else ""
        return KafkaUnavailable(
            f"Kafka bootstrap servers {self.bootstrap_servers} did not answer {what} within "
            f"{self._timeout:g} s{extra}. Check that the brokers are up and reachable from "
            f"this host, and the security settings of the connection."
        )

    def describe(self, exc: BaseException) -> str:
        """What went wrong in ``exc``, never empty, without any secret of the config (librdkafka
        may quote one)."""
        return scrub(_error_text(exc), self._secrets)

    def _on_error(self, error: Any) -> None:
        """librdkafka's error callback (served by ``poll``): keep the last refusal of our
        credentials, which requests themselves only report as a transport failure."""
        try:
            code = str(error.name())
            text = str(error.str())
        except Exception:  # not a KafkaError: nothing to learn from it
            code = text = ""
        if code in _AUTHENTICATION_CODES:
            self._refusal = (time.monotonic(), code, scrub(text, self._secrets))
        if self._user_error_cb is not None:
            self._user_error_cb(error)

    def _refused(self, code: str, text: str) -> KafkaError:
        if code == "_SSL":
            return KafkaError(
                f"Kafka {self.bootstrap_servers}: the TLS handshake failed (SSL error): {text}. "
                "Check security.protocol, ssl.ca.location and the client certificate settings."
            )
        return KafkaError(
            f"Kafka refused the credentials for {self.bootstrap_servers} (SASL authentication "
            f"failed): {text}. Check sasl.mechanism, sasl.username and sasl.password (or "
            "sasl.jaas.config) of the connection."
        )

    def _refused_recently(self) -> KafkaError | None:
        """The refusal seen by the error callback within the last timeout, as our error."""
        refusal = self._refusal
        if refusal is None or time.monotonic() - refusal[0] > self._timeout + _POLL_INTERVAL:
            return None
        return self._refused(refusal[1], refusal[2])

    def translate(self, exc: BaseException, what: str, topic: str | None = None) -> Exception:
        """Our typed error for a librdkafka error (or a timeout) of the request ``what``."""
        code = error_name(exc)
        text = self.describe(exc)
        if isinstance(exc, concurrent.futures.TimeoutError) or code in _UNAVAILABLE_CODES:
            refused = self._refused_recently()
            return refused or self._unavailable(what, text if code else "")
        where = f" for topic '{topic}'" if topic else ""
        if code in _AUTHENTICATION_CODES:
            return self._refused(code, text)
        if code in _AUTHORIZATION_CODES:
            return KafkaError(
                f"Kafka refused {what}{where} on {self.bootstrap_servers}: {text}. Grant the "
                f"principal Describe on the topic (and Read for exact time lag) or fix the "
                f"credentials."
            )
        if code in _MISSING_TOPIC_CODES:
            return KafkaError(
                f"Topic '{topic}' does not exist on {self.bootstrap_servers} ({text}). Was it "
                f"deleted or renamed?"
            )
        return KafkaError(f"Kafka error during {what}{where} on {self.bootstrap_servers}: {text}")

    def outcomes(
        self,
        futures: Mapping[Any, concurrent.futures.Future],
        what: str,
        deadline: float | None = None,
    ) -> dict[Any, Any]:
        """Each future's result, or the exception it ended with, within the client timeout
        (or by ``deadline``, a ``time.monotonic()`` value).

        Raises :class:`KafkaUnavailable` when the time is up, and the credentials error as
        soon as librdkafka reports that the cluster refused them (it would otherwise only time
        out or fail as a "transport failure").
        """
        admin = self.admin()
        if deadline is None:
            deadline = time.monotonic() + self._timeout
        pending = list(futures.values())
        while pending:
            remaining = deadline - time.monotonic()
            _done, not_done = concurrent.futures.wait(
                pending, timeout=max(0.0, min(_POLL_INTERVAL, remaining))
            )
            with contextlib.suppress(Exception):  # serves the error callback
                admin.poll(0)
            refused = self._refused_recently()
            if refused is not None:
                raise refused
            pending = list(not_done)
            if pending and remaining <= _POLL_INTERVAL:
                raise self._unavailable(what)
        found: dict[Any, Any] = {}
        for key, future in futures.items():
            try:
                error = future.exception(timeout=0)
            except concurrent.futures.CancelledError as cancelled:  # the handle was closed
                error = cancelled
            found[key] = error if error is not None else future.result(timeout=0)
        return found

    def _blocking(self, call: Callable[[], Any], what: str) -> Any:
        """Run a blocking librdkafka call (bounded by its own timeout) in a helper thread, so
        that refused credentials are seen while it waits; its errors are raised as they are."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the waiting thread
                future.set_exception(exc)

        threading.Thread(target=run, name="sparklag-kafka-call", daemon=True).start()
        outcome = self.outcomes({"call": future}, what)["call"]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    # -- metadata -----------------------------------------------------------------------------

    def _servers_by_cluster(self, servers: list[str]) -> dict[str, list[str]]:
        """The bootstrap servers that answered, by the cluster id they answered with: one small
        client per server, all asked at once within the client timeout."""
        from confluent_kafka.admin import AdminClient

        futures: dict[str, concurrent.futures.Future] = {}
        clients = []  # held until the answers are in: a freed handle cancels its requests
        check_log = _ClientLog(self._secrets)  # a dead server's retries: one line, not forty
        for server in servers:
            config = self._client_config()
            config["bootstrap.servers"] = server
            config["logger"] = check_log
            try:
                clients.append(AdminClient(config))
                futures[server] = clients[-1].describe_cluster(request_timeout=self._timeout)
            except Exception:  # a client that cannot be built fails the main request too
                continue
        # Up to the timeout for a first answer, then a short grace for the others: a server that
        # is down (one broker in maintenance) must not cost every check a whole timeout, and live
        # servers answer within milliseconds of each other.
        pending = list(futures.values())
        _first, pending_set = concurrent.futures.wait(
            pending, timeout=self._timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if pending_set:
            concurrent.futures.wait(pending_set, timeout=min(_ANSWER_GRACE, self._timeout))
        by_cluster: dict[str, list[str]] = {}
        errors = []
        for server, future in futures.items():
            if not future.done():
                errors.append("_TIMED_OUT")
            elif future.exception() is not None:
                errors.append(error_name(future.exception()))  # type: ignore[arg-type]
            elif future.result().cluster_id:
                by_cluster.setdefault(str(future.result().cluster_id), []).append(server)
        answered = len(futures) - len(errors)
        if not answered and errors and all(code in _NO_ANSWER_CODES for code in errors):
            # No server answered within the timeout: the request after this one would wait a
            # second timeout to learn the same (a list of hung servers failed in 2x the bound).
            raise self._unavailable("a metadata request")
        return by_cluster

    def _check_one_cluster(self) -> None:
        """A bootstrap list must name brokers of ONE cluster: librdkafka takes metadata from
        whichever answers first, so two clusters in one list give numbers from either. Checked
        once per client, only when the list has several servers; a server that does not answer
        is left to the request itself."""
        servers = [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]
        if self._one_cluster is not None or len(servers) < 2:
            return
        by_cluster = self._servers_by_cluster(servers)
        if len(by_cluster) > 1:
            parts = "; ".join(
                f"{', '.join(names)} belong to cluster {cluster}"
                for cluster, names in sorted(by_cluster.items())
            )
            raise KafkaError(
                f"Kafka bootstrap servers {self.bootstrap_servers} span {len(by_cluster)} "
                f"clusters ({parts}): a bootstrap list must name brokers of one cluster. Give "
                "each cluster its own list (a source read from another cluster: --source-servers "
                "or source_kafka_conn_ids)."
            )
        if by_cluster:
            self._one_cluster = next(iter(by_cluster))

    def _metadata(
        self, topics: Iterable[str], pattern: str | None = None
    ) -> tuple[dict[str, list[int]], set[str], str | None, frozenset[str]]:
        """Current partitions of each topic, the missing topics, the cluster id and the topics
        ``pattern`` is found in (internal ones left out, as Spark does), whose partitions are
        in the result too: the one all-topics metadata request lists them."""
        self._check_one_cluster()
        admin = self.admin()
        deadline = time.monotonic() + self._timeout  # the whole metadata round
        try:
            # All-topics metadata: one request, and it never auto-creates anything. The
            # request is bounded by the timeout (list_topics' own, slightly less).
            md = self._blocking(
                lambda: admin.list_topics(timeout=max(0.1, self._timeout - 2 * _POLL_INTERVAL)),
                "a metadata request",
            )
        except (KafkaError, KafkaUnavailable):
            raise
        except Exception as exc:
            raise self.translate(exc, "a metadata request") from exc
        self._client_log.answered()
        matched: frozenset[str] = frozenset()
        if pattern is not None:
            regex = subscribe_regex(pattern)
            matched = frozenset(
                t for t in md.topics if regex.search(t) and t not in INTERNAL_TOPICS
            )
        wanted = sorted(set(topics) | matched)
        partitions: dict[str, list[int]] = {}
        missing: set[str] = set()
        for topic in wanted:
            # Not listed can mean "does not exist" or "not authorized to see it"; ask about
            # that one topic to tell the two apart.
            tmd = md.topics.get(topic) or self._topic_metadata(admin, topic, deadline)
            error = None if tmd is None else tmd.error
            if tmd is None or (error is not None and str(error.name()) in _MISSING_TOPIC_CODES):
                missing.add(topic)
            elif error is not None:
                raise self.translate(Exception(error), "a metadata request", topic)
            else:
                partitions[topic] = sorted(tmd.partitions)
        cluster_id = getattr(md, "cluster_id", None)
        return partitions, missing, (str(cluster_id) if cluster_id else None), matched

    def _topic_metadata(self, admin: Any, topic: str, deadline: float) -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._unavailable(f"a metadata request for topic '{topic}'")
        try:
            return admin.list_topics(topic=topic, timeout=remaining).topics.get(topic)
        except Exception as exc:
            if error_name(exc) in _MISSING_TOPIC_CODES:
                return None
            raise self.translate(exc, "a metadata request", topic) from exc

    def _list_offsets(
        self,
        requests: Mapping[str, tuple[Any, Any]],
        partitions: Mapping[str, list[int]],
        what: str,
    ) -> dict[str, dict[tuple[str, int], int]]:
        """Send one ListOffsets per named request (spec, isolation) at once; wait for all.

        A partition whose leader is moving (a partition just added, a broker restarting:
        NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, ...) is asked again after a short
        pause, within the same client timeout; any other error is raised at once.
        """
        from confluent_kafka import TopicPartition

        deadline = time.monotonic() + self._timeout
        out: dict[str, dict[tuple[str, int], int]] = {name: {} for name in requests}
        todo = {name: dict(partitions) for name in requests}
        while True:
            futures: dict[tuple[str, Any], concurrent.futures.Future] = {}
            for name, (spec, isolation) in requests.items():
                query = {
                    TopicPartition(t, p): spec for t, ps in todo.get(name, {}).items() for p in ps
                }
                if not query:
                    continue
                try:
                    sent = self.admin().list_offsets(
                        query, isolation_level=isolation, request_timeout=self._timeout
                    )
                except Exception as exc:
                    raise self.translate(exc, what) from exc
                futures.update({(name, tp): future for tp, future in sent.items()})
            retry: dict[str, dict[str, list[int]]] = {}
            for (name, tp), outcome in self.outcomes(futures, what, deadline).items():
                if isinstance(outcome, BaseException):
                    if error_name(outcome) in _LEADER_MOVING and time.monotonic() < deadline:
                        retry.setdefault(name, {}).setdefault(tp.topic, []).append(tp.partition)
                        continue
                    raise self.translate(outcome, what, tp.topic) from outcome
                out[name][(tp.topic, tp.partition)] = int(outcome.offset)
            if not retry:
                return out
            todo = retry
            time.sleep(min(_POLL_INTERVAL, max(0.0, deadline - time.monotonic())))

    # -- public calls -------------------------------------------------------------------------

    def snapshot(
        self, topics: Iterable[str], *, read_committed: bool = False, pattern: str | None = None
    ) -> KafkaSnapshot:
        """Log start, log end (and LSO when `read_committed`) of every partition of `topics`,
        and of every topic a `pattern` (a query's subscribePattern) is found in.

        One metadata request, then one batched ListOffsets per kind of offset (earliest, latest,
        and latest under READ_COMMITTED, which is the last stable offset), all in flight at once.
        """
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        partitions, missing, cluster_id, matched = self._metadata(topics, pattern)
        requests: dict[str, tuple[Any, Any]] = {
            "earliest": (OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED),
            "latest": (OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),
        }
        if read_committed:
            requests["stable"] = (OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
        offsets = self._list_offsets(requests, partitions, "a ListOffsets request")
        start, end, stable = offsets["earliest"], offsets["latest"], offsets.get("stable", {})
        return KafkaSnapshot(
            partitions={
                t: {p: PartitionOffsets(start[t, p], end[t, p], stable.get((t, p))) for p in ps}
                for t, ps in partitions.items()
            },
            missing_topics=frozenset(missing),
            fetched_at=time.time(),
            cluster_id=cluster_id,
            pattern=pattern,
            pattern_topics=matched,
        )

    def offsets_for_time(
        self, topics: Iterable[str], timestamp_ms: int
    ) -> dict[str, dict[int, int]]:
        """For each partition, the first offset whose record timestamp is >= `timestamp_ms`.

        When every record is older, Kafka answers -1 ("after the end"): the log end is returned
        instead, so "committed >= result" reads "everything produced before T was processed".
        Raises KafkaError when a topic does not exist.
        """
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        partitions, missing, _, _ = self._metadata(topics)
        if missing:
            names = ", ".join(sorted(missing))
            raise KafkaError(f"Topic(s) {names} do not exist on {self.bootstrap_servers}.")
        uncommitted = IsolationLevel.READ_UNCOMMITTED
        offsets = self._list_offsets(
            {
                "time": (OffsetSpec.for_timestamp(int(timestamp_ms)), uncommitted),
                "latest": (OffsetSpec.latest(), uncommitted),
            },
            partitions,
            "a ListOffsets-for-time request",
        )
        found, end = offsets["time"], offsets["latest"]
        return {
            t: {p: end[t, p] if found[t, p] < 0 else found[t, p] for p in ps}
            for t, ps in partitions.items()
        }

    def retention(self, topics: Iterable[str]) -> dict[str, TopicRetention | None]:
        """Each topic's retention (DescribeConfigs, all topics in one request, remembered for
        ``RETENTION_TTL_SECONDS``); None for a topic whose settings could not be read (no
        DESCRIBE_CONFIGS permission, a topic gone): logged once, never a failed check."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        now = time.monotonic()
        cache = self._retention
        wanted = sorted(
            {t for t in topics if t not in cache or now - cache[t][0] > RETENTION_TTL_SECONDS}
        )
        if wanted:
            answers: dict[str, Any]
            try:
                resources = [ConfigResource(ResourceType.TOPIC, t) for t in wanted]
                futures = self.admin().describe_configs(resources, request_timeout=self._timeout)
                found = {r.name: f for r, f in futures.items()}
                answers = self.outcomes(found, "a DescribeConfigs request")
            except Exception as exc:  # unreachable or refused: the check says so elsewhere
                answers = dict.fromkeys(wanted, exc)
            for topic in wanted:
                answer = answers.get(topic)
                if answer is None or isinstance(answer, BaseException):
                    why = "no answer" if answer is None else self.describe(answer)
                    log.info(
                        "Retention of topic %s not read (%s): time to loss unknown", topic, why
                    )
                    cache[topic] = (now, None)
                else:
                    cache[topic] = (now, _retention_of(answer))
        return {t: cache[t][1] for t in topics}

    def record_timestamps(
        self, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int | None]:
        """Timestamp (ms) of the record at each (topic, partition) offset.

        None when the offset is at or past the log end, out of range, or the record could not be
        read before the deadline (the client timeout, for all partitions together). A transaction
        marker or a compacted-away offset yields the first record after it.
        """
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

        result: dict[tuple[str, int], int | None] = dict.fromkeys(offsets)
        pending = {key for key, off in offsets.items() if off >= 0}
        if not pending:
            return result
        conf = self._client_config()
        conf.pop("allow.auto.create.topics", None)
        conf.update(
            {
                # assign() never joins the group; the id only satisfies the client.
                "group.id": f"airflow-sparklag-peek-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",  # out of range -> an error event, not a jump
                # Uncommitted records have a time too, and read_committed would block on an
                # open transaction until the deadline.
                "isolation.level": "read_uncommitted",
                # We read one record per partition: keep the fetches small.
                "max.partition.fetch.bytes": 65536,
                "fetch.max.bytes": 1048576,
            }
        )
        try:
            consumer = Consumer(conf)
        except Exception as exc:  # the same refusal as the admin client's, said the same way
            raise self._unbuildable(exc) from exc
        deadline = time.monotonic() + self._timeout
        try:
            consumer.assign([TopicPartition(t, p, offsets[(t, p)]) for t, p in sorted(pending)])
            while pending:
                remaining = deadline - time.monotonic()
                refused = self._refused_recently()  # consume() serves the error callback
                if refused is not None:
                    raise refused
                if remaining <= 0:
                    break
                # consume() returns at num_messages or at its timeout: a short timeout, or a
                # partition's first fetch (fewer records than asked) costs a whole second.
                for msg in consumer.consume(num_messages=500, timeout=min(remaining, 0.05)):
                    key = (msg.topic(), msg.partition())
                    if key not in pending:
                        continue
                    err = msg.error()
                    if err is not None:
                        code = str(err.name())
                        if code in ("_PARTITION_EOF", "_AUTO_OFFSET_RESET", "OFFSET_OUT_OF_RANGE"):
                            pending.discard(key)  # past the end or gone: no record to time
                        elif code in _AUTH_CODES or code in _MISSING_TOPIC_CODES:
                            raise self.translate(Exception(err), "a fetch", key[0])
                        continue
                    offset = msg.offset()
                    if offset is None or offset < offsets[key]:
                        continue
                    ts_type, ts = msg.timestamp()
                    result[key] = None if ts_type == TIMESTAMP_NOT_AVAILABLE else int(ts)
                    pending.discard(key)
            if pending:
                log.info(
                    "No record read within %.1f s for %d partition(s) from %s; time unknown",
                    self._timeout,
                    len(pending),
                    self.bootstrap_servers,
                )
        finally:
            consumer.close()
        return result


def _retention_of(entries: Mapping[str, Any]) -> TopicRetention:
    """A TopicRetention from DescribeConfigs' ConfigEntry objects (name -> entry)."""

    def number(name: str) -> int | None:  # None: missing, unreadable or Kafka's -1 (unlimited)
        try:
            value = int(entries[name].value)
        except (KeyError, AttributeError, TypeError, ValueError):
            return None
        return None if value < 0 else value

    policy = entries.get("cleanup.policy")
    policies = {p.strip() for p in str(getattr(policy, "value", None) or "delete").split(",")}
    return TopicRetention(number("retention.ms"), number("retention.bytes"), "delete" in policies)


def load_kafka_config(path: str | None, bootstrap_servers: str | None) -> dict[str, Any]:
    """librdkafka settings from a JSON object or a .properties file (``--kafka-config``), plus
    ``--bootstrap-server``: what the CLI and the Spark fleet scan take from their flags."""
    config: dict[str, Any] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"--kafka-config {path}: cannot read it ({reason})") from None
        config = _parse_kafka_config(path, text)
    if bootstrap_servers:
        config["bootstrap.servers"] = bootstrap_servers
    return config


def _parse_kafka_config(path: str, text: str) -> dict[str, Any]:
    if text.lstrip().startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--kafka-config {path}: not valid JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise UsageError(f"--kafka-config {path}: the JSON must be an object of settings")
        return parsed
    config: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise UsageError(f"--kafka-config {path}: line {number} is not 'key=value'")
        config[key.strip()] = value.strip()
    return config
