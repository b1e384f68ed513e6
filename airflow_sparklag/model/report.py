"""The report types of a check (``lag.compute_lag``): frozen dataclasses whose ``to_dict()``
survives ``json.dumps``. The bottom of the package: imports nothing else of ours."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_JSON_LEAVES = frozenset({str, int, bool})
# A field holding moments in epoch seconds under another name than ``*_at`` (a tuple of them).
MOMENTS = {"moment": True}


def utc_text(epoch_ms: float | None) -> str | None:
    """A moment as ISO 8601 UTC text to the millisecond: ``2026-12-07T13:40:00.123Z``."""
    if epoch_ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000.0, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def moment(name: str, seconds: float | None) -> dict[str, Any]:
    """ISO 8601 UTC text beside epoch milliseconds (``committed_at``, ``committed_at_ms``)."""
    ms = epoch_ms(seconds)
    return {name: utc_text(ms), f"{name}_ms": ms}


def _moment_json(name: str, value: Any) -> dict[str, Any]:
    if value is None or isinstance(value, (int, float)):
        return moment(name, value)
    return {name: json_safe(value)}


def _ms_json(name: str, value: Any) -> dict[str, Any]:
    if value is None or isinstance(value, int):
        return {name[:-3]: utc_text(value), name: value}
    return {name: json_safe(value)}


def _moments_json(name: str, value: Any) -> dict[str, Any]:
    ms = [epoch_ms(v) for v in value]
    return {name: [utc_text(v) for v in ms], f"{name}_ms": ms}


# How a dataclass field becomes JSON: a moment (a ``*_at`` field, epoch seconds) as `moment`,
# a moment in milliseconds (``*timestamp_ms``, ``time_ms``) with its ISO text beside it; None:
# `json_safe` of its value under its name.
_FieldJson = Callable[[str, Any], dict[str, Any]]


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, _FieldJson | None], ...]:
    return tuple((f.name, _field_kind(f)) for f in dataclasses.fields(cls))


def _field_kind(field_: dataclasses.Field[Any]) -> _FieldJson | None:
    if field_.name.endswith("_at"):
        return _moment_json
    if field_.name.endswith(("timestamp_ms", "time_ms")):
        return _ms_json
    return _moments_json if field_.metadata.get("moment") else None


def json_safe(value: Any) -> Any:
    """`value` in JSON types (sets sorted, NaN and -inf None, +inf "infinite"; a dataclass's
    moments as ISO 8601 UTC text beside epoch milliseconds: `_field_kind`)."""
    kind: type = type(value)
    if value is None or kind in _JSON_LEAVES:  # most values: answered first
        return value
    if kind is float and math.isfinite(value):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for name, convert in _plan(kind):
            item = getattr(value, name)
            if convert is None:
                out[name] = item if item is None or type(item) in _JSON_LEAVES else json_safe(item)
            else:
                out.update(convert(name, item))
        return out
    if isinstance(value, (list, tuple)):
        return [v if v is None or type(v) in _JSON_LEAVES else json_safe(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [json_safe(v) for v in sorted(value, key=str)]
    if isinstance(value, float) and not math.isfinite(value):
        return "infinite" if value == math.inf else None  # +inf: "never" (time to data loss)
    if hasattr(value, "value") and hasattr(value, "name") and not isinstance(value, type):
        return json_safe(value.value)  # enums
    return value


class ToDict:
    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field (`json.dumps(obj.to_dict())` always works)."""
        result = json_safe(self)
        assert isinstance(result, dict)
        return result


@dataclass(frozen=True)
class PartitionLag(ToDict):
    """Lag of one partition for one source.

    >>> p = PartitionLag("orders", 0, committed_offset=90, planned_offset=None,
    ...                  log_start_offset=0, log_end_offset=100, last_stable_offset=None,
    ...                  lag=10, lag_seconds=4.5)
    >>> p.to_dict()["lag"]
    10
    """

    topic: str
    partition: int
    committed_offset: int | None
    planned_offset: int | None  # offset the in-flight batch will reach, if one is running
    log_start_offset: int | None
    log_end_offset: int | None
    last_stable_offset: int | None
    lag: int
    lag_seconds: float | None  # None = unknown
    new_partition: bool = False
    removed_partition: bool = False
    data_loss: bool = False
    records_lost: int = 0
    ahead_of_log: bool = False
    offset_history: tuple[int | None, ...] = ()
    start_offset: int | None = None  # before the first commit: where the query started
    lag_seconds_unknown: str | None = None  # why lag_seconds is None, when it is
    time_to_loss_seconds: float | None = None  # a lower bound; math.inf: never
    retention_seconds: float | None = None  # retention.ms, once read
    # Real-time trigger: records produced after the newest checkpoint: an UPPER bound of those
    # waiting, never lag.
    since_checkpoint: int | None = None


@dataclass(frozen=True)
class TopicLag(ToDict):
    """Totals of one topic of one source.

    `missing`: its cluster has no such topic (lag None, never 0; docs/multi-cluster.md);
    `new_topic`: the query has not read it yet.

    >>> TopicLag("orders", missing=False, partitions=()).lag
    0
    """

    topic: str
    missing: bool
    partitions: tuple[PartitionLag, ...]
    lag: int | None = 0
    max_lag: int = 0
    max_lag_partition: int | None = None
    max_lag_seconds: float | None = None  # largest KNOWN lag_seconds; None when none is known
    lag_unknown: str | None = None  # why `lag` is None, when it is
    # A missing topic: partition -> offset the checkpoint holds.
    checkpoint_offsets: Mapping[int, int] = field(default_factory=dict)
    new_topic: bool = False
    # Partitions Kafka has that a source of fixed partitions (assign) does not read.
    not_read: tuple[int, ...] = ()


@dataclass(frozen=True)
class SourceLag(ToDict):
    """One source of the query. Non-Kafka sources are listed with `is_kafka=False` and no topics.

    >>> SourceLag("0", "other", is_kafka=False, topics=()).lag
    0
    """

    source_id: str
    kind: str  # "kafka" | "other" | "none" (no offset yet)
    is_kafka: bool
    topics: tuple[TopicLag, ...]
    lag: int | None = 0  # None: a topic is missing from its cluster (see lag_unknown)
    lag_unknown: str | None = None  # why `lag` is None, when it is
    cluster: str | None = None  # bootstrap servers it is mapped to; None: the main cluster
    pattern: str | None = None


@dataclass(frozen=True)
class InFlightBatch(ToDict):
    """A planned batch (offsets/L with L > C) whose commit is not written yet.

    >>> InFlightBatch(8, started_at=100.0, age_seconds=3.0, planned_records=50).batch_id
    8
    """

    batch_id: int
    started_at: float | None  # epoch seconds (offsets/L modified time, else its batchTimestampMs)
    age_seconds: float | None
    planned_records: int  # records between the committed and the planned offsets
    # source id -> topic -> partition -> planned offset
    planned_offsets: Mapping[str, Mapping[str, Mapping[int, int]]] = field(default_factory=dict)


@dataclass(frozen=True)
class RealTime(ToDict):
    """A real-time query (Spark >= 4.1, ``trigger(realTime=...)``): it reads records as they
    arrive and writes ``offsets/N`` and ``commits/N`` together at the END of each interval, so
    no file tells how far the running interval got. Its report measures what is known: the lag
    as of the newest checkpoint (Kafka's offsets at ``checkpoint_at``, ListOffsets by
    timestamp) and, apart, the records produced since (an upper bound of those waiting).

    >>> RealTime(5.1, checkpoint_at=100.0, checkpoint_times=(100.0,)).interval_seconds
    5.1
    """

    interval_seconds: float  # the newest checkpoint's: batchTimestampMs to offsets/C written
    checkpoint_at: float  # offsets/C written: what its lag is measured at
    checkpoint_times: tuple[float | None, ...] = field(metadata=MOMENTS)  # each of history's
    checkpoint_lags: tuple[int | None, ...] = ()  # total lag as of each of history's
    produced_since: int | None = None  # records produced after checkpoint_at (upper bound)


@dataclass(frozen=True)
class HistoryBatch(ToDict):
    """A retained committed batch: the x-axis of PartitionLag.offset_history.

    `timestamp_ms`: when its offsets were reached (`batch_time_ms`); `records`: offsets it
    read since the batch before (None: the oldest)."""

    batch_id: int
    timestamp_ms: int | None
    records: int | None = None


@dataclass(frozen=True)
class Breach(ToDict):
    """When a lag threshold is crossed at the current rates (``forecast.time_to_breach``).

    >>> Breach("max_lag_records_total", 1000, 400, 12.0, growth=50.0).seconds
    12.0
    """

    threshold: str  # the Thresholds field
    limit: float
    current: float | None
    seconds: float | None  # 0: crossed; math.inf: the backlog does not grow
    growth: float | None = None
    unknown: str | None = None


@dataclass(frozen=True)
class Pace(ToDict):
    """How long the batches take against the interval they run at (``pace.pace_of``), from
    the listing's times: a batch's time is offsets/N written to commits/N written.

    >>> Pace(batch_seconds=9.2, batch_times=(8.0, 9.2), interval_seconds=10.0, ratio=0.92).ratio
    0.92
    """

    batch_seconds: float | None
    batch_times: tuple[float, ...] = ()
    batch_ids: tuple[int, ...] = ()
    batch_starts: tuple[float, ...] = field(default=(), metadata=MOMENTS)
    interval_seconds: float | None = None
    ratio: float | None = None
    trend: str | None = None
    unknown: str | None = None


@dataclass(frozen=True)
class LagReport(ToDict):
    """Everything known about a query's lag at `generated_at`.

    Rates are records/s over the batches in `history`; `production_rate` is an UPPER bound (the
    log end at the oldest batch is only known to be at least its offset).

    >>> report = compute_lag(state, snapshot)                 # doctest: +SKIP
    >>> report.total_lag, report.max_lag_seconds              # doctest: +SKIP
    (1200, 35.2)
    """

    location: str
    query_id: str | None
    committed_batch_id: int | None
    committed_at: float | None  # epoch seconds
    commit_age_seconds: float | None
    in_flight: InFlightBatch | None
    sources: tuple[SourceLag, ...]
    history: tuple[HistoryBatch, ...]
    consumption_rate: float | None
    production_rate: float | None
    catch_up_seconds: float | None
    time_lag_mode: str  # "estimate" | "exact"
    read_committed: bool
    kafka_fetched_at: float
    kafka_cluster_id: str | None
    missing_topics: tuple[str, ...]
    generated_at: float
    continuous: bool
    total_lag: int
    max_lag: int
    max_lag_topic: str | None
    max_lag_partition: int | None
    max_lag_seconds: float | None
    # The retained batches look capped by a rate limit (maxOffsetsPerTrigger): the checkpoint's
    # offsets then trail the log end at each batch time and cannot date records, so estimate
    # mode reports lag_seconds as unknown. Exact mode is unaffected.
    rate_limited: bool = False
    notes: tuple[str, ...] = ()
    schedule: Schedule | None = None
    # Several Kafka sources, none mapped to a cluster: all were measured against one cluster,
    # which is wrong when they read different ones (the checkpoint does not say).
    single_cluster_assumed: bool = False
    min_time_to_loss_seconds: float | None = None
    trigger: str = "micro-batch"  # "micro-batch" | "continuous" | "real-time"
    real_time: RealTime | None = None
    subscribe_pattern: str | None = None  # as given: the checkpoint does not record it
    assign: bool = False
    time_to_breach: tuple[Breach, ...] = ()
    pace: Pace | None = None
    # Why a number above is unknown, each only when it is: "catch_up_seconds",
    # "max_lag_seconds", "min_time_to_loss_seconds" -> the short reason (lag.py).
    unknown: Mapping[str, str] = field(default_factory=dict)

    @property
    def kafka_sources(self) -> tuple[SourceLag, ...]:
        return tuple(s for s in self.sources if s.is_kafka)

    def partitions(self) -> Iterator[PartitionLag]:
        """Every partition of every Kafka source."""
        for source in self.sources:
            for topic in source.topics:
                yield from topic.partitions


@dataclass(frozen=True)
class Run(ToDict):
    """One run: consecutive batches with no gap between them longer than the run gap."""

    first_batch_id: int
    last_batch_id: int
    batches: int
    started_at: float | None  # epoch seconds: the first batch's batchTimestampMs
    last_batch_at: float | None  # epoch seconds: the last batch's batchTimestampMs
    ended_at: float | None  # when its last batch was committed, if that is known
    start_known: bool  # False: the oldest batch read is in the run, which may be longer
    in_progress: bool  # a batch of this run is planned and not committed yet
    complete: bool | None = None
    records_left: int | None = None


@dataclass(frozen=True)
class Schedule(ToDict):
    """The job's shape as a scheduled job.

    Declared (``runs_every``), or history that looks like runs with records waiting between
    them (``looks_scheduled``: docs/scheduled-jobs.md)."""

    runs_every: float | None
    grace: float | None
    looks_scheduled: bool
    runs_seen: int  # runs in the history read
    last_run: Run | None

    @property
    def declared(self) -> bool:
        return self.runs_every is not None

    @property
    def scheduled(self) -> bool:
        """Declared, or looks like it: idling between runs is expected."""
        return self.declared or self.looks_scheduled


class Reads(enum.IntEnum):
    """How much older history beyond offsets/C a report needs to be judged as on the whole
    window (``health.reads_needed``)."""

    NOTHING = 0  # what the report has settles it
    OLDER = 1  # the next older batch (offsets/C-1 after offsets/C alone), then ask again
    WINDOW = 2  # every batch of the window, at once
