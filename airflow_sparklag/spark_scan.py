"""Fleet scan on Spark: lag and health of thousands of streaming jobs in one Spark job; how to
run it, what it writes and how it divides the work: docs/fleet.md ("The Spark fleet scan").
pyspark is imported only inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.judge import cluster_snapshots
from airflow_sparklag.location import Location
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import OPTION_NAMES, CheckOptions
from airflow_sparklag.session import Session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_sparklag.kafka import KafkaOffsetsClient, KafkaSnapshot
    from airflow_sparklag.monitor import CheckResult


THREADS_PER_TASK = 8  # checkpoints one task reads at once (latency-bound small requests)

# (name, Spark SQL type) of the two output tables.
PARTITION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("location", "string"),
    ("query_id", "string"),
    ("committed_batch_id", "bigint"),
    ("source_id", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("committed_offset", "bigint"),
    ("planned_offset", "bigint"),
    ("log_start_offset", "bigint"),
    ("log_end_offset", "bigint"),
    ("last_stable_offset", "bigint"),
    ("lag", "bigint"),
    ("lag_seconds", "double"),
    ("new_partition", "boolean"),
    ("removed_partition", "boolean"),
    ("data_loss", "boolean"),
    ("records_lost", "bigint"),
    ("ahead_of_log", "boolean"),
    ("scanned_at", "timestamp"),
)
JOB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("location", "string"),
    ("query_id", "string"),
    ("health", "string"),
    ("rule", "string"),
    ("reason", "string"),
    ("error", "string"),
    ("committed_batch_id", "bigint"),
    ("committed_at", "timestamp"),
    ("commit_age_seconds", "double"),
    ("in_flight_batch_id", "bigint"),
    ("in_flight_age_seconds", "double"),
    ("total_lag", "bigint"),
    ("max_lag", "bigint"),
    ("max_lag_topic", "string"),
    ("max_lag_partition", "int"),
    ("max_lag_seconds", "double"),
    ("consumption_rate", "double"),
    ("production_rate", "double"),
    ("catch_up_seconds", "double"),
    ("topics", "array<string>"),
    ("partitions", "int"),
    ("missing_topics", "array<string>"),
    ("time_lag_mode", "string"),
    ("scanned_at", "timestamp"),
    ("result", "string"),  # the CLI's --json result of the job (report and verdict), as JSON
)


@dataclass(frozen=True)
class ScanResult:
    """The two tables of a scan (DataFrames over data cached on the executors), the Kafka
    snapshots they were measured against (``snapshot``: the main cluster's; ``snapshots``:
    every cluster's, see ``Session.cluster_of``), and the storage requests the executors sent."""

    partitions: DataFrame
    jobs: DataFrame
    snapshot: KafkaSnapshot
    locations: tuple[str, ...]
    read_requests: int  # the read pass (offsets/C); discovery on the driver not included
    cached: tuple[Any, ...] = field(default=(), repr=False, compare=False)
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)
    tasks: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)
    history_requests: Any = field(default=None, repr=False, compare=False)  # an accumulator
    snapshots: Mapping[int, KafkaSnapshot] = field(default_factory=dict, compare=False)

    @property
    def storage_requests(self) -> int:
        """Requests of the read pass plus the older batches the judge pass read (as the CLI,
        only for the jobs whose rules declare they need them); complete once the tables were
        computed (collected, counted or written)."""
        extra = self.history_requests.value if self.history_requests is not None else 0
        return self.read_requests + int(extra)

    def unpersist(self) -> None:
        """Free the executors' cached states and results."""
        for rdd in self.cached:
            rdd.unpersist()


# -- executor side ---------------------------------------------------------------------------


# One Session per Python worker process and storage options: Spark reuses its Python workers
# (spark.python.worker.reuse, the default), so every later task of the scan, in the read and
# the judge passes, uses the same storage clients instead of building its own.
_WORKER_SESSIONS: dict[str, Session] = {}
_WORKER_PID = [0]
_WORKER_LOCK = threading.Lock()


def _worker_session(session_json: str) -> tuple[Session, bool]:
    """This worker's session for these options (storage, Kafka; JSON), and whether this call
    built it. Its Kafka client is built only if a job's records must be dated."""
    with _WORKER_LOCK:
        if _WORKER_PID[0] != os.getpid():  # a forked child starts with no session
            _WORKER_SESSIONS.clear()
            _WORKER_PID[0] = os.getpid()
        built = session_json not in _WORKER_SESSIONS
        if built:
            _WORKER_SESSIONS[session_json] = Session(**json.loads(session_json))
        return _WORKER_SESSIONS[session_json], built


def _read_partition(locations: Iterable[str], options_json: str) -> Iterator[tuple]:
    """One Spark task: read its checkpoints as the CLI does (``monitor.read_states``). Yields
    ``(location, pickled state | None, pickled failed result | None, task | None)``; the task's
    stats and its topics per cluster ride on its first row."""
    from airflow_sparklag.judge import cluster_topics
    from airflow_sparklag.monitor import read_states

    started, cpu = time.perf_counter(), time.process_time()
    options = json.loads(options_json)
    session, built = _worker_session(options["session"])
    batch = list(locations)
    before = session.storage_requests
    try:
        states, failures = read_states(
            session,
            batch,
            history=int(options["history"]),
            query_id=bool(options.get("query_ids", False)),
            max_workers=int(options["threads"]),
            lazy_history=True,
        )
        topics = cluster_topics(session, states)
    finally:
        session.forget(())  # the states travel on; the worker keeps only its clients
    task = {
        "requests": session.storage_requests - before,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu,  # the worker runs one task at a time
        "pid": os.getpid(),
        "sessions_built": int(built),
        "jobs": len(batch),
        "topics": {cluster: sorted(names) for cluster, names in topics.items()},
    }
    for i, location in enumerate(batch):
        state, failed = states.get(location), failures.get(location)
        yield (
            location,
            None if state is None else pickle.dumps(state, pickle.HIGHEST_PROTOCOL),
            None if failed is None else pickle.dumps(failed),
            task if i == 0 else None,
        )


def _timestamp(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=timezone.utc)


def _judge_partition(
    rows: Iterable[tuple], snapshots_bc: Any, judge_json: str, requests: Any
) -> Iterator[tuple[tuple, list]]:
    """One Spark task of the judge pass: its cached states judged together, as the CLI judges
    them (``judge.judge_states``: one report and verdict each, time lag included, at the
    scan's one instant and against the broadcast snapshots), then (job row, partition rows)."""
    from airflow_sparklag.judge import judge_states

    judge = json.loads(judge_json)
    session, _ = _worker_session(judge["session"])
    options = CheckOptions.from_dict(judge["options"])
    now = float(judge["now"])
    rows = list(rows)
    states = {row[0]: pickle.loads(row[1]) for row in rows if row[1] is not None}
    results = {row[0]: pickle.loads(row[2]) for row in rows if row[2] is not None}
    before = session.storage_requests
    try:
        if states:
            results.update(
                judge_states(session, states, options, now=now, snapshots=snapshots_bc.value)
            )
    finally:
        session.forget(())
    requests.add(session.storage_requests - before)
    for row in rows:
        yield _job_rows(results[row[0]], now)


def _job_rows(result: CheckResult, now: float) -> tuple[tuple, list]:
    """(job row, partition rows) of one judged job, in the order of the columns."""
    report, verdict, location = result.report, result.verdict, result.location
    scanned_at = _timestamp(now)
    shown = result.to_dict()  # a failed check: CHECK_FAILED, as everywhere
    own: dict[str, Any] = {  # every other column is the report's field of that name
        "location": location,
        "health": shown["verdict"]["health"],
        "rule": shown["verdict"]["rule"],
        "reason": verdict.reason,
        "error": result.error,
        "scanned_at": scanned_at,
        "result": json.dumps(shown),
    }
    if report is None:  # a failed check: as the CLI reports it
        return tuple(own.get(name) for name, _ in JOB_COLUMNS), []
    partitions: list[tuple] = []
    topics: set[str] = set()
    for source in report.sources:
        for topic in source.topics:
            topics.add(topic.topic)
            for p in topic.partitions:
                # topic .. ahead_of_log are the PartitionLag's own fields
                lag = (getattr(p, name) for name, _ in PARTITION_COLUMNS[4:-1])
                row = (location, report.query_id, report.committed_batch_id, source.source_id)
                partitions.append((*row, *lag, scanned_at))
    in_flight = report.in_flight
    own |= {
        "committed_at": _timestamp(report.committed_at),
        "in_flight_batch_id": None if in_flight is None else in_flight.batch_id,
        "in_flight_age_seconds": None if in_flight is None else in_flight.age_seconds,
        "topics": sorted(topics),
        "partitions": len(partitions),
        "missing_topics": list(report.missing_topics),
    }
    job = tuple(own[name] if name in own else getattr(report, name) for name, _ in JOB_COLUMNS)
    return job, partitions


# -- driver side -----------------------------------------------------------------------------


def _schema(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


def scan(
    spark: SparkSession,
    locations: Sequence[Location | str] = (),
    *,
    kafka_config: Mapping[str, Any],
    prefix: str | Sequence[str] | None = None,
    s3_options: dict[str, Any] | None = None,
    webhdfs_options: dict[str, Any] | None = None,
    fsspec_options: dict[str, Any] | None = None,
    options: CheckOptions | None = None,
    num_slices: int | None = None,
    threads_per_task: int = THREADS_PER_TASK,
    max_depth: int = 4,
    kafka_client: KafkaOffsetsClient | None = None,
    kafka_timeout: float = 30.0,
    now: float | None = None,
    query_ids: bool = False,
    source_kafka: Mapping[str, Mapping[str, Any]] | None = None,
    **check: Any,
) -> ScanResult:
    """Scan checkpoints on the executors of ``spark`` (docs/fleet.md); call
    ``result.unpersist()`` when done with the DataFrames. Jobs are judged by ``options``
    (``CheckOptions``) or its fields as keywords (``history=``, ...). ``query_ids=True`` also
    reads each checkpoint's ``metadata`` (+1 GET per job). ``source_kafka``: source -> its
    cluster's librdkafka config (docs/multi-cluster.md)."""
    options = params.take(OPTION_NAMES, CheckOptions.build, check, options)
    if check:
        raise TypeError(f"scan() got unexpected keyword arguments: {', '.join(sorted(check))}")
    opened: dict[str, Any] = {
        "kafka_config": dict(kafka_config),
        "source_kafka": {source: dict(config) for source, config in (source_kafka or {}).items()},
        "s3_options": s3_options,
        "webhdfs_options": webhdfs_options,
        "fsspec_options": fsspec_options,
    }
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    # The driver's session: discovery and the Kafka snapshots. Executors open their own
    # sessions from the same (JSON-safe) options.
    with Session(kafka_client=kafka_client, kafka_timeout=kafka_timeout, **opened) as session:
        unique = _scan_locations(session, locations, prefix, max_depth)
        timings["discover_seconds"] = time.perf_counter() - clock
        session_json = json.dumps(opened, sort_keys=True)
        read_options = {
            "session": session_json,
            "history": options.history_to_read,
            "threads": threads_per_task,
            "query_ids": query_ids,
        }
        slices = num_slices or default_slices(spark, len(unique))
        states, topics, tasks = _read(spark, unique, slices, json.dumps(read_options))
        timings["read_seconds"] = time.perf_counter() - clock - timings["discover_seconds"]
        clock = time.perf_counter()
        snapshots = cluster_snapshots(session, topics, options.subscribe_pattern)
        timings["kafka_seconds"] = time.perf_counter() - clock
    judge_options = {
        "now": max(s.fetched_at for s in snapshots.values()) if now is None else now,
        "options": options.to_dict(),
        "session": session_json,
    }
    requests = spark.sparkContext.accumulator(0)
    partitions, jobs, judged = _judge(spark, states, snapshots, json.dumps(judge_options), requests)
    return ScanResult(
        partitions,
        jobs,
        snapshots[0],
        tuple(unique),
        sum(task["requests"] for task in tasks),
        (states, judged, partitions, jobs),
        timings,
        tuple(tasks),
        requests,
        snapshots,
    )


def default_slices(spark: SparkSession, jobs: int) -> int:
    """Spark partitions of the checkpoint list: two per core. A task reads its checkpoints
    with several threads and its worker keeps its clients, so more tasks only add scheduling
    and Python round trips."""
    return max(1, min(jobs, spark.sparkContext.defaultParallelism * 2))


def _read(
    spark: SparkSession, unique: list[str], slices: int, read_json: str
) -> tuple[Any, dict[int, list[str]], list[dict[str, Any]]]:
    """The read pass: the executors read every checkpoint and keep the states cached for the
    judge pass; the driver gets every topic of each cluster and each task's stats, from one
    small row per task (its first), not one per job."""
    states = (
        spark.sparkContext.parallelize(unique, slices)
        .mapPartitions(lambda part: _read_partition(part, read_json))
        .cache()
    )
    topics: dict[int, set[str]] = {}
    tasks = states.map(lambda row: row[3]).filter(lambda task: task is not None).collect()
    for task in tasks:
        for cluster, names in task.pop("topics").items():
            topics.setdefault(cluster, set()).update(names)
    return states, {cluster: sorted(names) for cluster, names in topics.items()}, tasks


def _scan_locations(
    session: Session,
    locations: Sequence[Location | str],
    prefix: str | Sequence[str] | None,
    max_depth: int,
) -> list[str]:
    """The given locations, then the checkpoints discovered under each prefix; no duplicates.
    As text: each executor reads its own from the RDD."""
    from airflow_sparklag.fleet import discover_checkpoints

    found = [Location.of(each, "checkpoints", bucket=False).text for each in locations]
    prefixes = [prefix] if isinstance(prefix, str) else list(prefix or ())
    if prefixes:
        found.extend(discover_checkpoints(prefixes, session=session, max_depth=max_depth))
    return list(dict.fromkeys(found))


def _judge(
    spark: SparkSession,
    states: Any,
    snapshots: Mapping[int, KafkaSnapshot],
    judge_options: str,
    requests: Any,
) -> tuple[DataFrame, DataFrame, Any]:
    """(partitions, jobs, cached RDD of judged rows): lag and health of every cached state,
    measured on the executors against the broadcast snapshots (one per cluster)."""
    snapshots_bc = spark.sparkContext.broadcast(dict(snapshots))
    judged = states.mapPartitions(
        lambda rows: _judge_partition(rows, snapshots_bc, judge_options, requests)
    ).cache()
    # Converted to Spark rows once each and kept: writing both tables and counting the
    # verdicts afterwards need no further Python pass.
    jobs = spark.createDataFrame(judged.map(lambda pair: pair[0]), _schema(JOB_COLUMNS)).cache()
    partitions = spark.createDataFrame(
        judged.flatMap(lambda pair: pair[1]), _schema(PARTITION_COLUMNS)
    ).cache()
    return partitions, jobs, judged


def write_scan(
    result: ScanResult,
    output: str,
    *,
    fmt: str = "json",
    mode: str = "overwrite",
    options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Write ``<output>/partitions`` and ``<output>/jobs``; returns the two paths."""
    paths = {"partitions": f"{output.rstrip('/')}/partitions", "jobs": f"{output.rstrip('/')}/jobs"}
    for name, frame in (("partitions", result.partitions), ("jobs", result.jobs)):
        writer = frame.write.format(fmt).mode(mode)
        for key, value in (options or {}).items():
            writer = writer.option(key, value)
        writer.save(paths[name])
    return paths


# -- command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_sparklag.spark_scan",
        description="Lag and health of many Spark streaming jobs, computed on Spark.",
    )
    where = parser.add_argument_group("checkpoints (at least one of)")
    where.add_argument("--checkpoints", nargs="+", default=[], help="checkpoint locations")
    where.add_argument("--checkpoints-file", help="a file with one checkpoint location per line")
    where.add_argument(
        "--prefix", action="append", default=[], help="discover checkpoints under this prefix"
    )
    parser.add_argument("--max-depth", type=int, default=4, help="discovery depth under --prefix")
    params.connection_flags(parser, "--bootstrap-servers")
    params.option_flags(parser, CheckOptions)
    parser.add_argument(
        "--storage-options",
        help='JSON {"s3_options": {...}, "webhdfs_options": {...}, "fsspec_options": {...}}',
    )
    parser.add_argument(
        "--thresholds",
        type=params.FlagType("thresholds", params.thresholds),
        default=Thresholds(),
        help="JSON object of health thresholds",
    )
    parser.add_argument(
        "--query-ids", action="store_true", help="fill query_id from metadata (+1 GET per job)"
    )
    parser.add_argument("--output", required=True, help="directory for partitions/ and jobs/")
    parser.add_argument(
        "--format", default="json", help="Spark writer format (json: JSON lines; parquet, ...)"
    )
    parser.add_argument("--mode", default="overwrite", help="Spark save mode (overwrite)")
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="writer option"
    )
    parser.add_argument("--slices", type=int, help="Spark partitions of the checkpoint list")
    parser.add_argument(
        "--threads-per-task", type=int, default=THREADS_PER_TASK, help="reads at once per task"
    )
    return parser


def _storage_options(args: argparse.Namespace, spark: SparkSession | None = None) -> dict[str, Any]:
    """Storage options from the flags; Kerberos for WebHDFS from the flags, else the principal
    and keytab Spark logged in with (spark-submit's --principal/--keytab: spark.kerberos.*)."""
    options: dict[str, Any] = json.loads(args.storage_options) if args.storage_options else {}
    flags = params.storage_flags(args)
    s3 = {**(options.get("s3_options") or {}), **flags["s3_options"]}
    webhdfs = {**(options.get("webhdfs_options") or {}), **flags["webhdfs_options"]}
    explicit = {"user", "kerberos", "principal", "keytab", "token_file"}
    if spark is not None and not explicit & webhdfs.keys():
        conf = spark.sparkContext.getConf()
        login = {k: conf.get(f"spark.kerberos.{k}", None) for k in ("principal", "keytab")}
        if all(login.values()):
            webhdfs.update(login)
    return {
        "s3_options": s3 or None,
        "webhdfs_options": webhdfs or None,
        "fsspec_options": options.get("fsspec_options"),
    }


def _check_options(args: argparse.Namespace) -> CheckOptions:
    """The check options given by the scan's flags (the CLI's, ``--exact-time-lag`` named
    ``--exact-time-lag``; the thresholds as one JSON object)."""
    return params.from_flags(CheckOptions, args, thresholds=args.thresholds)


def _given_locations(args: argparse.Namespace) -> list[str]:
    """``--checkpoints``, then the lines of ``--checkpoints-file``."""
    locations = list(args.checkpoints)
    if args.checkpoints_file:
        with open(args.checkpoints_file) as handle:
            locations.extend(line.strip() for line in handle if line.strip())
    return locations


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    """Run a scan from the command line; prints a JSON summary. ``spark`` reuses a session."""
    from airflow_sparklag.errors import InvalidParameter
    from airflow_sparklag.kafka import load_kafka_config

    args = build_parser().parse_args(argv)
    given = _given_locations(args)
    if not given and not args.prefix:
        raise SystemExit("spark_scan: give --checkpoints, --checkpoints-file or --prefix")
    kafka_config = load_kafka_config(args.kafka_config, args.bootstrap_servers)
    try:  # usage errors: before Spark
        locations: Sequence[Location | str] = [params.location("--checkpoints", e) for e in given]
        source_kafka = params.source_configs(
            "--source-servers", args.source_servers or [], kafka_config
        )
        check_options = _check_options(args)
    except InvalidParameter as exc:
        raise SystemExit(f"spark_scan: {exc}") from None
    writer_options = dict(option.split("=", 1) for option in args.option)
    clock = time.monotonic()
    # Under spark-submit Spark's JVM already runs (and logged in with --principal/--keytab):
    # its session first, so that discovery logs in as it does. From `python -m`, find the jobs
    # before starting Spark: an empty prefix is an answer in seconds.
    if spark is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        spark = _spark_session()
    timings = {"spark_start_seconds": time.monotonic() - clock}
    clock = time.monotonic()
    if args.prefix:
        with Session(**_storage_options(args, spark)) as session:
            locations = _scan_locations(session, locations, args.prefix, args.max_depth)
        if not locations:
            prefixes = ", ".join(args.prefix)
            print(f"spark_scan: no checkpoint found under {prefixes} (max depth {args.max_depth})",
                  file=sys.stderr)  # fmt: skip
            return 3
    timings["discover_seconds"] = time.monotonic() - clock
    if spark is None:
        clock = time.monotonic()
        spark = _spark_session()
        timings["spark_start_seconds"] = time.monotonic() - clock
    started = time.monotonic()
    result = scan(
        spark,
        locations,
        kafka_config=kafka_config,
        options=check_options,
        num_slices=args.slices,
        threads_per_task=args.threads_per_task,
        query_ids=args.query_ids,
        source_kafka=source_kafka,
        **_storage_options(args, spark),
    )
    try:
        clock = time.monotonic()
        paths = write_scan(
            result, args.output, fmt=args.format, mode=args.mode, options=writer_options
        )
        judged = verdicts_and_lag(result.jobs)
        timings["judge_and_write_seconds"] = time.monotonic() - clock
    finally:
        result.unpersist()
    summary = {
        "jobs": len(result.locations),
        **judged,  # health, lag, results
        "topics": sum(len(s.partitions) for s in result.snapshots.values()),
        "storage_requests": result.storage_requests,
        "seconds": round(time.monotonic() - started, 3),
        "timings": _timings(timings, result.timings),
        "executors": executor_summary(result.tasks),
        "output": paths,
    }
    print(json.dumps(summary))
    return 0


def _spark_session() -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.appName("sparklag-fleet-scan").getOrCreate()


# Per job in the summary's "results" (what the "Streaming lag" page shows of a scan).
RESULT_COLUMNS = (
    "location",
    "health",
    "reason",
    "error",
    "total_lag",
    "max_lag_seconds",
    "commit_age_seconds",
    "catch_up_seconds",
)


def verdicts_and_lag(jobs: DataFrame) -> dict[str, Any]:
    """``health``: jobs per verdict; ``lag``: the fleet's lag (total records, the largest
    time lag, None when no job's is known, and the jobs with lag); ``results``: each job's
    verdict and lag (``RESULT_COLUMNS``). One collect of the jobs table's small columns."""
    results = [row.asDict() for row in jobs.select(*RESULT_COLUMNS).collect()]
    seconds = [r["max_lag_seconds"] for r in results if r["max_lag_seconds"] is not None]
    lag = {
        "total_records": sum(r["total_lag"] or 0 for r in results),
        "max_seconds": round(max(seconds), 3) if seconds else None,
        "jobs_with_lag": sum(1 for r in results if (r["total_lag"] or 0) > 0),
    }
    return {"health": dict(Counter(r["health"] for r in results)), "lag": lag, "results": results}


def _timings(main: Mapping[str, float], scanned: Mapping[str, float]) -> dict[str, float]:
    """main()'s and scan()'s timings in order; discovery is the sum of both."""
    discover = main["discover_seconds"] + scanned.get("discover_seconds", 0.0)
    merged = {**scanned, **main, "discover_seconds": discover}
    order = ("discover", "spark_start", "read", "kafka", "judge_and_write")
    return {
        f"{k}_seconds": round(merged[f"{k}_seconds"], 3) for k in order if f"{k}_seconds" in merged
    }


def executor_summary(tasks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How the read pass ran: tasks, Python worker processes, storage sessions they built
    (one S3 client each), and the slowest task."""
    return {
        "read_tasks": len(tasks),
        "python_workers": len({task["pid"] for task in tasks}),
        "sessions_built": sum(task["sessions_built"] for task in tasks),
        "slowest_read_task_seconds": round(max((t["seconds"] for t in tasks), default=0.0), 3),
        "read_cpu_seconds": round(sum(task["cpu_seconds"] for task in tasks), 3),
    }


if __name__ == "__main__":
    # Run as a file (spark-submit .../spark_scan.py): use the importable module's functions, so
    # that what executors unpickle is airflow_sparklag.spark_scan, not this __main__.
    from airflow_sparklag.spark_scan import main as module_main

    sys.exit(module_main())
