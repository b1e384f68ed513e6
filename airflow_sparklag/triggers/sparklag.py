"""Triggers that poll a checkpoint from the triggerer until a condition holds.

Each poll is one call of a :class:`~airflow_sparklag.hooks.sparklag.SparkLagHook` probe, run in a
worker thread (the storage and Kafka clients block). Connections are read once with the async
connection API; the hook, its checkpoint readers and its Kafka client are reused between polls.

Events (JSON-safe):

- ``{"status": "success", "message": ..., "payload": {...}}``: the condition holds;
- ``{"status": "failed", "message": ..., "payload": {...}}``: it never will (e.g. data loss);
- ``{"status": "timeout", "message": ...}``: ``deadline`` (epoch seconds) passed first;
- ``{"status": "error", "message": ...}``: the check itself failed (storage, Kafka, config).
  Messages never contain a connection's secrets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_sparklag.hooks.sparklag import DEFAULT_ACCEPT, Probe, SparkLagHook


class _CheckpointPollTrigger(BaseTrigger):
    """Polls one checkpoint every ``poll_interval`` seconds until done, failed or ``deadline``."""

    def __init__(
        self,
        location: str,
        *,
        kafka_config_id: str = "kafka_default",
        aws_conn_id: str | None = None,
        webhdfs_conn_id: str | None = None,
        poll_interval: float = 30.0,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.location = location
        self.kafka_config_id = kafka_config_id
        self.aws_conn_id = aws_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline

    def _condition_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    def _probe(self, hook: SparkLagHook) -> Probe:
        raise NotImplementedError

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "location": self.location,
                "kafka_config_id": self.kafka_config_id,
                "aws_conn_id": self.aws_conn_id,
                "webhdfs_conn_id": self.webhdfs_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                **self._condition_kwargs(),
            },
        )

    def _hook(self) -> SparkLagHook:
        return SparkLagHook(
            kafka_config_id=self.kafka_config_id,
            aws_conn_id=self.aws_conn_id,
            webhdfs_conn_id=self.webhdfs_conn_id,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        try:
            await hook.aget_conn()
            while True:
                probe = await asyncio.to_thread(self._probe, hook)
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
            message = hook.scrub(f"{type(exc).__name__}: {exc}")
            yield self._event("error", f"checking {self.location} failed: {message}")
        finally:
            await asyncio.to_thread(hook.close)

    def _event(
        self, status: str, message: str, payload: dict[str, Any] | None = None
    ) -> TriggerEvent:
        event: dict[str, Any] = {"status": status, "message": message, "location": self.location}
        if payload is not None:
            event["payload"] = payload
        return TriggerEvent(event)


class SparkLagTrigger(_CheckpointPollTrigger):
    """Fires when the query's health is one of ``accept`` (default OK); fails on DATA_LOSS.

    >>> SparkLagTrigger("s3a://b/ck/orders", thresholds={"max_lag_records_total": 1000},
    ...                 kafka_config_id="kafka_default", aws_conn_id="aws_default",
    ...                 poll_interval=60).serialize()[0]
    'airflow_sparklag.triggers.sparklag.SparkLagTrigger'
    """

    def __init__(
        self,
        location: str,
        *,
        thresholds: dict[str, Any] | None = None,
        accept: Sequence[str] = DEFAULT_ACCEPT,
        fail_on_data_loss: bool = True,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location, **kwargs)
        self.thresholds = dict(thresholds) if thresholds else None
        self.accept = [str(a) for a in accept]
        self.fail_on_data_loss = fail_on_data_loss
        self.history = int(history)
        self.exact_time_lag = exact_time_lag
        self.read_committed = read_committed

    def _condition_kwargs(self) -> dict[str, Any]:
        return {
            "thresholds": self.thresholds,
            "accept": self.accept,
            "fail_on_data_loss": self.fail_on_data_loss,
            "history": self.history,
            "exact_time_lag": self.exact_time_lag,
            "read_committed": self.read_committed,
        }

    def _probe(self, hook: SparkLagHook) -> Probe:
        return hook.probe_health(
            self.location,
            thresholds=self.thresholds,
            accept=self.accept,
            fail_on_data_loss=self.fail_on_data_loss,
            history=self.history,
            exact_time_lag=self.exact_time_lag,
            read_committed=self.read_committed,
        )


class SparkCheckpointProgressTrigger(_CheckpointPollTrigger):
    """Fires when the query commits a batch newer than ``after_batch_id`` and/or after
    ``after_commit_time`` (epoch seconds)."""

    def __init__(
        self,
        location: str,
        *,
        after_batch_id: int | None = None,
        after_commit_time: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location, **kwargs)
        self.after_batch_id = None if after_batch_id is None else int(after_batch_id)
        self.after_commit_time = None if after_commit_time is None else float(after_commit_time)

    def _condition_kwargs(self) -> dict[str, Any]:
        return {"after_batch_id": self.after_batch_id, "after_commit_time": self.after_commit_time}

    def _probe(self, hook: SparkLagHook) -> Probe:
        return hook.probe_progress(
            self.location,
            after_batch_id=self.after_batch_id,
            after_commit_time=self.after_commit_time,
        )


class SparkKafkaCatchUpTrigger(_CheckpointPollTrigger):
    """Fires when the committed offsets reach, on every partition, the first offset produced at
    or after ``target_time_ms`` (everything produced before it has been processed)."""

    def __init__(
        self,
        location: str,
        *,
        target_time_ms: int,
        topics: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(location, **kwargs)
        self.target_time_ms = int(target_time_ms)
        self.topics = list(topics) if topics else None

    def _condition_kwargs(self) -> dict[str, Any]:
        return {"target_time_ms": self.target_time_ms, "topics": self.topics}

    def _probe(self, hook: SparkLagHook) -> Probe:
        return hook.probe_catch_up(
            self.location, target_time=self.target_time_ms, topics=self.topics
        )
