"""One call from a checkpoint location to a lag report and a health verdict.

    storage -> CheckpointReader -> KafkaOffsetsClient.snapshot -> compute_lag -> evaluate

Nothing heavy is imported at module level: DAG files may import this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_sparklag.errors import SparkLagError
from airflow_sparklag.health import Health, HealthVerdict, Thresholds, evaluate
from airflow_sparklag.kafka import KafkaOffsetsClient, KafkaSnapshot
from airflow_sparklag.lag import LagReport, compute_lag

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState

# (location, history) -> state: how a caller that polls supplies its own cached readers.
StateSource = Callable[[str, int], "CheckpointState"]
MAX_READERS = 8  # checkpoints read at once; each read is a few small storage requests


@dataclass(frozen=True)
class CheckResult:
    """Lag report and verdict of one checkpoint; `error` set (and `report` None) when the
    checkpoint could not be read in a multi-checkpoint check.

    >>> result = check_checkpoint(
    ...     "s3a://bucket/ck/orders", kafka_config={"bootstrap.servers": "broker:9092"}
    ... )                                                       # doctest: +SKIP
    >>> result.verdict.health.value, result.report.total_lag    # doctest: +SKIP
    ('OK', 0)
    >>> json.dumps(result.to_dict())                            # doctest: +SKIP
    """

    report: LagReport | None
    verdict: HealthVerdict
    location: str = ""
    error: str | None = None  # "<ErrorClass>: message"

    def to_dict(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "error": self.error,
            "verdict": self.verdict.to_dict(),
            "report": None if self.report is None else self.report.to_dict(),
        }


def as_thresholds(value: Thresholds | Mapping[str, Any] | None) -> Thresholds:
    if isinstance(value, Thresholds):
        return value
    return Thresholds.from_dict(value)


def _read_committed(state: CheckpointState, asked: bool | None) -> bool:
    """The isolation level to measure against.

    An explicit answer wins. Spark writes neither the Kafka source options
    (`kafka.isolation.level`) nor the reader's conf to the checkpoint (offsets/N keeps only a
    fixed list of spark.sql.* keys), so None falls back to read_uncommitted, which is also the
    Kafka source's default. Pass True for jobs that read with read_committed.
    """
    return bool(asked)


def _kafka_positions(state: CheckpointState) -> dict[str, dict[int, int]]:
    """topic -> partition -> smallest committed offset over the Kafka sources of the query."""
    positions: dict[str, dict[int, int]] = {}
    if state.committed is None:
        return positions
    for source in state.committed.sources:
        if source.kind != "kafka" or source.kafka is None:
            continue
        for topic, parts in source.kafka.items():
            for partition, offset in parts.items():
                current = positions.setdefault(topic, {}).get(partition)
                positions[topic][partition] = offset if current is None else min(current, offset)
    return positions


def _topics(state: CheckpointState) -> set[str]:
    topics: set[str] = set()
    for batch in (state.committed, state.in_flight):
        for source in batch.sources if batch is not None else ():
            if source.kind == "kafka" and source.kafka is not None:
                topics.update(source.kafka)
    return topics


def _record_positions(
    state: CheckpointState, snapshot: KafkaSnapshot, read_committed: bool
) -> dict[tuple[str, int], int]:
    """Where exact mode reads a record: the committed offset, or the log start of a new
    partition. Partitions with no lag or with lost records are skipped (nothing to read)."""
    positions = _kafka_positions(state)
    wanted: dict[tuple[str, int], int] = {}
    for topic in positions:
        for partition, po in snapshot.partitions.get(topic, {}).items():
            committed = positions[topic].get(partition)
            position = po.log_start if committed is None else committed
            ref = po.last_stable if read_committed and po.last_stable is not None else po.log_end
            if po.log_start <= position < ref:
                wanted[(topic, partition)] = position
    return wanted


def _exact_timestamps(
    client: KafkaOffsetsClient, wanted: Sequence[Mapping[tuple[str, int], int]]
) -> dict[tuple[str, int, int], int | None]:
    """Record timestamps for every (topic, partition, offset) any job asks for.

    One consumer pass per distinct offset of a partition; with one job (or jobs at the same
    offsets) that is a single pass.
    """
    distinct: dict[tuple[str, int], set[int]] = {}
    for positions in wanted:
        for key, offset in positions.items():
            distinct.setdefault(key, set()).add(offset)
    result: dict[tuple[str, int, int], int | None] = {}
    rounds = max((len(v) for v in distinct.values()), default=0)
    ordered = {key: sorted(offsets) for key, offsets in distinct.items()}
    for i in range(rounds):
        batch = {key: offs[i] for key, offs in ordered.items() if i < len(offs)}
        for (topic, partition), ts in client.record_timestamps(batch).items():
            result[(topic, partition, batch[(topic, partition)])] = ts
    return result


def _read_state(
    location: str,
    history: int,
    storage_options: Mapping[str, Any],
) -> CheckpointState:
    from airflow_sparklag.checkpoint import CheckpointReader
    from airflow_sparklag.storage import open_storage

    storage = open_storage(location, **storage_options)
    return CheckpointReader(storage, location).read(history=history)


def judge_states(
    states: Mapping[str, CheckpointState],
    *,
    kafka_config: Mapping[str, Any],
    kafka_client: KafkaOffsetsClient | None,
    kafka_timeout: float,
    thresholds: Thresholds,
    exact_time_lag: bool,
    read_committed: bool | None,
    now: float | None,
) -> dict[str, CheckResult]:
    """One Kafka snapshot for all topics of all states, then a report and verdict each.

    A `max_lag_seconds` threshold is never skipped silently: when the estimate cannot date a
    lagging job's records (history too short, rate-limited batches), that job's time lag is
    read exactly (one bounded fetch per lagging partition) before it is judged.
    """
    isolation = {loc: _read_committed(st, read_committed) for loc, st in states.items()}
    topics = sorted(set().union(*(_topics(st) for st in states.values())))
    client = kafka_client or KafkaOffsetsClient(kafka_config, timeout=kafka_timeout)
    results: dict[str, CheckResult] = {}
    try:
        if topics:
            snapshot = client.snapshot(topics, read_committed=any(isolation.values()))
        else:  # no Kafka source anywhere: nothing to ask the cluster
            snapshot = KafkaSnapshot({}, frozenset(), time.time(), None)

        def exact_stamps(locations: Sequence[str]) -> dict[str, dict[tuple[str, int], Any]]:
            positions = {
                loc: _record_positions(states[loc], snapshot, isolation[loc]) for loc in locations
            }
            stamps = _exact_timestamps(client, list(positions.values()))
            return {
                loc: {key: stamps.get((*key, offset)) for key, offset in wanted.items()}
                for loc, wanted in positions.items()
            }

        def report_for(loc: str, job_stamps: Mapping[tuple[str, int], Any] | None) -> LagReport:
            return compute_lag(
                states[loc],
                snapshot,
                now=now,
                read_committed=isolation[loc],
                record_timestamps=job_stamps,
            )

        by_location = exact_stamps(list(states)) if exact_time_lag and topics else {}
        reports = {
            loc: report_for(loc, by_location.get(loc) if exact_time_lag else None) for loc in states
        }
        if thresholds.max_lag_seconds is not None and not exact_time_lag and topics:
            undated = [
                loc
                for loc, rep in reports.items()
                if any(p.lag > 0 and p.lag_seconds is None for p in rep.partitions())
            ]
            if undated:
                for loc, job_stamps in exact_stamps(undated).items():
                    reports[loc] = report_for(loc, job_stamps)
    finally:
        if kafka_client is None:
            client.close()
    for loc, report in reports.items():
        results[loc] = CheckResult(report, evaluate(report, thresholds, now=now), loc)
    return results


def check_checkpoint(
    location: str,
    *,
    kafka_config: Mapping[str, Any],
    s3_options: dict[str, Any] | None = None,
    webhdfs_options: dict[str, Any] | None = None,
    fsspec_options: dict[str, Any] | None = None,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    history: int = 10,
    exact_time_lag: bool = False,
    read_committed: bool | None = None,
    now: float | None = None,
    kafka_timeout: float = 10.0,
    kafka_client: KafkaOffsetsClient | None = None,
    read_state: StateSource | None = None,
) -> CheckResult:
    """Lag and health of the Spark query whose checkpoint is at `location`.

    Raises the typed errors (`CheckpointNotFound`, `CheckpointCorrupt`, `StorageError`,
    `KafkaUnavailable`, `KafkaError`). `read_committed=None` means read_uncommitted: Spark
    does not record the Kafka source's isolation level in the checkpoint, so pass True for jobs
    that read with `kafka.isolation.level=read_committed`. `kafka_client` lets a caller reuse
    one client (it is then not closed here). `read_state(location, history)` lets a caller
    that polls keep its `CheckpointReader`s (immutable offsets files are then read once).

    >>> result = check_checkpoint("/data/ck/orders",
    ...                           kafka_config={"bootstrap.servers": "127.0.0.1:9092"},
    ...                           thresholds={"max_lag_seconds": 600})       # doctest: +SKIP
    >>> result.verdict.health                                                  # doctest: +SKIP
    <Health.OK: 'OK'>
    """
    storage_options = {
        "s3_options": s3_options,
        "webhdfs_options": webhdfs_options,
        "fsspec_options": fsspec_options,
    }
    if read_state is not None:
        state = read_state(location, history)
    else:
        state = _read_state(location, history, storage_options)
    return judge_states(
        {location: state},
        kafka_config=kafka_config,
        kafka_client=kafka_client,
        kafka_timeout=kafka_timeout,
        thresholds=as_thresholds(thresholds),
        exact_time_lag=exact_time_lag,
        read_committed=read_committed,
        now=now,
    )[location]


def check_checkpoints(
    locations: Sequence[str],
    *,
    kafka_config: Mapping[str, Any],
    s3_options: dict[str, Any] | None = None,
    webhdfs_options: dict[str, Any] | None = None,
    fsspec_options: dict[str, Any] | None = None,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    history: int = 10,
    exact_time_lag: bool = False,
    read_committed: bool | None = None,
    now: float | None = None,
    kafka_timeout: float = 10.0,
    kafka_client: KafkaOffsetsClient | None = None,
    max_workers: int = MAX_READERS,
    read_state: StateSource | None = None,
) -> list[CheckResult]:
    """`check_checkpoint` for many queries: checkpoints read in parallel (at most
    `max_workers` at once), ONE Kafka snapshot for all their topics.

    Results come in the order of `locations`. A checkpoint that cannot be read gives a result
    with `error` set and an UNKNOWN verdict instead of failing the others; Kafka errors concern
    every query and are raised.

    >>> results = check_checkpoints(["s3a://b/ck/a", "s3a://b/ck/b"],
    ...                             kafka_config={"bootstrap.servers": "k:9092"})  # doctest: +SKIP
    >>> [r.verdict.health.value for r in results]                                   # doctest: +SKIP
    ['OK', 'LAGGING']
    """
    unique = list(dict.fromkeys(locations))
    storage_options = {
        "s3_options": s3_options,
        "webhdfs_options": webhdfs_options,
        "fsspec_options": fsspec_options,
    }
    states: dict[str, CheckpointState] = {}
    failures: dict[str, CheckResult] = {}

    def read(location: str) -> tuple[str, CheckpointState | SparkLagError]:
        try:
            if read_state is not None:
                return location, read_state(location, history)
            return location, _read_state(location, history, storage_options)
        except SparkLagError as exc:
            return location, exc

    if unique:
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(unique)))) as pool:
            for location, outcome in pool.map(read, unique):
                if isinstance(outcome, SparkLagError):
                    message = f"{type(outcome).__name__}: {outcome}"
                    verdict = HealthVerdict(Health.UNKNOWN, message, "unreadable")
                    failures[location] = CheckResult(None, verdict, location, message)
                else:
                    states[location] = outcome
    judged = (
        judge_states(
            states,
            kafka_config=kafka_config,
            kafka_client=kafka_client,
            kafka_timeout=kafka_timeout,
            thresholds=as_thresholds(thresholds),
            exact_time_lag=exact_time_lag,
            read_committed=read_committed,
            now=now,
        )
        if states
        else {}
    )
    return [judged.get(loc) or failures[loc] for loc in locations]


__all__ = ["CheckResult", "check_checkpoint", "check_checkpoints"]
