"""Publish a Spark query's committed offsets to a Kafka consumer group.

Spark never commits its progress to Kafka, so group-based tools (Burrow, kafka-consumer-groups,
kafka-lag-exporter) cannot see a Spark query. Committing the checkpoint's offsets to a group
that nobody consumes with makes them see it::

    from airflow_sparklag.consumer_group import export_offsets

    export = export_offsets(
        {"bootstrap.servers": "broker:9092"},
        "spark-orders",
        {"orders": {0: 1042, 1: 998}},
    )
    print(export.to_dict())

A group with active members is refused: committing under a live consumer would move ITS
position. The offsets are read back after the commit and must be equal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_sparklag.errors import ConsumerGroupActive, KafkaError, KafkaUnavailable

__all__ = ["ConsumerGroupActive", "ConsumerGroupExport", "export_offsets"]

log = logging.getLogger(__name__)

# Group states in which nobody consumes: safe to commit offsets for.
_IDLE_STATES = frozenset({"EMPTY", "DEAD", "UNKNOWN"})


@dataclass(frozen=True)
class ConsumerGroupExport:
    """What was committed to a group, read back from Kafka."""

    group_id: str
    offsets: Mapping[str, Mapping[int, int]]  # topic -> partition -> committed offset
    lag: Mapping[str, Mapping[int, int]] | None  # log end - committed, when log ends were read

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "offsets": {
                t: {str(p): o for p, o in sorted(ps.items())}
                for t, ps in sorted(self.offsets.items())
            },
            "lag": (
                {
                    t: {str(p): n for p, n in sorted(ps.items())}
                    for t, ps in sorted(self.lag.items())
                }
                if self.lag is not None
                else None
            ),
            "total_lag": (
                sum(n for ps in self.lag.values() for n in ps.values())
                if self.lag is not None
                else None
            ),
        }


def _admin(config: Mapping[str, Any], timeout: float) -> Any:
    from confluent_kafka.admin import AdminClient

    settings: dict[str, Any] = {
        "socket.timeout.ms": int(timeout * 1000),
        "logger": logging.getLogger("airflow_sparklag.kafka.librdkafka"),
    }
    settings.update(config)
    return AdminClient(settings)


def _result(future: Any, timeout: float, what: str, servers: str) -> Any:
    import concurrent.futures

    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError as exc:
        raise KafkaUnavailable(
            f"Kafka {servers} did not answer {what} within {timeout:g} s"
        ) from exc
    except Exception as exc:
        detail = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        raise KafkaError(f"Kafka {servers}: {what} failed: {detail}") from exc


def group_state(admin: Any, group_id: str, timeout: float, servers: str) -> tuple[str, int]:
    """The group's state name and member count (a group never used is DEAD / 0)."""
    futures = admin.describe_consumer_groups([group_id], request_timeout=timeout)
    description = _result(futures[group_id], timeout, f"describe group {group_id!r}", servers)
    state = getattr(description.state, "name", str(description.state)).upper()
    return state, len(description.members or [])


def export_offsets(
    kafka_config: Mapping[str, Any],
    group_id: str,
    offsets: Mapping[str, Mapping[int, int]],
    *,
    timeout: float = 15.0,
    log_ends: Mapping[str, Mapping[int, int]] | None = None,
) -> ConsumerGroupExport:
    """Commit ``offsets`` (topic -> partition -> NEXT offset to read) to ``group_id``.

    Refuses (:class:`ConsumerGroupActive`) when the group has members. ``log_ends`` (topic ->
    partition -> log end offset) adds the lag that group tools will show.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    if not group_id:
        raise ValueError("group_id is required")
    servers = str(kafka_config.get("bootstrap.servers", "?"))
    admin = _admin(kafka_config, timeout)
    state, members = group_state(admin, group_id, timeout, servers)
    if members or state not in _IDLE_STATES:
        raise ConsumerGroupActive(
            f"consumer group {group_id!r} on {servers} is {state} with {members} active "
            "member(s): committing offsets would move a live consumer's position. Use a group "
            "name that only this export writes to (e.g. 'spark-<query name>')."
        )
    partitions = [
        TopicPartition(topic, int(p), int(o))
        for topic, parts in sorted(offsets.items())
        for p, o in sorted(parts.items())
    ]
    if not partitions:
        raise ValueError(f"no offsets to commit to group {group_id!r}")
    request = ConsumerGroupTopicPartitions(group_id, partitions)
    futures = admin.alter_consumer_group_offsets([request], request_timeout=timeout)
    altered = _result(futures[group_id], timeout, f"commit offsets to group {group_id!r}", servers)
    for tp in altered.topic_partitions or []:
        if tp.error is not None:
            raise KafkaError(
                f"group {group_id!r}: commit of {tp.topic}[{tp.partition}] failed: {tp.error}"
            )
    read_back = read_group_offsets(admin, group_id, partitions, timeout, servers)
    wanted = {(tp.topic, tp.partition): tp.offset for tp in partitions}
    if read_back != wanted:
        differ = sorted(k for k in wanted if read_back.get(k) != wanted[k])
        raise KafkaError(
            f"group {group_id!r}: offsets read back differ from those committed for {differ}"
        )
    committed: dict[str, dict[int, int]] = {}
    for (topic, p), o in sorted(read_back.items()):
        committed.setdefault(topic, {})[p] = o
    lag = None
    if log_ends is not None:
        lag = {
            topic: {p: max(0, int(log_ends[topic][p]) - o) for p, o in parts.items()}
            for topic, parts in committed.items()
            if topic in log_ends
        }
    log.info("committed %d partition offsets to group %s", len(partitions), group_id)
    return ConsumerGroupExport(group_id=group_id, offsets=committed, lag=lag)


def read_group_offsets(
    admin: Any, group_id: str, partitions: list[Any], timeout: float, servers: str
) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    query = ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(tp.topic, tp.partition) for tp in partitions]
    )
    futures = admin.list_consumer_group_offsets([query], request_timeout=timeout)
    listed = _result(futures[group_id], timeout, f"read offsets of group {group_id!r}", servers)
    return {(tp.topic, tp.partition): int(tp.offset) for tp in listed.topic_partitions or []}
