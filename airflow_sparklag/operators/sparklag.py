"""Operators: check a Spark query's lag and health, fail on a breach or branch on the verdict."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseBranchOperator, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_sparklag.hooks.sparklag import SparkLagHook, breach_message, health_name

if TYPE_CHECKING:
    from airflow.sdk import Context

# Connection ids are templated too, so that one DAG can serve several clusters via params.
CONN_FIELDS = ("kafka_config_id", "aws_conn_id", "webhdfs_conn_id")
# Verdicts that fail a SparkLagCheckOperator unless told otherwise. UNKNOWN (no batch committed
# yet, no Kafka source) is not a breach by default: there is nothing to measure.
DEFAULT_FAIL_ON = ("LAGGING", "STALLED", "STOPPED", "REWIND", "DATA_LOSS")
# Numeric health for dashboards: 0 healthy .. 5 data loss, -1 unknown.
HEALTH_CODES = {
    "OK": 0,
    "LAGGING": 1,
    "STALLED": 2,
    "STOPPED": 3,
    "REWIND": 4,
    "DATA_LOSS": 5,
    "UNKNOWN": -1,
}


def _stats() -> Any:
    try:
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # Airflow < 3.1
        from airflow.stats import Stats  # type: ignore[no-redef]
    return Stats


def fail_on_names(fail_on: Iterable[str] | str) -> set[str]:
    """Upper-case verdict names from ``fail_on`` (a rendered template may give one string)."""
    values = [fail_on] if isinstance(fail_on, str) else list(fail_on)
    return {str(value).upper() for value in values}


def metric_safe(name: str) -> str:
    """StatsD-safe metric segment: ``orders-v2/eu`` -> ``orders_v2_eu``."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "job"


class _LagCheckBase:
    """Arguments and the check shared by the check and branch operators."""

    hook_params = ("kafka_config_id", "aws_conn_id", "webhdfs_conn_id")

    def _init_check(
        self,
        location: str,
        kafka_config_id: str,
        aws_conn_id: str | None,
        webhdfs_conn_id: str | None,
        thresholds: dict[str, Any] | None,
        history: int,
        exact_time_lag: bool,
        read_committed: bool | None,
    ) -> None:
        self.location = location
        self.kafka_config_id = kafka_config_id
        self.aws_conn_id = aws_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.thresholds = thresholds
        self.history = history
        self.exact_time_lag = exact_time_lag
        self.read_committed = read_committed

    @property
    def hook(self) -> SparkLagHook:
        return SparkLagHook(
            kafka_config_id=self.kafka_config_id,
            aws_conn_id=self.aws_conn_id,
            webhdfs_conn_id=self.webhdfs_conn_id,
        )

    def _check(self) -> Any:
        hook = self.hook
        try:
            return hook.check(
                self.location,
                thresholds=self.thresholds,
                history=self.history,
                exact_time_lag=self.exact_time_lag,
                read_committed=self.read_committed,
            )
        except Exception as exc:
            scrubbed = hook.scrub(str(exc))
            if scrubbed != str(exc):
                # Drop the original (its text holds a secret of a connection).
                raise AirflowException(f"{type(exc).__name__}: {scrubbed}") from None
            raise
        finally:
            hook.close()


class SparkLagCheckOperator(_LagCheckBase, BaseOperator):
    """Checks a Spark query's lag and health; fails when the verdict is in ``fail_on``.

    The result (``CheckResult.to_dict()``: report and verdict) is the task's XCom return value,
    also on failure. Gauges go to Airflow's metrics (StatsD/OpenTelemetry, when enabled) as
    ``<metric_prefix>.<job>.total_lag``, ``.max_lag``, ``.max_lag_seconds``,
    ``.commit_age_seconds`` and ``.health`` (0 OK, 1 lagging, ... 5 data loss, -1 unknown).

    Example::

        SparkLagCheckOperator(
            task_id="orders_lag",
            location="s3a://lake/checkpoints/orders",
            kafka_config_id="kafka_prod",
            aws_conn_id="aws_lake",
            thresholds={"max_lag_records_total": 50_000, "max_commit_age_seconds": 600},
        )

    On a breach it raises ``AirflowFailException`` (no retries: the lag will not change by
    retrying at once) with the verdict and the worst partitions, e.g.
    ``/ck/orders: LAGGING: total lag 61200 > 50000. Total lag 61200. orders[2] lag=40100 ...``.
    """

    template_fields: Sequence[str] = (
        *CONN_FIELDS,
        "location",
        "thresholds",
        "fail_on",
        "metric_name",
    )
    template_fields_renderers = {"thresholds": "json"}
    ui_color = "#f4e3c1"

    def __init__(
        self,
        *,
        location: str,
        kafka_config_id: str = "kafka_default",
        aws_conn_id: str | None = None,
        webhdfs_conn_id: str | None = None,
        thresholds: dict[str, Any] | None = None,
        fail_on: Iterable[str] = DEFAULT_FAIL_ON,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
        emit_metrics: bool = True,
        metric_prefix: str = "sparklag",
        metric_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._init_check(
            location,
            kafka_config_id,
            aws_conn_id,
            webhdfs_conn_id,
            thresholds,
            history,
            exact_time_lag,
            read_committed,
        )
        self.fail_on = fail_on
        self.emit_metrics = emit_metrics
        self.metric_prefix = metric_prefix
        self.metric_name = metric_name

    def execute(self, context: Context) -> dict[str, Any]:
        result = self._check()
        payload = result.to_dict()
        health = health_name(result.verdict.health)
        self.log.info(
            "%s: %s (%s); total lag %s, max lag %s s",
            self.location,
            health,
            result.verdict.reason,
            result.report.total_lag,
            result.report.max_lag_seconds,
        )
        if self.emit_metrics:
            self._emit(result, health)
        if health in fail_on_names(self.fail_on):
            context["ti"].xcom_push(key="return_value", value=payload)
            raise AirflowFailException(breach_message(result))
        return payload

    def _emit(self, result: Any, health: str) -> None:
        stats = _stats()
        name = metric_safe(self.metric_name or self.task_id)
        prefix = f"{self.metric_prefix}.{name}"
        report = result.report
        tags = {"job": name, "health": health}
        values = {
            "total_lag": report.total_lag,
            "max_lag": report.max_lag,
            "max_lag_seconds": report.max_lag_seconds,
            "commit_age_seconds": report.commit_age_seconds,
            "health": HEALTH_CODES.get(health, -1),
        }
        for metric, value in values.items():
            if value is not None:
                stats.gauge(f"{prefix}.{metric}", float(value), tags=tags)


class SparkLagBranchOperator(_LagCheckBase, BaseBranchOperator):
    """Follows the task(s) that match the query's health verdict.

    Each ``*_task_id`` may be a task id or a list; a verdict with no task given follows
    ``default_task_id`` (and without one the task fails). The check result goes to XCom under
    the key ``report``.

    Example::

        SparkLagBranchOperator(
            task_id="decide",
            location="/data/checkpoints/orders",
            thresholds={"max_lag_records_total": 1000},
            healthy_task_id="deploy_now",
            lagging_task_id="wait_for_catch_up",
            default_task_id="abort",
        )
    """

    template_fields: Sequence[str] = (*CONN_FIELDS, "location", "thresholds")
    template_fields_renderers = {"thresholds": "json"}
    ui_color = "#f4e3c1"

    def __init__(
        self,
        *,
        location: str,
        kafka_config_id: str = "kafka_default",
        aws_conn_id: str | None = None,
        webhdfs_conn_id: str | None = None,
        thresholds: dict[str, Any] | None = None,
        healthy_task_id: str | list[str] | None = None,
        lagging_task_id: str | list[str] | None = None,
        stalled_task_id: str | list[str] | None = None,
        stopped_task_id: str | list[str] | None = None,
        rewind_task_id: str | list[str] | None = None,
        data_loss_task_id: str | list[str] | None = None,
        unknown_task_id: str | list[str] | None = None,
        default_task_id: str | list[str] | None = None,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._init_check(
            location,
            kafka_config_id,
            aws_conn_id,
            webhdfs_conn_id,
            thresholds,
            history,
            exact_time_lag,
            read_committed,
        )
        self.branches = {
            "OK": healthy_task_id,
            "LAGGING": lagging_task_id,
            "STALLED": stalled_task_id,
            "STOPPED": stopped_task_id,
            "REWIND": rewind_task_id,
            "DATA_LOSS": data_loss_task_id,
            "UNKNOWN": unknown_task_id,
        }
        self.default_task_id = default_task_id
        if not any(self.branches.values()) and not default_task_id:
            raise ValueError(f"{self.task_id}: give at least one *_task_id or default_task_id")

    def choose_branch(self, context: Context) -> str | list[str]:
        result = self._check()
        health = health_name(result.verdict.health)
        context["ti"].xcom_push(key="report", value=result.to_dict())
        chosen = self.branches.get(health) or self.default_task_id
        self.log.info("%s: %s (%s) -> %s", self.location, health, result.verdict.reason, chosen)
        if not chosen:
            raise AirflowFailException(
                f"{self.task_id}: no task for verdict {health} and no default_task_id: "
                + breach_message(result)
            )
        return chosen
