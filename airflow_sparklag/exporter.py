"""`sparklag serve`: a Prometheus / OpenMetrics exporter for a fleet of Spark streaming queries.

A background thread refreshes ONE FleetChecker (a refresh re-reads only new batch files); the
HTTP server serves its last metrics, ``/healthz`` and ``/history``. docs/exporter.md lists the
metrics. prometheus_client (the ``exporter`` extra) is imported only when used.
"""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from airflow_sparklag.errors import InvalidParameter, UsageError
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.redact import redact_url

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.model.report import LagReport, PartitionLag
    from airflow_sparklag.model.result import CheckResult


log = logging.getLogger(__name__)

DEFAULT_PORT = 9109
DEFAULT_INTERVAL = 30.0
MAX_PARTITIONS_PER_JOB = 1000  # per-partition series a job may have; the most lagging are kept
STALE_AFTER_INTERVALS = 3  # /healthz fails when no refresh succeeded for this many intervals
MAX_HISTORY_BATCHES = 1000  # /history?batches= at most
MAX_CACHED_HISTORIES = 64  # /history answers kept (for one interval each)
PREFIX = "sparklag_"

# Labels of every job's series; a partition's adds kafka_cluster, topic, partition. Not `job`:
# Prometheus sets its own (the scrape job) and would rename ours to exported_job.
JOB_LABELS = ["spark_job", "checkpoint"]
PARTITION_LABELS = [*JOB_LABELS, "kafka_cluster", "topic", "partition"]
# A checkpoint directory named so says nothing of its job: spark_job is its parent's name.
GENERIC_DIRECTORIES = frozenset({"checkpoint", "checkpoints", "checkpointlocation", "ck", "chk"})

# name (without prefix) -> help
PARTITION_GAUGES = {
    "partition_lag_records": "Records the query has not processed: log end (or last stable "
    "offset) minus committed offset.",
    "partition_lag_seconds": "Age of the first unprocessed record (estimated from the "
    "checkpoint's history unless exact); absent when unknown.",
    "partition_committed_offset": "Next offset the query reads, from its last committed batch.",
    "partition_log_end_offset": "Log end offset (high watermark) of the partition.",
    "partition_log_start_offset": "Log start offset (earliest retained record).",
    "partition_time_to_data_loss_seconds": "Seconds until retention deletes the oldest "
    "unprocessed record (a lower bound; +Inf: never); absent when there is no lag or unknown.",
}
JOB_GAUGES = {
    "job_up": "1 when the checkpoint was read and judged at the last refresh, 0 when its check "
    "failed (see sparklag_check_errors_total).",
    "job_lag_records": "Records not processed yet, summed over the job's partitions.",
    "job_max_lag_seconds": "Largest known lag in seconds over the job's partitions.",
    "job_time_to_data_loss_seconds": "The smallest time to data loss of the job's partitions.",
    "job_commit_age_seconds": "Seconds since the last batch commit, at the last refresh.",
    "job_last_commit_timestamp_seconds": "Epoch time of the last batch commit.",
    "job_in_flight_age_seconds": "Seconds the planned, uncommitted batch has run; 0 when no "
    "batch is in flight.",
    "job_committed_batch_id": "Id of the last committed batch.",
    "job_batch_seconds": "Median time of the newest three batches, offsets/N to commits/N.",
    "job_batch_time_ratio": "Batch time over the trigger interval the batches run at; absent "
    "when the interval is unknown.",
    "job_health": "Health verdict: 0 OK, 1 LAGGING, 2 STALLED, 3 STOPPED, 4 REWIND, "
    "5 DATA_LOSS, -1 UNKNOWN (check failed, nothing committed, topic missing).",
    "job_partitions_omitted": "Partitions left out of the per-partition series "
    "(beyond the per-job limit; the least lagging first).",
}


@dataclass(frozen=True)
class _Refresh:
    """What one refresh left: the families to serve and the facts /healthz reports."""

    families: tuple[Metric, ...]
    seq: int
    succeeded_at: float | None  # epoch of the last successful refresh
    last_error: str | None  # "<ErrorClass>: message" of the last failed refresh, if it was last


class LagExporter:
    """Prometheus metrics of a fleet, refreshed every ``interval`` seconds; a failed refresh
    keeps the previous values, marked stale. Also a prometheus_client collector
    (``REGISTRY.register(exporter)``). Example::

        with Session(kafka_config={"bootstrap.servers": "broker:9092"}) as session:
            fleet = FleetChecker(session=session, prefix="s3a://lake/checkpoints")
            exporter = LagExporter(fleet, interval=30.0)
            server = exporter.serve("0.0.0.0", 9109)  # refreshes in a background thread
            ...
            exporter.stop(); server.shutdown()
    """

    def __init__(
        self,
        checker: FleetChecker,
        *,
        interval: float = DEFAULT_INTERVAL,
        max_partitions_per_job: int = MAX_PARTITIONS_PER_JOB,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.checker = checker
        self.interval = float(interval)
        self.max_partitions_per_job = max_partitions_per_job
        self._clock = clock
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._results: list[CheckResult] = []  # of the last successful refresh
        self._check_errors: Counter[tuple[str, str]] = Counter()
        self._refresh_errors: Counter[str] = Counter()
        self._refreshes = 0
        self._duration: float | None = None
        self._state = _Refresh((), 0, None, None)
        self._rendered: dict[str, bytes] = {}
        self._histories: dict[tuple[str, int], tuple[float, dict[str, Any]]] = {}

    # -- refreshing ------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """One poll of the fleet; True when it succeeded. Never raises an ``Exception``: a
        failure is counted, logged and leaves the previous values in place, marked stale."""
        with self._refresh_lock:
            started = time.monotonic()
            results: list[CheckResult] | None = None
            error: str | None = None
            try:
                results = self.checker.check()
            except Exception as exc:  # a refresh must never stop the exporter
                error = f"{type(exc).__name__}: {exc}"
                log.warning("sparklag exporter: refresh failed: %s", error)
                with self._lock:
                    self._refresh_errors[type(exc).__name__] += 1
            duration = time.monotonic() - started
            with self._lock:
                self._refreshes += 1
                self._duration = duration
                succeeded_at = self._state.succeeded_at
                if results is not None:
                    self._results = results
                    succeeded_at = self._clock()
                    for result in results:
                        if result.error is not None:
                            job = redact_url(result.location)  # never a credential
                            reason = result.error.split(":", 1)[0].strip() or "Error"
                            self._check_errors[(job, reason)] += 1
                families = tuple(self._families(stale=results is None))
                self._state = _Refresh(families, self._state.seq + 1, succeeded_at, error)
                self._rendered = {}
            return results is not None

    @property
    def results(self) -> list[CheckResult]:
        """The check results of the last successful refresh (what the metrics show)."""
        with self._lock:
            return list(self._results)

    def start(self) -> None:
        """Refresh now and then every ``interval`` seconds in a daemon thread."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="sparklag-exporter", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # a bug must not end the refreshes silently
                log.exception("sparklag exporter: refresh crashed")
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # the refresh took longer than the interval: start the next now
                next_at, delay = time.monotonic(), 0.0
            self._stop.wait(delay)

    def stop(self, timeout: float | None = None) -> None:
        """Stop refreshing (a refresh under way finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- metric families -------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """The families of the last refresh (the prometheus_client collector interface)."""
        with self._lock:
            families = self._state.families
        yield from families

    def _families(self, *, stale: bool) -> Iterator[Metric]:
        """Every family from the last good results and the counters (called under the lock)."""
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        yield from job_families(self._results, self.max_partitions_per_job)
        checks = CounterMetricFamily(
            PREFIX + "check_errors",
            "Checks of one job that failed (unreadable checkpoint, ...), by error class.",
            labels=[*JOB_LABELS, "reason"],
        )
        for (job, reason), count in sorted(self._check_errors.items()):
            checks.add_metric([*job_labels(job), reason], count)
        refresh_errors = CounterMetricFamily(
            PREFIX + "refresh_errors",
            "Refreshes that failed as a whole (Kafka or a prefix unreachable), by error class.",
            labels=["reason"],
        )
        for reason, count in sorted(self._refresh_errors.items()):
            refresh_errors.add_metric([reason], count)
        yield checks
        yield refresh_errors
        yield CounterMetricFamily(PREFIX + "refreshes", "Refreshes attempted.", self._refreshes)
        # name -> (help, value); a value that is None is not known yet: no family
        gauges = {
            "refresh_duration_seconds": ("Duration of the last refresh.", self._duration),
            "last_refresh_timestamp_seconds": (
                "Epoch time of the last successful refresh.",
                self._state.succeeded_at if stale else self._clock(),
            ),
            "stale": (
                "1 when the last refresh failed: every other value is from an earlier refresh.",
                1 if stale else 0,
            ),
            "jobs": ("Jobs (checkpoints) of the last successful refresh.", len(self._results)),
        }
        for name, (doc, value) in gauges.items():
            if value is not None:
                yield GaugeMetricFamily(PREFIX + name, doc, value)

    # -- serving ---------------------------------------------------------------------------------

    def render(self, accept: str | None = None, *, gzipped: bool = False) -> tuple[bytes, str]:
        """(body, content type) of the last refresh for an ``Accept`` header, rendered once per
        refresh and format. The text format whenever the client takes it: half the CPU of
        OpenMetrics, which only clients that ask for it alone get."""
        from prometheus_client.exposition import choose_encoder

        if accept and "text/plain" in accept:
            accept = "text/plain"
        encoder, content_type = choose_encoder(accept or "")
        key = f"{content_type};gzip" if gzipped else content_type
        with self._lock:
            state, body = self._state, self._rendered.get(key)
        if body is None:
            if gzipped:
                body = gzip.compress(self.render(accept)[0], compresslevel=1)
            else:
                body = encoder(self)  # the families of `state` unless a refresh came between
            with self._lock:
                if self._state.seq == state.seq:
                    self._rendered[key] = body
        return body, content_type

    def health(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) of ``/healthz``: 200 while a refresh succeeded within
        ``3 x interval`` (60 s at least), 503 before the first one and when stale."""
        with self._lock:
            state = self._state
        now = self._clock()
        limit = max(STALE_AFTER_INTERVALS * self.interval, 60.0)
        body: dict[str, Any] = {
            "last_success": state.succeeded_at,
            "last_error": state.last_error,
            "refreshes": state.seq,
        }
        if state.succeeded_at is None:
            return 503, {"status": "starting" if state.seq == 0 else "failing", **body}
        age = now - state.succeeded_at
        body["age_seconds"] = round(age, 3)
        if age > limit:
            return 503, {"status": "stale", **body}
        return 200, {"status": "ok", **body}

    def history(self, job: str, batches: int = 100) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) of ``/history?checkpoint=...``: the job's lag history
        (:mod:`airflow_sparklag.history`), for jobs of the last refresh only; kept for one
        interval, so repeated requests cost Kafka nothing."""
        from airflow_sparklag.errors import SparkLagError
        from airflow_sparklag.history import history

        with self._lock:
            known = any(result.location == job for result in self._results)
            cached = self._histories.get((job, batches))
        if not known:  # the name asked for is echoed without any credentials it holds
            shown = redact_url(job)
            return 404, {"error": f"no checkpoint {shown!r} in the last refresh; see sparklag_jobs"}
        if cached is not None and time.monotonic() - cached[0] < self.interval:
            return 200, cached[1]
        try:
            payload = history(self.checker.session, job, batches=batches).document()
        except SparkLagError as exc:
            return 502, {"error": f"{type(exc).__name__}: {exc}"}
        with self._lock:
            if len(self._histories) >= MAX_CACHED_HISTORIES:
                self._histories.clear()
            self._histories[(job, batches)] = (time.monotonic(), payload)
        return 200, payload

    def wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        """``/metrics`` (also ``/``), ``/healthz``, ``/history?checkpoint=&batches=``; else
        404."""
        path = environ.get("PATH_INFO") or "/"
        if path in ("/healthz", "/history"):
            if path == "/healthz":
                status, payload = self.health()
            else:
                status, payload = self._history_request(environ.get("QUERY_STRING") or "")
            start_response(
                f"{status} {HTTPStatus(status).phrase}", [("Content-Type", "application/json")]
            )
            return [json.dumps(payload).encode()]
        if path not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics, /healthz or /history?checkpoint=...\n"]
        gzipped = "gzip" in (environ.get("HTTP_ACCEPT_ENCODING") or "")
        body, content_type = self.render(environ.get("HTTP_ACCEPT"), gzipped=gzipped)
        headers = [("Content-Type", content_type)]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    def _history_request(self, query: str) -> tuple[int, dict[str, Any]]:
        from urllib.parse import parse_qs

        asked = parse_qs(query)
        job = (asked.get("checkpoint") or asked.get("job") or [""])[0]  # job: the 0.1 name
        try:
            batches = int((asked.get("batches") or ["100"])[0])
        except ValueError:
            batches = 0
        if not job or not 1 <= batches <= MAX_HISTORY_BATCHES:
            return 400, {
                "error": f"give checkpoint=<location> and batches=1..{MAX_HISTORY_BATCHES}"
            }
        return self.history(job, batches)

    def serve(self, address: str = "0.0.0.0", port: int = DEFAULT_PORT) -> WSGIServer:
        """Start refreshing and an HTTP server in daemon threads; ``shutdown()`` stops it."""
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True

        class QuietHandler(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("sparklag exporter: " + format, *args)

        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidParameter(f"port: must be a whole number 0-65535, got {port!r}")
        try:
            # The address's own family: "::" (every address, IPv6 and v4) and "::1" are IPv6.
            Server.address_family = socket.getaddrinfo(
                address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][0]
            server = make_server(address, port, self.wsgi_app, Server, QuietHandler)
        except (OSError, OverflowError, UnicodeError) as exc:  # in use, not ours, no such host
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise UsageError(f"cannot listen on {address}:{port}: {reason}") from None
        self.start()
        threading.Thread(target=server.serve_forever, name="sparklag-http", daemon=True).start()
        return server


# -- results -> families (pure) ------------------------------------------------------------------


def job_labels(location: str) -> list[str]:
    """``[spark_job, checkpoint]`` of a location: the checkpoint directory's name (its
    parent's when it is a generic ``checkpoint``/``ck``), and the location itself, never with
    credentials.

    >>> job_labels("s3a://lake/orders/checkpoint")
    ['orders', 's3a://lake/orders/checkpoint']
    """
    checkpoint = redact_url(location)
    names = [part for part in checkpoint.split("://", 1)[-1].split("/") if part]
    while len(names) > 1 and names[-1].lower() in GENERIC_DIRECTORIES:
        names.pop()
    return [names[-1] if names else checkpoint, checkpoint]


def job_families(results: Sequence[CheckResult], max_partitions: int) -> list[Metric]:
    """The per-partition and per-job families of one refresh's results."""
    from prometheus_client.metrics_core import GaugeMetricFamily

    families = {
        name: GaugeMetricFamily(PREFIX + name, doc, labels=labels)
        for gauges, labels in ((PARTITION_GAUGES, PARTITION_LABELS), (JOB_GAUGES, JOB_LABELS))
        for name, doc in gauges.items()
    }
    states = GaugeMetricFamily(
        PREFIX + "job_health_state",
        "1 for the job's current verdict, 0 for every other (one series per verdict).",
        labels=[*JOB_LABELS, "state"],
    )
    for result in results:
        job = job_labels(result.location)
        health = result.verdict.health
        for verdict in Health:
            states.add_metric([*job, verdict.value], 1 if verdict is health else 0)
        families["job_health"].add_metric(job, health.metric_value)
        families["job_up"].add_metric(job, 0 if result.error is not None else 1)
        if result.report is not None:
            _add_report(families, job, result.report, max_partitions)
    return [*families.values(), states]


def _add_report(families: dict[str, Any], job: list[str], report: LagReport, limit: int) -> None:
    def put(name: str, labels: list[str], value: float | None) -> None:
        if value is not None:
            families[name].add_metric(labels, value)

    partitions = _one_per_partition(report)
    kept = sorted(partitions, key=lambda cp: cp[1].lag, reverse=True)[: max(0, limit)]
    for cluster, p in sorted(kept, key=lambda cp: (cp[0], cp[1].topic, cp[1].partition)):
        labels = [*job, cluster, p.topic, str(p.partition)]
        put("partition_lag_records", labels, p.lag)
        put("partition_lag_seconds", labels, p.lag_seconds)
        put("partition_committed_offset", labels, p.committed_offset)
        put("partition_log_end_offset", labels, p.log_end_offset)
        put("partition_log_start_offset", labels, p.log_start_offset)
        put("partition_time_to_data_loss_seconds", labels, p.time_to_loss_seconds)
    in_flight = report.in_flight
    put("job_lag_records", job, report.total_lag)
    put("job_max_lag_seconds", job, report.max_lag_seconds)
    put("job_time_to_data_loss_seconds", job, report.min_time_to_loss_seconds)
    put("job_commit_age_seconds", job, report.commit_age_seconds)
    put("job_last_commit_timestamp_seconds", job, report.committed_at)
    put("job_in_flight_age_seconds", job, (in_flight.age_seconds or 0.0) if in_flight else 0.0)
    put("job_committed_batch_id", job, report.committed_batch_id)
    pace = report.pace
    put("job_batch_seconds", job, None if pace is None else pace.batch_seconds)
    put("job_batch_time_ratio", job, None if pace is None else pace.ratio)
    put("job_partitions_omitted", job, len(partitions) - len(kept))


def _one_per_partition(report: LagReport) -> list[tuple[str, PartitionLag]]:
    """(kafka_cluster, partition) once per partition of a cluster: the cluster a source is
    measured against (its bootstrap servers when mapped to another, docs/multi-cluster.md;
    else the main cluster's id). Two sources of one query reading the same topic of one
    cluster would give duplicate series: the more lagging one stands for both."""
    worst: dict[tuple[str, str, int], tuple[str, PartitionLag]] = {}
    for source in report.sources:
        cluster = source.cluster or report.kafka_cluster_id or ""
        for topic in source.topics:
            for p in topic.partitions:
                key = (cluster, p.topic, p.partition)
                if key not in worst or p.lag > worst[key][1].lag:
                    worst[key] = (cluster, p)
    return list(worst.values())
