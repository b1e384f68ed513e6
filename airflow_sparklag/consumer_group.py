"""Publish a Spark query's committed offsets to a Kafka consumer group that nobody consumes
with: Spark never commits its progress to Kafka, so group-based tools (Burrow,
kafka-consumer-groups, kafka-lag-exporter) cannot see a Spark query otherwise::

    export = export_offsets({"bootstrap.servers": "b:9092"}, "spark-orders", {"orders": {0: 42}})
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_sparklag.errors import ConsumerGroupActive, KafkaError, KafkaUnavailable
from airflow_sparklag.kafka import KafkaOffsetsClient, error_name

log = logging.getLogger(__name__)

# Group states in which nobody consumes: safe to commit offsets for.
_IDLE_STATES = frozenset({"EMPTY", "DEAD", "UNKNOWN"})


@dataclass(frozen=True)
class ConsumerGroupExport:
    group_id: str
    offsets: Mapping[str, Mapping[int, int]]  # topic -> partition -> committed offset
    lag: Mapping[str, Mapping[int, int]] | None  # log end - committed, when log ends were read

    def to_dict(self) -> dict[str, Any]:
        def by_topic(counts: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
            return {
                t: {str(p): n for p, n in sorted(ps.items())} for t, ps in sorted(counts.items())
            }

        lag = self.lag
        return {
            "group_id": self.group_id,
            "offsets": by_topic(self.offsets),
            "lag": None if lag is None else by_topic(lag),
            "total_lag": None
            if lag is None
            else sum(n for ps in lag.values() for n in ps.values()),
        }


# A coordinator that is not ready yet: a broker that never had a group creates
# __consumer_offsets on the first group request and answers these meanwhile (NOT_COORDINATOR
# with an empty reason, "ConsumerGroupDescribe: ", on Kafka 4).
_COORDINATOR_NOT_READY = frozenset(
    {"COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR"}
)
_RETRY_PAUSE = 0.25  # seconds between two attempts while the coordinator is not ready


def _not_ready(exc: BaseException) -> bool:
    """A coordinator error, or a Kafka error carrying neither a code nor a reason."""
    if error_name(exc) in _COORDINATOR_NOT_READY:
        return True
    error: Any = exc.args[0] if exc.args else None
    return hasattr(error, "str") and not error_name(exc) and not str(error.str()).strip()


def _group_request(client: KafkaOffsetsClient, what: str, send: Callable[[float], Any]) -> Any:
    """The result of a group request, sent again while the coordinator is not ready, all
    within the client's timeout. ``send(seconds)`` sends it and returns its future."""
    deadline = time.monotonic() + client.timeout
    last = ""
    while True:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:  # only after a retry: the first attempt has the whole timeout
                raise KafkaUnavailable(what)
            outcome = client.outcomes({"request": send(remaining)}, what, deadline)["request"]
        except KafkaUnavailable:
            if not last:
                raise
            raise KafkaUnavailable(
                f"Kafka {client.bootstrap_servers}: the group coordinator was not ready for "
                f"{what} within {client.timeout:g} s (last answer: {last}); try again once the "
                "cluster has settled"
            ) from None
        if not isinstance(outcome, BaseException):
            return outcome
        if not _not_ready(outcome):
            raise client.errors.translate(outcome, what) from outcome
        last = client.errors.describe(outcome)
        log.info("%s: coordinator not ready (%s); retrying", what, last)
        time.sleep(min(_RETRY_PAUSE, max(0.0, deadline - time.monotonic())))


def _ask_group(client: KafkaOffsetsClient, what: str, group_id: str, call: str, arg: Any) -> Any:
    """The answer for ``group_id`` of ``AdminClient.<call>([arg])``."""
    admin = client.admin()
    return _group_request(
        client,
        f"{what} group {group_id!r}",
        lambda seconds: getattr(admin, call)([arg], request_timeout=seconds)[group_id],
    )


def export_offsets(
    kafka_config: Mapping[str, Any],
    group_id: str,
    offsets: Mapping[str, Mapping[int, int]],
    *,
    timeout: float = 15.0,
    log_ends: Mapping[str, Mapping[int, int]] | None = None,
) -> ConsumerGroupExport:
    """Commit ``offsets`` (topic -> partition -> NEXT offset to read) to ``group_id``;
    :class:`ConsumerGroupActive` when the group has members. ``log_ends`` (topic -> partition
    -> log end offset) adds the lag that group tools will show. Three requests (describe,
    commit, read back), each within ``timeout`` seconds.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from airflow_sparklag.session import Session

    if not group_id:
        raise ValueError("group_id is required")
    # A session of its own: its Kafka client is built (and closed) there, like everywhere else.
    with Session(kafka_config=kafka_config, kafka_timeout=timeout) as session:
        client = session.kafka
        assert isinstance(client, KafkaOffsetsClient)  # built from kafka_config: it has admin()
        servers = client.bootstrap_servers
        group = _ask_group(client, "describe", group_id, "describe_consumer_groups", group_id)
        state = getattr(group.state, "name", str(group.state)).upper()
        members = len(group.members or [])
        if members or state not in _IDLE_STATES:
            raise ConsumerGroupActive(
                f"consumer group {group_id!r} on {servers} is {state} with {members} active "
                "member(s): committing offsets would move a live consumer's position. Use a "
                "group name that only this export writes to (e.g. 'spark-<query name>')."
            )
        partitions = [
            TopicPartition(topic, int(p), int(o))
            for topic, parts in sorted(offsets.items())
            for p, o in sorted(parts.items())
        ]
        if not partitions:
            raise ValueError(f"no offsets to commit to group {group_id!r}")
        request = ConsumerGroupTopicPartitions(group_id, partitions)
        altered = _ask_group(
            client, "commit offsets to", group_id, "alter_consumer_group_offsets", request
        )
        for tp in altered.topic_partitions or []:
            if tp.error is not None:
                raise KafkaError(
                    f"group {group_id!r} on {servers}: commit of {tp.topic}[{tp.partition}] "
                    f"failed: {tp.error}"
                )
        query = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        )
        listed = _ask_group(
            client, "read offsets of", group_id, "list_consumer_group_offsets", query
        )
    read_back = {(tp.topic, tp.partition): int(tp.offset) for tp in listed.topic_partitions or []}
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
