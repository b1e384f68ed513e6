"""Verdicts and thresholds: ``Health`` (with its severity and exit code), ``Thresholds``,
``HealthVerdict``. Imports nothing of ours but the report types."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from airflow_sparklag.model.report import ToDict


class Health(str, Enum):
    """Verdicts, from healthy to worst, each carrying its policy (severity, exit code, breach,
    metric: the table in docs/lag-and-health.md#health). UNKNOWN ("cannot tell") sits outside
    the scale, below OK, as Burrow's NOTFOUND does: "the worst of" never picks it.

    >>> Health.parse("lagging").exit_code, Health.STOPPED.severity > Health.LAGGING.severity
    (1, True)
    """

    OK = "OK"
    LAGGING = "LAGGING"
    STALLED = "STALLED"
    STOPPED = "STOPPED"
    REWIND = "REWIND"
    DATA_LOSS = "DATA_LOSS"
    UNKNOWN = "UNKNOWN"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @property
    def exit_code(self) -> int:
        return 3 if self is Health.UNKNOWN else min(_SEVERITY[self], 2)

    @property
    def is_breach(self) -> bool:
        return _SEVERITY[self] > 0

    @property
    def metric_value(self) -> int:
        """The number dashboards get: a stable contract."""
        return _SEVERITY[self]

    @classmethod
    def worst(cls, verdicts: Iterable[Health]) -> Health | None:
        """The most severe breach, else UNKNOWN ("cannot tell" never passes as OK), else OK.

        >>> Health.worst([Health.UNKNOWN, Health.STOPPED, Health.OK]), Health.worst([Health.OK])
        (<Health.STOPPED: 'STOPPED'>, <Health.OK: 'OK'>)
        """
        return max(verdicts, key=lambda h: 0.5 if h is cls.UNKNOWN else h.severity, default=None)

    @classmethod
    def parse(cls, name: object) -> Health:
        """The verdict named ``name``, in any case (``"lagging"`` -> ``Health.LAGGING``)."""
        if isinstance(name, str) and name.strip().upper() in cls.__members__:
            return cls[name.strip().upper()]
        valid = ", ".join(h.value for h in cls)
        raise ValueError(f"unknown verdict {name!r}; valid verdicts: {valid}")


# The members are declared from healthy to worst; UNKNOWN, the last, sits outside the scale.
_SEVERITY = {h: -1 if h is Health.UNKNOWN else i for i, h in enumerate(Health)}

# Verdicts that fail a check operator unless told otherwise. UNKNOWN (no batch committed yet,
# no Kafka source) is not a breach by default: there is nothing to measure.
DEFAULT_FAIL_ON: tuple[Health, ...] = tuple(h for h in Health if h.is_breach)
# The threshold-free STOPPED rule: a query with records waiting that has not planned a batch
# for this many of its own busy-batch intervals, and at least this long, has stopped. Too
# short a history to measure that pace: past this long, the verdict is UNKNOWN, never OK.
STOPPED_BUSY_INTERVALS = 5
STOPPED_MIN_IDLE_SECONDS = 30.0
# A real-time query checkpoints every interval, records or not: this many intervals without
# one (and STOPPED_MIN_IDLE_SECONDS) while records wait, and it has stopped.
REAL_TIME_STOPPED_INTERVALS = 3
# Imminent data loss at defaults: warn when retention would delete an unread record within a
# quarter of the topic's retention.ms, and at most 6 h ahead (Thresholds.loss_bound).
DEFAULT_LOSS_RATIO = 0.25
DEFAULT_LOSS_HORIZON_SECONDS = 6 * 3600.0
# CLI exit codes beyond the verdicts' own (Health.exit_code, 0-3).
EXIT_CHECK_FAILED = 4  # the check itself failed: bad checkpoint, unreachable storage or Kafka
EXIT_USAGE = 64  # sysexits EX_USAGE: wrong arguments or configuration


def _checked_limit(name: str, value: object, *, optional: bool, count: bool) -> int | float | None:
    """``value`` as a plain finite number >= 0 (a whole int for a count), else ValueError."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"threshold {name} must be a number, got {type(value).__name__} {value!r}")
    number: int | float = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(number):
        raise ValueError(f"threshold {name} must be a finite number, got {value!r}")
    if number < 0:
        raise ValueError(f"threshold {name} must be >= 0, got {value!r}")
    if count and isinstance(number, float):
        # Counts arrive as floats from CLI flags and JSON ("--window 5" -> 5.0); the window is
        # a slice bound, so keep them whole ints (a float crashed every rule with a TypeError).
        if not number.is_integer():
            raise ValueError(f"threshold {name} must be a whole number, got {value!r}")
        number = int(number)
    return number


@dataclass(frozen=True)
class Thresholds(ToDict):
    """Named limits of the health rules (docs/lag-and-health.md#check-options); None: off.

    >>> t = Thresholds.from_dict({"max_lag_seconds": 300, "allowed_lag": 1})
    >>> t.max_lag_seconds, t.window
    (300, 10)
    """

    max_lag_records_per_partition: int | None = None
    max_lag_records_total: int | None = None
    max_lag_seconds: float | None = None
    max_commit_age_seconds: float | None = None
    max_in_flight_seconds: float | None = None
    min_time_to_loss_seconds: float | None = None  # None: the defaults (loss_bound); 0: off
    min_time_to_loss_ratio: float | None = None
    min_time_to_breach_seconds: float | None = None
    max_batch_time_ratio: float | None = None
    # Transactional topics keep a commit marker after the last record.
    allowed_lag: int = 0
    window: int = 10  # batches of history the trend rules look at
    # Fewer batches: trend rules stay silent (a lone old commit never decides STOPPED).
    min_window: int = 3

    def __post_init__(self) -> None:
        # Strict: rendered Airflow text is read by airflow_sparklag.params before it gets here.
        for f in fields(self):
            count = str(f.type).startswith("int")  # the fields typed int are counts
            value = _checked_limit(
                f.name, getattr(self, f.name), optional=f.default is None, count=count
            )
            object.__setattr__(self, f.name, value)
        if self.min_time_to_loss_ratio is not None and self.min_time_to_loss_ratio > 1:
            raise ValueError(
                "threshold min_time_to_loss_ratio is a share of the topic's retention, from 0 "
                f"(off) to 1, got {self.min_time_to_loss_ratio!r}"
            )
        if self.window < 2 or self.min_window < 2:
            raise ValueError("window and min_window must be >= 2 batches")
        if self.min_window > self.window:
            raise ValueError("min_window must not exceed window")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> Thresholds:
        """Build from a plain dict (DAG params, JSON); unknown names are an error."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown threshold(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**values)

    def loss_bound(self, retention_seconds: float | None) -> float:
        """How soon before retention deletes an unread record the time_to_data_loss rule
        warns, for a topic of ``retention_seconds``: the smaller of the bound and the share."""
        seconds, ratio = self.min_time_to_loss_seconds, self.min_time_to_loss_ratio
        if seconds is not None and ratio is None:
            return seconds  # the bound the user gave, alone
        absolute = DEFAULT_LOSS_HORIZON_SECONDS if seconds is None else seconds
        share = DEFAULT_LOSS_RATIO if ratio is None else ratio
        if retention_seconds is None or math.isinf(retention_seconds):
            return 0.0
        return min(absolute, share * retention_seconds)


@dataclass(frozen=True)
class PartitionRef:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass(frozen=True)
class RuleResult(ToDict):
    """What one rule found."""

    health: Health
    rule: str
    reason: str
    partitions: tuple[PartitionRef, ...] = ()


@dataclass(frozen=True)
class HealthVerdict(ToDict):
    """The verdict: worst rule that fired, a short reason and the partitions to look at.

    `findings` lists every rule that fired, worst first.

    >>> verdict = evaluate(report, Thresholds(max_lag_seconds=600))   # doctest: +SKIP
    >>> verdict.health, verdict.reason                                  # doctest: +SKIP
    (<Health.LAGGING: 'LAGGING'>, 'lag 912 s > 600 s on orders:3')
    """

    health: Health
    reason: str
    rule: str
    partitions: tuple[PartitionRef, ...] = ()
    findings: tuple[RuleResult, ...] = field(default=())


# A query without a Kafka source: nothing to measure (status and history say the same).
NO_KAFKA_SOURCE = HealthVerdict(Health.UNKNOWN, "the query has no Kafka source", "no_kafka_source")
