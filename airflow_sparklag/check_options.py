"""The options of a check: how a checkpoint is judged (``CheckOptions``), declared once."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_sparklag import params
from airflow_sparklag.kafka import subscribe_regex
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.runs import SCHEDULED_HISTORY, default_grace

DEFAULT_HISTORY = 10  # batches of history a check reads (the trend rules' window)


def _period(name: str, value: Any) -> float | None:
    """A duration in seconds (> 0 for the period, >= 0 for the grace), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {value!r} (see params.py)")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (name == "runs_every" and seconds == 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


@dataclass(frozen=True)
class CheckOptions:
    """How to judge a checkpoint: THE options of a check. The CLI's flags, the operators' and
    sensors' keyword arguments and the triggers' serialized ``options`` are made from these
    fields (each declared once with its reader, flag and doc line: ``params.option``; their
    meaning: docs/lag-and-health.md, "Check options", and docs/scheduled-jobs.md).
    ``read_committed=None`` is read_uncommitted: the checkpoint does not record the isolation.

    >>> CheckOptions(Thresholds(max_lag_seconds=300), history=5).to_dict()["history"]
    5
    >>> CheckOptions(runs_every=3600).grace
    900.0
    """

    thresholds: Thresholds = params.option(  # noqa: RUF009 (a dataclasses.field)
        factory=Thresholds, read=params.thresholds, flag=None, doc="health thresholds"
    )
    history: int = params.option(
        DEFAULT_HISTORY,
        read=params.batches,
        flag="--history",
        doc="batches of history to evaluate (default 10)",
    )
    exact_time_lag: bool = params.option(
        False,
        read=params.boolean,
        flag="--exact-time-lag",
        doc="time lag from the record at the committed offset",
    )
    read_committed: bool | None = params.option(
        None,
        read=params.optional_boolean,
        flag="--read-committed",
        doc="measure against the last stable offset (transactional topics)",
    )
    runs_every: float | None = params.option(
        None,
        read=params.optional_positive_duration,
        flag="--runs-every",
        doc="a scheduled job (AvailableNow/Once) started this often: 1h, 90m, 30s",
    )
    run_grace: float | None = params.option(
        None,
        read=params.optional_duration,
        flag="--run-grace",
        doc="with --runs-every: how late a run may start (default max(5m, 25% of the period))",
    )
    subscribe_pattern: str | None = params.option(
        None,
        read=params.optional_text,
        flag="--subscribe-pattern",
        doc="the query's subscribePattern: topics it finds that it has not read yet wait "
        "from their start",
    )
    assign: bool = params.option(
        False,
        read=params.boolean,
        flag="--assign",
        doc="the query reads fixed partitions (Spark's assign): partitions the checkpoint "
        "lacks are not counted",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Thresholds):
            raise TypeError("CheckOptions.thresholds must be a Thresholds (see params.py)")
        if isinstance(self.history, bool) or not isinstance(self.history, int):
            raise TypeError(f"history must be a whole number of batches, got {self.history!r}")
        if self.history < 1:
            raise ValueError(f"history must be >= 1 batch, got {self.history}")
        object.__setattr__(self, "runs_every", _period("runs_every", self.runs_every))
        object.__setattr__(self, "run_grace", _period("run_grace", self.run_grace))
        if self.run_grace is not None and self.runs_every is None:
            raise params.invalid(
                "run_grace", "is the grace of a scheduled job: give runs_every too"
            )
        if self.subscribe_pattern is not None:
            if not isinstance(self.subscribe_pattern, str):
                raise TypeError(f"subscribe_pattern must be text, got {self.subscribe_pattern!r}")
            subscribe_regex(self.subscribe_pattern)  # refused here, before any request
            if self.assign:
                raise params.invalid(
                    "assign", "a query reads by assign or by subscribe_pattern, not both"
                )

    @property
    def grace(self) -> float | None:
        """The grace after ``runs_every``: ``run_grace``, or the documented default."""
        if self.runs_every is None:
            return None
        return self.run_grace if self.run_grace is not None else default_grace(self.runs_every)

    @property
    def history_to_read(self) -> int:
        """Batches to read: ``history``, and for a scheduled job enough to see its last run."""
        if self.runs_every is None:
            return self.history
        return max(self.history, SCHEDULED_HISTORY)

    @classmethod
    def build(cls, **values: Any) -> CheckOptions:
        """From plain Python values (a dict of thresholds is checked by ``Thresholds``)."""
        thresholds = values.pop("thresholds", None)
        if not isinstance(thresholds, Thresholds):
            thresholds = Thresholds.from_dict(thresholds)
        return cls(thresholds, **values)

    def to_dict(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in OPTION_NAMES}
        thresholds = self.thresholds.to_dict().items()
        values["thresholds"] = {k: v for k, v in thresholds if v is not None}
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> CheckOptions:
        return cls.build(**{k: v for k, v in values.items() if k in OPTION_NAMES})


# The fields of CheckOptions, in order: the keyword arguments every check entry point takes.
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(CheckOptions))
