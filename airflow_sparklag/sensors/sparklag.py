"""Sensors on a Spark query's checkpoint: healthy, progressing, caught up.

All three run deferrable (the default comes from ``[operators] default_deferrable``), or as
classic sensors in ``poke`` / ``reschedule`` mode. Deferrable sensors check once in the worker
first and only defer when the condition does not hold yet. ``timeout`` and ``soft_fail`` behave
as for any sensor in every mode; the value pushed to XCom is the last probe's payload.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    BaseSensorOperator,
    PokeReturnValue,
    conf,
)

from airflow_sparklag import params
from airflow_sparklag.compact import compact
from airflow_sparklag.conditions import CatchUpCondition, HealthCondition, ProgressCondition
from airflow_sparklag.operators import metrics
from airflow_sparklag.operators.base import CheckOptionsMixin, SparkLagHookMixin

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_sparklag.conditions import Probe, WaitCondition


def _batch_id(name: str, value: Any) -> int | None:
    """A batch id, or -1 (before the first batch), or None."""
    return params.optional_count(name, value, minimum=-1)


class _CheckpointSensor(SparkLagHookMixin, BaseSensorOperator):
    """Shared plumbing: one condition, one probe per poke, one trigger when deferred."""

    template_fields: Sequence[str] = ("location",)
    ui_color = "#f4e3c1"
    trigger_class: ClassVar[str]  # the name of its trigger in triggers/sparklag.py

    def __init__(
        self,
        *,
        location: str,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poke_interval: float = 30,
        metric_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.location = self.given("location", location, params.location)
        self.deferrable = deferrable
        self.metric_name = metric_name

    def condition(self) -> WaitCondition:
        """The condition the rendered parameters describe (read once per try)."""
        raise NotImplementedError

    @cached_property
    def _condition(self) -> WaitCondition:
        return self.read_params(self.condition)

    def _probe(self, context: Context) -> Probe:
        condition = self._condition
        job = metrics.job_name(self, self.metric_name)
        try:
            probe = self.run_core(lambda: self.hook.probe(condition), close=False)
        except Exception as exc:
            metrics.emit_failure(job, type(exc).__name__)
            raise
        metrics.emit_probe(job, condition.kind, probe.payload)
        # what goes to XCom: a check result in its bounded form (airflow_sparklag.compact)
        return dataclasses.replace(probe, payload=compact(probe.payload))

    def _trigger(self, deadline: float) -> BaseTrigger:
        """The sensor's trigger (``trigger_class``, in triggers/sparklag.py): the condition's
        ``to_dict()`` is its arguments."""
        from airflow_sparklag.triggers import sparklag as triggers

        condition = self._condition.to_dict()
        del condition["kind"]
        trigger: type[BaseTrigger] = getattr(triggers, self.trigger_class)
        return trigger(
            **condition,
            connections=self.connection_ids().to_dict(),
            poll_interval=self.poke_interval,
            deadline=deadline,
            metric_name=metrics.job_name(self, self.metric_name),
        )

    def _fail(self, message: str, error: type[Exception] = AirflowFailException) -> NoReturn:
        if self.soft_fail:
            self.log.warning("%s", message)  # Airflow 3 logs a skip without its reason
            raise AirflowSkipException(message)
        raise error(message)

    def poke(self, context: Context) -> PokeReturnValue:
        probe = self._probe(context)
        if probe.failed:
            raise AirflowFailException(probe.message)  # soft_fail turns it into a skip
        self.log.info("%s", probe.message)
        return PokeReturnValue(is_done=probe.done, xcom_value=probe.payload if probe.done else None)

    def execute(self, context: Context) -> Any:
        # Read the parameters before the first poke: BaseSensorOperator turns a failure inside
        # poke() into a skip under soft_fail/never_fail, and a value it cannot read must fail.
        _ = self._condition
        self.connection_ids()
        if not self.deferrable:
            return super().execute(context)
        probe = self._probe(context)
        if probe.failed:
            self._fail(probe.message)
        if probe.done:
            self.log.info("%s", probe.message)
            return probe.payload
        self.log.info("%s; deferring", probe.message)
        self.close_hook()  # the triggerer opens its own session
        self.defer(
            trigger=self._trigger(time.time() + self.timeout),
            method_name="execute_complete",
            timeout=datetime.timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        status = event.get("status")
        message = str(event.get("message", ""))
        if status == "success":
            self.log.info("%s", message)
            return event.get("payload")
        if status == "failed":
            self._fail(message)
        if status == "timeout":
            self._fail(message, AirflowSensorTimeout)
        raise AirflowException(message or f"unexpected trigger event {event!r}")


class SparkLagSensor(CheckOptionsMixin, _CheckpointSensor):
    """Waits until a Spark query is healthy: its verdict is one of ``accept`` (default ``OK``).

    Fails at once (``AirflowFailException``, a skip with ``soft_fail``) on ``DATA_LOSS`` (the
    query read past records that retention already deleted: waiting will not bring them back)
    and on ``STOPPED`` (records wait and the query has stopped committing: ``fail_on_stopped``),
    never on STOPPED for a scheduled job (``runs_every``, see docs/scheduled-jobs.md) or one
    that looks scheduled. ``fail_fast`` (verdict names) replaces both switches. Pushes the last
    ``CheckResult.to_dict()`` to XCom.

    Example: docs/operators/spark-lag-sensor.md.
    """

    trigger_class = "SparkLagTrigger"
    template_fields: Sequence[str] = ("location", "accept", "fail_fast")

    def __init__(
        self,
        *,
        location: str,
        accept: Sequence[str] | str = ("OK",),
        fail_on_data_loss: bool = True,
        fail_on_stopped: bool = True,
        fail_fast: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location=location, **kwargs)
        self.accept = self.given("accept", accept, params.health_names)
        self.fail_on_data_loss = self.given("fail_on_data_loss", fail_on_data_loss, params.boolean)
        self.fail_on_stopped = self.given("fail_on_stopped", fail_on_stopped, params.boolean)
        self.fail_fast = self.given("fail_fast", fail_fast, params.health_names)

    def condition(self) -> HealthCondition:
        from airflow_sparklag.model.verdict import Health

        options = self.check_options()
        accept = params.health_names("accept", self.accept)
        if not accept:
            raise params.invalid("accept", "give at least one verdict to wait for, e.g. OK")
        if self.fail_fast is None:
            on_loss = params.boolean("fail_on_data_loss", self.fail_on_data_loss)
            on_stop = params.boolean("fail_on_stopped", self.fail_on_stopped)
            fail_fast = (Health.DATA_LOSS,) * on_loss + (Health.STOPPED,) * on_stop
        else:
            fail_fast = params.health_names("fail_fast", self.fail_fast)
        return HealthCondition(
            params.location("location", self.location).text, options, accept, fail_fast
        )

    def _probe(self, context: Context) -> Probe:
        """A probe whose check failed, or whose verdict fails the sensor at once, is recorded
        in XCom as a check's result is (the "Streaming lag" page shows the job)."""
        from airflow_sparklag.operators.sparklag import push_check_failed

        try:
            probe = super()._probe(context)
        except Exception as exc:
            push_check_failed(context, str(self.location), exc, "return_value")
            raise
        if probe.failed:
            context["ti"].xcom_push(key="return_value", value=probe.payload)
        return probe


class SparkCheckpointProgressSensor(_CheckpointSensor):
    """Waits until the query commits a batch newer than ``after_batch_id`` and/or later than
    ``after_commit_time`` (datetime, ISO text, epoch seconds or ms); with neither, until any
    batch is committed. A checkpoint that does not exist yet counts as "not yet".

    Use it after (re)starting a job: "the new version has processed at least one batch".
    Pushes ``{"committed_batch_id", "committed_at", "offsets", ...}`` to XCom.

    Example: docs/operators/checkpoint-progress-sensor.md.
    """

    trigger_class = "SparkCheckpointProgressTrigger"
    template_fields: Sequence[str] = ("location", "after_batch_id", "after_commit_time")

    def __init__(
        self,
        *,
        location: str,
        after_batch_id: int | str | None = None,
        after_commit_time: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location=location, **kwargs)
        self.after_batch_id = self.given("after_batch_id", after_batch_id, _batch_id)
        self.after_commit_time = self.given("after_commit_time", after_commit_time, params.moment)

    def condition(self) -> ProgressCondition:
        return ProgressCondition(
            params.location("location", self.location).text,
            _batch_id("after_batch_id", self.after_batch_id),
            params.moment("after_commit_time", self.after_commit_time),
        )


class SparkKafkaCatchUpSensor(_CheckpointSensor):
    """Waits until the query has processed everything produced to Kafka before ``target_time``:
    on every partition, committed offset >= ListOffsets(forTimestamp ``target_time``).

    ``target_time`` is a datetime, ISO text or epoch seconds/ms; it defaults to the end of the
    run's data interval, so a daily DAG waits until the stream has covered "yesterday".
    ``topics`` limits the check (default: every topic in the checkpoint).

    Example: docs/operators/kafka-catch-up-sensor.md.
    """

    trigger_class = "SparkKafkaCatchUpTrigger"
    template_fields: Sequence[str] = ("location", "target_time", "topics")

    def __init__(
        self,
        *,
        location: str,
        target_time: Any = "{{ data_interval_end }}",
        topics: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location=location, **kwargs)
        self.target_time = self.given("target_time", target_time, params.moment)
        self.topics = self.given("topics", topics, params.strings)

    def condition(self) -> CatchUpCondition:
        seconds = params.moment("target_time", self.target_time)
        if seconds is None:
            raise params.invalid(
                "target_time", "rendered to nothing; give a datetime, ISO text or epoch seconds"
            )
        topics = tuple(params.strings("topics", self.topics)) or None
        return CatchUpCondition(
            params.location("location", self.location).text, int(seconds * 1000), topics
        )
