"""One task that checks many Spark queries: given checkpoints and/or every one under a prefix."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, BaseOperator

from airflow_sparklag import params
from airflow_sparklag.compact import compact
from airflow_sparklag.model.result import CHECK_FAILED, CheckResult, document, summary_of
from airflow_sparklag.operators import metrics
from airflow_sparklag.operators.base import CheckOptionsMixin
from airflow_sparklag.operators.sparklag import DEFAULT_FAIL_ON, fail_on_names

if TYPE_CHECKING:
    from airflow.sdk import Context

XCOM_RESULTS = ("summary", "failing", "all")
# How many failing jobs the failure message names (the XCom has all of them).
MESSAGE_JOBS = 10


class SparkLagFleetCheckOperator(CheckOptionsMixin, BaseOperator):
    """Checks every given checkpoint (``locations``) and every one found under ``prefix``.

    One task, one Kafka snapshot for all topics, checkpoints read in parallel (at most
    ``max_workers`` at once) with 2 storage requests per checkpoint on S3 (see docs/fleet.md).
    A job *fails* when its verdict is in ``fail_on`` or, with ``fail_on_error``, when its
    checkpoint cannot be read; the task fails when more than ``max_failing`` jobs fail.

    XCom (return value, pushed on failure too): the fleet's JSON document (docs/json.md), its
    ``failing`` jobs by default (``xcom_results="all"``: every job's result; ``"summary"``: no
    jobs). Example: docs/operators/spark-lag-fleet-check.md.
    """

    template_fields: Sequence[str] = (
        "locations",
        "prefix",
        "fail_on",
        "fail_on_error",
        "max_failing",
    )
    template_fields_renderers = {"thresholds": "json", "locations": "json"}

    def __init__(
        self,
        *,
        locations: Sequence[str] | str = (),
        prefix: str | Sequence[str] | None = None,
        fail_on: Iterable[str] | str = DEFAULT_FAIL_ON,
        fail_on_error: bool | str = True,
        max_failing: int | str = 0,
        max_depth: int = 4,
        max_workers: int = 16,
        xcom_results: str = "failing",
        emit_metrics: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if xcom_results not in XCOM_RESULTS:
            raise ValueError(f"xcom_results must be one of {XCOM_RESULTS}, not {xcom_results!r}")
        self.locations = self.given("locations", locations, params.locations)
        self.prefix = self.given("prefix", prefix, params.locations)
        self.fail_on = self.given("fail_on", fail_on, params.health_names)
        self.fail_on_error = self.given("fail_on_error", fail_on_error, params.boolean)
        self.max_failing = self.given("max_failing", max_failing, params.count)
        self.max_depth = max_depth
        self.max_workers = max_workers
        self.xcom_results = xcom_results
        self.emit_metrics = emit_metrics

    def _read(self) -> dict[str, Any]:
        return {
            "locations": params.locations("locations", self.locations),
            "prefixes": params.locations("prefix", self.prefix),
            "options": self.check_options(),
            "fail_on": fail_on_names(self.fail_on),
            "fail_on_error": params.boolean("fail_on_error", self.fail_on_error),
            "max_failing": params.count("max_failing", self.max_failing),
        }

    def execute(self, context: Context) -> dict[str, Any]:
        given = self.read_params(self._read)
        locations, prefixes = given["locations"], given["prefixes"]
        if not locations and not prefixes:
            raise AirflowFailException(f"{self.task_id}: give locations and/or a prefix")
        hook = self.hook
        try:
            with hook.fleet_checker(
                locations,
                prefix=prefixes or None,
                options=given["options"],
                max_depth=self.max_depth,
                max_workers=self.max_workers,
            ) as checker:
                results = checker.check()
                requests = checker.storage_requests
        except Exception as exc:
            scrubbed = hook.scrub(f"{type(exc).__name__}: {exc}")
            raise AirflowException(f"{self.task_id}: the fleet check failed: {scrubbed}") from None
        finally:
            self.close_hook()
        # A location may hold credentials (s3a://KEY:SECRET@..., refused by the session); it
        # names its job in XCom, metrics and the failure message: without them.
        results = [replace(result, location=hook.scrub(result.location)) for result in results]
        if self.emit_metrics:  # one job per checkpoint, named by its location
            for result in results:
                metrics.emit_result(metrics.location_job(result.location), result.to_dict())
        if prefixes and not results:
            raise AirflowFailException(f"no checkpoint found under {', '.join(prefixes)}")

        fail_on, max_failing = given["fail_on"], given["max_failing"]
        failing = [
            _failing(result, hook.scrub)
            for result in results
            if result.verdict.health.value in fail_on
            or (result.error is not None and given["fail_on_error"])
        ]
        summary = {**summary_of(results), "storage_requests": requests}
        every = results if self.xcom_results == "all" else []
        payload = document("fleet", (compact(r.to_dict()) for r in every), summary)
        if self.xcom_results != "summary":
            payload["failing"] = failing
        self.log.info(
            "%d jobs checked (%s); %d failing; %d storage requests",
            len(results),
            ", ".join(f"{h} {n}" for h, n in summary["health"].items()),
            len(failing),
            requests,
        )
        if len(failing) > max_failing:
            context["ti"].xcom_push(key="return_value", value=payload)
            named = "; ".join(
                f"{f['location']}: {f['health']} ({f['error'] or f['reason']})"
                for f in failing[:MESSAGE_JOBS]
            )
            more = f" and {len(failing) - MESSAGE_JOBS} more" if len(failing) > MESSAGE_JOBS else ""
            raise AirflowFailException(
                f"{len(failing)} of {len(results)} jobs failing (at most {max_failing} "
                f"allowed): {named}{more}"
            )
        return payload


def _failing(result: CheckResult, scrub: Callable[[str], str]) -> dict[str, Any]:
    """A failing job's entry in the fleet's XCom (``failing``)."""
    report, error = result.report, result.error
    return {
        "location": result.location,
        "health": CHECK_FAILED if error is not None else result.verdict.health.value,
        "reason": scrub(result.verdict.reason),
        "total_lag": report.total_lag if report else None,
        "max_lag_seconds": report.max_lag_seconds if report else None,
        "error": scrub(error) if error is not None else None,
    }
