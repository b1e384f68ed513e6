"""Operators: check a Spark query's lag and health, fail on a breach or branch on the verdict."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    BaseBranchOperator,
    BaseOperator,
)

from airflow_sparklag import params
from airflow_sparklag.compact import compact
from airflow_sparklag.model.result import CheckResult, check_document
from airflow_sparklag.model.verdict import DEFAULT_FAIL_ON as _FAIL_ON
from airflow_sparklag.operators import metrics
from airflow_sparklag.operators.base import CheckOptionsMixin
from airflow_sparklag.render import breach_message, seconds_text

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_sparklag.location import Location

# Verdicts that fail a SparkLagCheckOperator unless told otherwise. UNKNOWN (no batch committed
# yet, no Kafka source) is not a breach by default: there is nothing to measure.
DEFAULT_FAIL_ON = tuple(h.value for h in _FAIL_ON)


def fail_on_names(fail_on: Iterable[str] | str) -> set[str]:
    """Verdict names from ``fail_on`` in any form a template renders (checked, upper case)."""
    return {h.value for h in params.health_names("fail_on", fail_on)}


def push_check_failed(context: Context, location: str, exc: BaseException, key: str) -> dict:
    """Record a check that failed (no checkpoint there, Kafka unreachable, a bad parameter)
    under the XCom ``key`` a result would have: a failed task leaves no return value, and the
    "Streaming lag" page and alerts must still see the job. The task's error text is already
    scrubbed of the connections' secrets (``run_core``); the location and the text lose any
    URL userinfo here (``s3a://KEY:SECRET@bucket/...``)."""
    from airflow_sparklag.redact import redact_url, scrub

    failed = xcom_document(CheckResult.failed(redact_url(location), scrub(str(exc), ())))
    context["ti"].xcom_push(key=key, value=failed)
    return failed


def xcom_document(result: CheckResult) -> dict[str, Any]:
    """What a check task leaves in XCom: the JSON document of its one check, bounded
    (``compact``), as ``sparklag status --json`` prints it (docs/json.md)."""
    return compact(check_document("check", [result]))


class _LagCheckBase(CheckOptionsMixin):
    """Arguments and the check shared by the check and branch operators: ``location``, the
    connection ids and ``CheckOptions``' fields (``thresholds``, ``history``, ...)."""

    def __init__(
        self,
        *,
        location: str,
        emit_metrics: bool = True,
        metric_prefix: str = metrics.PREFIX,
        metric_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.location = self.given("location", location, params.location)
        self.emit_metrics = emit_metrics
        self.metric_prefix = metric_prefix
        self.metric_name = metric_name

    def _read_check(self) -> tuple[Location, Any]:
        return params.location("location", self.location), self.check_options()

    def _check(self, location: Location, options: Any) -> CheckResult:
        """The check, with its metrics: gauges of the result, or a failure by reason."""
        job = metrics.job_name(self, self.metric_name)
        try:
            result = self.run_core(lambda: self.hook.check(location, options=options))
        except Exception as exc:
            if self.emit_metrics:
                metrics.emit_failure(job, _reason(exc), self.metric_prefix)
            raise
        if self.emit_metrics:
            metrics.emit_result(job, result.to_dict(), self.metric_prefix)
        return result


def _reason(exc: BaseException) -> str:
    """The core error's class name (kept in the task error's text), else the exception's."""
    text = str(exc)
    head = text.split(":", 1)[0]
    return head if head.isidentifier() else type(exc).__name__


class SparkLagCheckOperator(_LagCheckBase, BaseOperator):
    """Checks a Spark query's lag and health; fails when the verdict is in ``fail_on``
    (``AirflowFailException``: the lag will not change by retrying at once).

    The result (docs/json.md) is the XCom return value, also on failure (``CHECK_FAILED``
    and its error when the check itself failed); gauges go to Airflow's metrics
    (docs/metrics.md). Example: docs/operators/spark-lag-check.md.
    """

    template_fields: Sequence[str] = ("location", "fail_on", "metric_name")

    def __init__(
        self, *, location: str, fail_on: Iterable[str] | str = DEFAULT_FAIL_ON, **kwargs: Any
    ) -> None:
        super().__init__(location=location, **kwargs)
        self.fail_on = self.given("fail_on", fail_on, params.health_names)

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            location, options = self.read_params(self._read_check)
            fail_on = self.read_params(lambda: fail_on_names(self.fail_on))
            result = self._check(location, options)
        except Exception as exc:
            push_check_failed(context, str(self.location).strip(), exc, "return_value")
            raise
        payload = xcom_document(result)
        health = result.verdict.health.value
        report = result.report
        self.log.info(
            "%s: %s (%s); total lag %s records, time lag %s",
            location,
            health,
            result.verdict.reason,
            report.total_lag if report else "unknown",
            seconds_text(report.max_lag_seconds if report else None).replace("-", "unknown"),
        )
        if health in fail_on:
            context["ti"].xcom_push(key="return_value", value=payload)
            raise AirflowFailException(breach_message(result))
        return payload


class SparkLagBranchOperator(_LagCheckBase, BaseBranchOperator):
    """Follows the task(s) that match the query's health verdict.

    Each ``*_task_id`` may be a task id or a list; a verdict with no task given follows
    ``default_task_id`` (without one the task fails). ``check_failed_task_id`` is followed
    when the check itself fails (storage or Kafka unreachable, ...); without it that fails
    the task. The result (``CHECK_FAILED`` if the check failed) goes to XCom under ``report``.
    Example: docs/operators/spark-lag-branch.md.
    """

    template_fields: Sequence[str] = ("location", "metric_name")

    def __init__(
        self,
        *,
        location: str,
        healthy_task_id: str | list[str] | None = None,
        lagging_task_id: str | list[str] | None = None,
        stalled_task_id: str | list[str] | None = None,
        stopped_task_id: str | list[str] | None = None,
        rewind_task_id: str | list[str] | None = None,
        data_loss_task_id: str | list[str] | None = None,
        unknown_task_id: str | list[str] | None = None,
        default_task_id: str | list[str] | None = None,
        check_failed_task_id: str | list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location=location, **kwargs)
        self.check_failed_task_id = check_failed_task_id
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
        location = str(self.location).strip()
        try:
            where, options = self.read_params(self._read_check)
            location = where.text
            result = self._check(where, options)
        except Exception as exc:
            push_check_failed(context, location, exc, "report")
            # a refusal or a bad parameter (AirflowFailException) has no branch
            branch = isinstance(exc, AirflowException) and not isinstance(exc, AirflowFailException)
            if not (branch and self.check_failed_task_id):
                raise
            self.log.warning(
                "%s: the check failed (%s) -> %s", location, exc, self.check_failed_task_id
            )
            return self.check_failed_task_id
        health = result.verdict.health.value
        context["ti"].xcom_push(key="report", value=xcom_document(result))
        chosen = self.branches.get(health) or self.default_task_id
        self.log.info("%s: %s (%s) -> %s", location, health, result.verdict.reason, chosen)
        if not chosen:
            raise AirflowFailException(
                f"{self.task_id}: no task for verdict {health} and no default_task_id: "
                + breach_message(result)
            )
        return chosen
