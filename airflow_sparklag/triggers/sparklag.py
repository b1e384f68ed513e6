"""Triggers that poll a wait condition (:mod:`airflow_sparklag.conditions`) from the triggerer
through one hook session (connections read once with the async API; readers and clients kept
between polls). Their events are JSON-safe, without secrets, each with a ``message``:
``success`` / ``failed`` with a ``payload`` (the condition holds / never will), ``timeout``
(``deadline``, epoch seconds, passed first), ``error`` (the check itself failed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_sparklag.check_options import OPTION_NAMES, CheckOptions
from airflow_sparklag.compact import compact
from airflow_sparklag.conditions import (
    DEFAULT_ACCEPT,
    CatchUpCondition,
    HealthCondition,
    ProgressCondition,
    WaitCondition,
)
from airflow_sparklag.hooks.sparklag import CONN_FIELDS, ConnectionIds, SparkLagHook
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.operators import metrics
from airflow_sparklag.redact import redact_url

_DEFAULT_ACCEPT_NAMES = tuple(health.value for health in DEFAULT_ACCEPT)


class _ConditionTrigger(BaseTrigger):
    """Polls one condition every ``poll_interval`` seconds until done, failed or ``deadline``.

    The connections travel as ONE dict, ``connections`` (``ConnectionIds.to_dict()``); each id
    may also be given as its own keyword argument (``kafka_config_id=...``), as before."""

    def __init__(
        self,
        location: str,
        *,
        connections: Mapping[str, Any] | None = None,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        metric_name: str | None = None,
        **connection_ids: Any,
    ) -> None:
        super().__init__()
        self.metric_name = metric_name  # the job's name in metrics (the sensor's)
        self.location = location
        self.connections = ConnectionIds.from_dict({**(connections or {}), **connection_ids})
        unknown = set(connection_ids) - set(CONN_FIELDS)
        if unknown:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(unknown))}")
        self.poll_interval = float(poll_interval)
        self.deadline = deadline

    condition: WaitCondition  # set by each trigger's __init__

    def serialize(self) -> tuple[str, dict[str, Any]]:
        condition = self.condition.to_dict()  # the condition's own arguments follow
        del condition["kind"], condition["location"]
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "location": self.location,
                "connections": self.connections.to_dict(),
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "metric_name": self.metric_name,
                **condition,
            },
        )

    def _hook(self) -> SparkLagHook:
        return self.connections.hook()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        try:
            await hook.aget_conn()
            condition = self.condition
            while True:
                probe = await asyncio.to_thread(hook.probe, condition)
                if self.metric_name:
                    metrics.emit_probe(self.metric_name, condition.kind, probe.payload)
                if probe.failed:
                    yield self._event("failed", probe.message, probe.payload)
                    return
                if probe.done:
                    yield self._event("success", probe.message, probe.payload)
                    return
                if self.deadline is not None and time.time() + self.poll_interval > self.deadline:
                    yield self._event("timeout", f"gave up at the deadline: {probe.message}")
                    return
                self.log.info("%s; next check in %gs", probe.message, self.poll_interval)
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            if self.metric_name:
                metrics.emit_failure(self.metric_name, type(exc).__name__)
            failure = f"checking {redact_url(self.location)} failed: {type(exc).__name__}: {exc}"
            yield self._event("error", hook.scrub(failure))
        finally:
            await asyncio.to_thread(hook.close)

    def _event(
        self, status: str, message: str, payload: dict[str, Any] | None = None
    ) -> TriggerEvent:
        # The location as given may hold credentials (s3a://KEY:SECRET@...): never in an event.
        location = redact_url(self.location)
        event: dict[str, Any] = {"status": status, "message": message, "location": location}
        if payload is not None:  # a check result in its bounded form (airflow_sparklag.compact)
            event["payload"] = compact(payload)
        return TriggerEvent(event)


class SparkLagTrigger(_ConditionTrigger):
    """Fires when the query's health is one of ``accept`` (default OK); fails on
    ``fail_fast`` verdicts (default DATA_LOSS and STOPPED, never STOPPED for a scheduled job;
    ``fail_on_data_loss`` / ``fail_on_stopped`` clear them).

    >>> SparkLagTrigger("s3a://b/ck/orders", thresholds={"max_lag_records_total": 1000},
    ...                 kafka_config_id="kafka_default", aws_conn_id="aws_default",
    ...                 poll_interval=60).serialize()[0]
    'airflow_sparklag.triggers.sparklag.SparkLagTrigger'
    """

    condition: HealthCondition

    def __init__(
        self,
        location: str,
        *,
        options: Mapping[str, Any] | None = None,
        accept: Sequence[str] = _DEFAULT_ACCEPT_NAMES,
        fail_on_data_loss: bool = True,
        fail_fast: Sequence[str] | None = None,
        fail_on_stopped: bool = True,
        **kwargs: Any,
    ) -> None:
        # The check options travel as ONE dict (``CheckOptions.to_dict()``); each may also be
        # given as its own keyword argument (thresholds=..., history=...), as before.
        given = {name: kwargs.pop(name) for name in OPTION_NAMES if name in kwargs}
        super().__init__(location, **kwargs)
        checked = CheckOptions.from_dict({**(options or {}), **given})
        if fail_fast is None:
            fail_fast = ["DATA_LOSS"] * fail_on_data_loss + ["STOPPED"] * fail_on_stopped
        self.condition = HealthCondition(
            location,
            checked,
            tuple(Health(str(a).upper()) for a in accept),
            tuple(Health(str(f).upper()) for f in fail_fast),
        )


class SparkCheckpointProgressTrigger(_ConditionTrigger):
    """Fires when the query commits a batch newer than ``after_batch_id`` and/or after
    ``after_commit_time`` (epoch seconds)."""

    condition: ProgressCondition

    def __init__(
        self,
        location: str,
        *,
        after_batch_id: int | None = None,
        after_commit_time: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location, **kwargs)
        self.condition = ProgressCondition(
            location,
            None if after_batch_id is None else int(after_batch_id),
            None if after_commit_time is None else float(after_commit_time),
        )


class SparkKafkaCatchUpTrigger(_ConditionTrigger):
    """Fires when the committed offsets reach, on every partition, the first offset produced at
    or after ``target_time_ms`` (everything produced before it has been processed)."""

    condition: CatchUpCondition

    def __init__(
        self,
        location: str,
        *,
        target_time_ms: int,
        topics: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location, **kwargs)
        self.condition = CatchUpCondition(
            location, int(target_time_ms), tuple(topics) if topics else None
        )
