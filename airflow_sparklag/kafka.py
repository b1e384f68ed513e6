"""The confluent-kafka implementation of the :class:`~airflow_sparklag.kafka_model.KafkaOffsets`
port: offsets in a few batched requests, each round bounded in time. ``confluent_kafka`` is
imported inside the methods only: DAG files that import this module stay fast to parse.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_sparklag.errors import InvalidParameter, KafkaError, KafkaUnavailable, UsageError
from airflow_sparklag.kafka_errors import (
    MISSING_TOPIC_CODES,
    POLL_INTERVAL,
    ClientLog,
    KafkaErrors,
    error_name,
)
from airflow_sparklag.kafka_model import (
    KafkaSnapshot,
    PartitionOffsets,
    TopicRetention,
    subscribe_regex,
)
from airflow_sparklag.kafka_timestamps import read_record_timestamps
from airflow_sparklag.storage import seconds_option

log = logging.getLogger(__name__)

# Topics Kafka marks internal: Spark's subscribePattern never matches them (its Admin listing
# leaves them out), and neither do we.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# How long a topic's retention settings are taken as known (a check, a sensor's polls).
RETENTION_TTL_SECONDS = 300.0
# Record times the client remembers, (topic, partition, offset) -> ms: a record's time never
# changes, so a poll of a job that has not moved reads none again.
RECORD_TIMES_KEPT = 100_000
_ANSWER_GRACE = 1.0  # seconds other bootstrap servers get once one answered (cluster check)
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
    """Reads partition offsets with one AdminClient. ``config`` is librdkafka configuration;
    each round of requests gets ``timeout`` seconds (docs/connections.md, "Time bounds"), and
    refused credentials fail as soon as librdkafka reports them. Thread-safe. Entry points get
    one from a :class:`~airflow_sparklag.session.Session` (``session.kafka``)::

        with KafkaOffsetsClient({"bootstrap.servers": "broker:9092"}) as kafka:
            end = kafka.snapshot(["orders"]).partitions["orders"][0].log_end
    """

    def __init__(self, config: Mapping[str, Any], timeout: float = 10.0) -> None:
        if not config.get("bootstrap.servers"):
            raise KafkaError("Kafka config has no 'bootstrap.servers': give host:port of a broker.")
        check_bootstrap_servers(config["bootstrap.servers"])
        self.timeout = seconds_option(timeout, "timeout")  # seconds one round of requests may take
        self._config = dict(config)
        # Ours is installed instead (refused credentials are seen through it); theirs still runs.
        user_error_cb = self._config.pop("error_cb", None)
        # What librdkafka says, made ours; its secrets are scrubbed from every message.
        self.errors = KafkaErrors(self._config, self.timeout, user_error_cb)
        self.bootstrap_servers = self.errors.servers
        self._admin: Any = None
        self._admin_lock = threading.Lock()
        self._retention: dict[str, tuple[float, TopicRetention | None]] = {}
        self._record_times: dict[tuple[str, int, int], int] = {}
        self._record_times_lock = threading.Lock()
        self._one_cluster: str | None = None  # the cluster id all bootstrap servers agreed on

    def _client_config(self) -> dict[str, Any]:
        # librdkafka refuses a socket.timeout.ms above 5 minutes (and a setup timeout above
        # a 32-bit int): a longer timeout is kept by our own deadline on each round.
        timeout_ms = max(1000, min(int(self.timeout * 1000), _SOCKET_TIMEOUT_MAX_MS))
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
            "logger": self.errors.client_log,
        }
        base.update(self._config)
        base["error_cb"] = self.errors.on_error
        if callable(base.get("oauth_cb")):
            base["oauth_cb"] = self.errors.guarded_oauth_cb(base["oauth_cb"])
        for key in bounded:
            base[key] = min(int(base[key]), timeout_ms)
        return base

    def admin(self) -> Any:
        """The AdminClient (built once), for requests this class has no method for; wait for
        its futures with :meth:`outcomes` and turn errors into ours with ``errors.translate``."""
        admin = self._admin
        if admin is not None:
            return admin
        from confluent_kafka.admin import AdminClient

        with self._admin_lock:  # threads arriving together must not each build a handle
            if self._admin is None:
                try:
                    self._admin = AdminClient(self._client_config())
                except Exception as exc:  # bad config values: say which, never echo secrets
                    no_token = self.errors.no_token()
                    if no_token is not None:
                        raise no_token from None
                    raise self.errors.unbuildable(exc) from exc
            return self._admin

    def close(self) -> None:
        """Drop the admin client (calls in flight keep the handle they hold)."""
        with self._admin_lock:
            self._admin = None

    def __enter__(self) -> KafkaOffsetsClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- errors and waiting -------------------------------------------------------------------

    def outcomes(
        self,
        futures: Mapping[Any, concurrent.futures.Future],
        what: str,
        deadline: float | None = None,
    ) -> dict[Any, Any]:
        """Each future's result, or the exception it ended with, within the client timeout
        (or by ``deadline``, a ``time.monotonic()`` value); :class:`KafkaUnavailable` when the
        time is up, the credentials error as soon as librdkafka reports a refusal."""
        admin = self.admin()
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        pending = list(futures.values())
        while pending:
            remaining = deadline - time.monotonic()
            _done, not_done = concurrent.futures.wait(
                pending, timeout=max(0.0, min(POLL_INTERVAL, remaining))
            )
            with contextlib.suppress(Exception):  # serves the error callback
                admin.poll(0)
            refused = self.errors.refused_recently()
            if refused is not None:
                raise refused
            pending = list(not_done)
            if pending and remaining <= POLL_INTERVAL:
                raise self.errors.unavailable(what)
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
        check_log = ClientLog(self.errors.secrets)  # a dead server's retries: one line, not forty
        for server in servers:
            config = self._client_config()
            config["bootstrap.servers"] = server
            config["logger"] = check_log
            try:
                clients.append(AdminClient(config))
                futures[server] = clients[-1].describe_cluster(request_timeout=self.timeout)
            except Exception:  # a client that cannot be built fails the main request too
                continue
        # Up to the timeout for a first answer, then a short grace for the others: a server that
        # is down (one broker in maintenance) must not cost every check a whole timeout, and live
        # servers answer within milliseconds of each other.
        _first, pending = concurrent.futures.wait(
            futures.values(), timeout=self.timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        concurrent.futures.wait(pending, timeout=min(_ANSWER_GRACE, self.timeout))
        by_cluster: dict[str, list[str]] = {}
        failed = []
        for server, future in futures.items():
            if not future.done():
                failed.append("_TIMED_OUT")
            elif future.exception() is not None:
                failed.append(error_name(future.exception()))  # type: ignore[arg-type]
            elif future.result().cluster_id:
                by_cluster.setdefault(str(future.result().cluster_id), []).append(server)
        answered = len(futures) - len(failed)
        if not answered and failed and all(code in _NO_ANSWER_CODES for code in failed):
            # No server answered within the timeout: the request after this one would wait a
            # second timeout to learn the same (a list of hung servers failed in 2x the bound).
            raise self.errors.unavailable("a metadata request")
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
        deadline = time.monotonic() + self.timeout  # the whole metadata round
        try:
            # All-topics metadata: one request, and it never auto-creates anything. The
            # request is bounded by the timeout (list_topics' own, slightly less).
            md = self._blocking(
                lambda: admin.list_topics(timeout=max(0.1, self.timeout - 2 * POLL_INTERVAL)),
                "a metadata request",
            )
        except (KafkaError, KafkaUnavailable):
            raise
        except Exception as exc:
            raise self.errors.translate(exc, "a metadata request") from exc
        self.errors.client_log.answered()
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
            if tmd is None or (error is not None and str(error.name()) in MISSING_TOPIC_CODES):
                missing.add(topic)
            elif error is not None:
                raise self.errors.translate(Exception(error), "a metadata request", topic)
            else:
                partitions[topic] = sorted(tmd.partitions)
        cluster_id = getattr(md, "cluster_id", None)
        return partitions, missing, (str(cluster_id) if cluster_id else None), matched

    def _topic_metadata(self, admin: Any, topic: str, deadline: float) -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self.errors.unavailable(f"a metadata request for topic '{topic}'")
        try:
            return admin.list_topics(topic=topic, timeout=remaining).topics.get(topic)
        except Exception as exc:
            if error_name(exc) in MISSING_TOPIC_CODES:
                return None
            raise self.errors.translate(exc, "a metadata request", topic) from exc

    def _list_offsets(
        self,
        requests: Mapping[str, tuple[Any, Any]],
        partitions: Mapping[str, list[int]],
        what: str,
    ) -> dict[str, dict[tuple[str, int], int]]:
        """Send one ListOffsets per named request (spec, isolation) at once; wait for all. A
        partition whose leader is moving is asked again after a short pause, within the same
        client timeout; any other error is raised at once."""
        from confluent_kafka import TopicPartition

        deadline = time.monotonic() + self.timeout
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
                        query, isolation_level=isolation, request_timeout=self.timeout
                    )
                except Exception as exc:
                    raise self.errors.translate(exc, what) from exc
                futures.update({(name, tp): future for tp, future in sent.items()})
            retry: dict[str, dict[str, list[int]]] = {}
            for (name, tp), outcome in self.outcomes(futures, what, deadline).items():
                if isinstance(outcome, BaseException):
                    if error_name(outcome) in _LEADER_MOVING and time.monotonic() < deadline:
                        retry.setdefault(name, {}).setdefault(tp.topic, []).append(tp.partition)
                        continue
                    raise self.errors.translate(outcome, what, tp.topic) from outcome
                out[name][(tp.topic, tp.partition)] = int(outcome.offset)
            if not retry:
                return out
            todo = retry
            time.sleep(min(POLL_INTERVAL, max(0.0, deadline - time.monotonic())))

    # -- public calls -------------------------------------------------------------------------

    def snapshot(
        self, topics: Iterable[str], *, read_committed: bool = False, pattern: str | None = None
    ) -> KafkaSnapshot:
        """One metadata request, then one batched ListOffsets per kind of offset, all in flight
        at once (the port says what it answers)."""
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
        """The log end where every record is older (Kafka answers -1), so "committed >= result"
        reads "everything produced before T was processed"."""
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
        """One DescribeConfigs for all topics, remembered for ``RETENTION_TTL_SECONDS``; a topic
        whose settings could not be read (no permission, gone) is logged, never a failed check."""
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
                futures = self.admin().describe_configs(resources, request_timeout=self.timeout)
                found = {r.name: f for r, f in futures.items()}
                answers = self.outcomes(found, "a DescribeConfigs request")
            except Exception as exc:  # unreachable or refused: the check says so elsewhere
                answers = dict.fromkeys(wanted, exc)
            for topic in wanted:
                answer = answers[topic]  # one future per topic asked
                if isinstance(answer, BaseException):
                    why = self.errors.describe(answer)
                    log.info(
                        "Retention of topic %s not read (%s): time to loss unknown", topic, why
                    )
                    cache[topic] = (now, None)
                else:
                    cache[topic] = (now, TopicRetention.from_entries(answer))
        return {t: cache[t][1] for t in topics}

    def record_timestamps(
        self, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int | None]:
        """A transaction marker or a compacted-away offset yields the first record after it.
        Times read are remembered (``RECORD_TIMES_KEPT``): only new offsets are read."""
        known = self._record_times
        result = {key: known.get((*key, off)) for key, off in offsets.items()}
        wanted = {key: offsets[key] for key, ts in result.items() if ts is None}
        if not wanted:
            return result
        found = read_record_timestamps(self._client_config(), self.errors, wanted)
        with self._record_times_lock:
            for key, ts in found.items():
                result[key] = ts
                if ts is not None:  # a record not there yet may come: asked again
                    known[(*key, wanted[key])] = ts
            while len(known) > RECORD_TIMES_KEPT:
                del known[next(iter(known))]
        return result


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
