"""Checks: from a checkpoint location to a lag report and a health verdict, through a session.

    session.read -> session.kafka.snapshot -> compute_lag -> evaluate

Nothing heavy is imported at module level: DAG files may import this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_sparklag.errors import SparkLagError
from airflow_sparklag.health import Health, HealthVerdict, Thresholds, evaluate
from airflow_sparklag.kafka import KafkaOffsetsClient, KafkaSnapshot
from airflow_sparklag.lag import LagReport, compute_lag
from airflow_sparklag.session import Session

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState

MAX_READERS = 8  # checkpoints read at once; each read is a few small storage requests
DEFAULT_HISTORY = 10  # batches of history a check reads (the trend rules' window)
Progress = Callable[[int, int], None]  # (checkpoints read so far, total)


@dataclass(frozen=True)
class CheckOptions:
    """How to judge a checkpoint: thresholds, history read, time-lag mode, isolation level.

    ``read_committed=None`` means read_uncommitted: Spark does not record the Kafka source's
    isolation level in the checkpoint, so pass True for jobs that read with
    ``kafka.isolation.level=read_committed``. ``exact_time_lag`` reads the record timestamp at
    each committed offset instead of estimating from the checkpoint's history.

    >>> CheckOptions(Thresholds(max_lag_seconds=300), history=5).to_dict()["history"]
    5
    """

    thresholds: Thresholds = field(default_factory=Thresholds)
    history: int = DEFAULT_HISTORY
    exact_time_lag: bool = False
    read_committed: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Thresholds):
            raise TypeError("CheckOptions.thresholds must be a Thresholds (see params.py)")
        if isinstance(self.history, bool) or not isinstance(self.history, int):
            raise TypeError(f"history must be a whole number of batches, got {self.history!r}")
        if self.history < 1:
            raise ValueError(f"history must be >= 1 batch, got {self.history}")

    @classmethod
    def build(
        cls,
        thresholds: Thresholds | Mapping[str, Any] | None = None,
        history: int = DEFAULT_HISTORY,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
    ) -> CheckOptions:
        """From plain Python values (a dict of thresholds is checked by ``Thresholds``)."""
        return cls(as_thresholds(thresholds), history, bool(exact_time_lag), read_committed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "thresholds": {k: v for k, v in self.thresholds.to_dict().items() if v is not None},
            "history": self.history,
            "exact_time_lag": self.exact_time_lag,
            "read_committed": self.read_committed,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> CheckOptions:
        return cls.build(
            values.get("thresholds"),
            int(values.get("history", DEFAULT_HISTORY)),
            bool(values.get("exact_time_lag", False)),
            values.get("read_committed"),
        )


@dataclass(frozen=True)
class CheckResult:
    """Lag report and verdict of one checkpoint; `error` set (and `report` None) when the
    checkpoint could not be read in a multi-checkpoint check.

    >>> result = check(session, "s3a://bucket/ck/orders")       # doctest: +SKIP
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


def judge_states(
    session: Session,
    states: Mapping[str, CheckpointState],
    options: CheckOptions,
    *,
    now: float | None = None,
) -> dict[str, CheckResult]:
    """One Kafka snapshot for all topics of all states, then a report and verdict each.

    A `max_lag_seconds` threshold is never skipped silently: when the estimate cannot date a
    lagging job's records (history too short, rate-limited batches), that job's time lag is
    read exactly (one bounded fetch per lagging partition) before it is judged.
    """
    isolation = {loc: _read_committed(st, options.read_committed) for loc, st in states.items()}
    topics = sorted(set().union(*(_topics(st) for st in states.values())))
    if topics:
        client = session.kafka
        snapshot = client.snapshot(topics, read_committed=any(isolation.values()))
    else:  # no Kafka source anywhere: nothing to ask the cluster
        snapshot = KafkaSnapshot({}, frozenset(), time.time(), None)

    def exact_stamps(locations: Sequence[str]) -> dict[str, dict[tuple[str, int], Any]]:
        positions = {
            loc: _record_positions(states[loc], snapshot, isolation[loc]) for loc in locations
        }
        stamps = _exact_timestamps(session.kafka, list(positions.values()))
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

    exact = options.exact_time_lag and bool(topics)
    by_location = exact_stamps(list(states)) if exact else {}
    reports = {loc: report_for(loc, by_location.get(loc)) for loc in states}
    if options.thresholds.max_lag_seconds is not None and not exact and topics:
        undated = [
            loc
            for loc, rep in reports.items()
            if any(p.lag > 0 and p.lag_seconds is None for p in rep.partitions())
        ]
        if undated:
            for loc, job_stamps in exact_stamps(undated).items():
                reports[loc] = report_for(loc, job_stamps)
    return {
        loc: CheckResult(report, evaluate(report, options.thresholds, now=now), loc)
        for loc, report in reports.items()
    }


def failed_result(location: str, error: SparkLagError) -> CheckResult:
    """The result of a checkpoint that could not be read: UNKNOWN, with the error."""
    message = f"{type(error).__name__}: {error}"
    return CheckResult(
        None, HealthVerdict(Health.UNKNOWN, message, "unreadable"), location, message
    )


def read_states(
    session: Session,
    locations: Sequence[str],
    *,
    history: int,
    query_id: bool = True,
    max_workers: int = MAX_READERS,
    progress: Progress | None = None,
) -> tuple[dict[str, CheckpointState], dict[str, CheckResult]]:
    """Read every checkpoint (in parallel): states, and a failed result per unreadable one."""
    states: dict[str, CheckpointState] = {}
    failures: dict[str, CheckResult] = {}
    unique = list(dict.fromkeys(locations))

    def read(location: str) -> tuple[str, CheckpointState | SparkLagError]:
        try:
            return location, session.read(location, history=history, query_id=query_id)
        except SparkLagError as exc:
            return location, exc

    if not unique:
        return states, failures
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(unique)))) as pool:
        for done, (location, outcome) in enumerate(pool.map(read, unique), start=1):
            if isinstance(outcome, SparkLagError):
                failures[location] = failed_result(location, outcome)
            else:
                states[location] = outcome
            if progress is not None:
                progress(done, len(unique))
    return states, failures


def check(
    session: Session,
    location: str,
    options: CheckOptions | None = None,
    *,
    now: float | None = None,
) -> CheckResult:
    """Lag and health of the Spark query whose checkpoint is at ``location``.

    Raises the typed errors (`CheckpointNotFound`, `CheckpointCorrupt`, `StorageError`,
    `KafkaUnavailable`, `KafkaError`).

    >>> with Session(kafka_config={"bootstrap.servers": "127.0.0.1:9092"}) as session:
    ...     result = check(session, "/data/ck/orders",
    ...                    CheckOptions(Thresholds(max_lag_seconds=600)))    # doctest: +SKIP
    >>> result.verdict.health                                               # doctest: +SKIP
    <Health.OK: 'OK'>
    """
    options = options or CheckOptions()
    state = session.read(location, history=options.history)
    return judge_states(session, {location: state}, options, now=now)[location]


def check_many(
    session: Session,
    locations: Sequence[str],
    options: CheckOptions | None = None,
    *,
    now: float | None = None,
    query_id: bool = True,
    max_workers: int = MAX_READERS,
    progress: Progress | None = None,
) -> list[CheckResult]:
    """`check` for many queries: checkpoints read in parallel (at most `max_workers` at once),
    ONE Kafka snapshot for all their topics.

    Results come in the order of `locations`. A checkpoint that cannot be read gives a result
    with `error` set and an UNKNOWN verdict instead of failing the others; Kafka errors concern
    every query and are raised.
    """
    options = options or CheckOptions()
    states, failures = read_states(
        session,
        locations,
        history=options.history,
        query_id=query_id,
        max_workers=max_workers,
        progress=progress,
    )
    judged = judge_states(session, states, options, now=now) if states else {}
    return [judged.get(loc) or failures[loc] for loc in locations]


# -- for scripts: one call, its own session ------------------------------------------------------


def check_checkpoint(
    location: str,
    *,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    history: int = DEFAULT_HISTORY,
    exact_time_lag: bool = False,
    read_committed: bool | None = None,
    now: float | None = None,
    **session_options: Any,
) -> CheckResult:
    """:func:`check` in a session of its own (a script's one-off check); ``session_options``
    are :class:`~airflow_sparklag.session.Session`'s (``kafka_config``, ``s3_options``, ...).

    >>> check_checkpoint("/data/ck/orders", kafka_config={"bootstrap.servers": "k:9092"},
    ...                  thresholds={"max_lag_seconds": 600})      # doctest: +SKIP
    """
    options = CheckOptions.build(thresholds, history, exact_time_lag, read_committed)
    with Session(**session_options) as session:
        return check(session, location, options, now=now)


def check_checkpoints(
    locations: Sequence[str],
    *,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    history: int = DEFAULT_HISTORY,
    exact_time_lag: bool = False,
    read_committed: bool | None = None,
    now: float | None = None,
    max_workers: int = MAX_READERS,
    **session_options: Any,
) -> list[CheckResult]:
    """:func:`check_many` in a session of its own.

    >>> results = check_checkpoints(["s3a://b/ck/a", "s3a://b/ck/b"],
    ...                             kafka_config={"bootstrap.servers": "k:9092"})  # doctest: +SKIP
    >>> [r.verdict.health.value for r in results]                                   # doctest: +SKIP
    ['OK', 'LAGGING']
    """
    options = CheckOptions.build(thresholds, history, exact_time_lag, read_committed)
    with Session(**session_options) as session:
        return check_many(session, locations, options, now=now, max_workers=max_workers)


__all__ = [
    "CheckOptions",
    "CheckResult",
    "check",
    "check_checkpoint",
    "check_checkpoints",
    "check_many",
    "judge_states",
    "read_states",
]
