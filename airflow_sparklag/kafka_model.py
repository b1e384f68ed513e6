"""What the core asks Kafka and what Kafka answers: the :class:`KafkaOffsets` port (its client:
``kafka.py``; the tests' in-memory cluster: tests/fakes.py) and the values it returns.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from airflow_sparklag.errors import InvalidParameter


@dataclasses.dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition at ``KafkaSnapshot.fetched_at``."""

    log_start: int
    log_end: int  # high watermark
    last_stable: int | None  # LSO, only when read_committed was asked


@dataclasses.dataclass(frozen=True)
class KafkaSnapshot:
    """Offsets of every partition of some topics, fetched at one moment."""

    partitions: Mapping[str, Mapping[int, PartitionOffsets]]  # topic -> partition -> offsets
    missing_topics: frozenset[str]
    fetched_at: float  # epoch seconds
    cluster_id: str | None
    # The subscribePattern the cluster's topics were matched against, and the topics that
    # matched it (their offsets are in `partitions` too); None: no pattern was asked for.
    pattern: str | None = None
    pattern_topics: frozenset[str] = dataclasses.field(default_factory=frozenset)


@dataclasses.dataclass(frozen=True)
class TopicRetention:
    """What deletes a topic's records: ``retention.ms`` and ``retention.bytes`` (None:
    unlimited, Kafka's -1) and whether ``cleanup.policy`` deletes at all (compact only:
    records are never deleted by age or size, only superseded by key)."""

    retention_ms: int | None
    retention_bytes: int | None
    deletes: bool

    @property
    def seconds(self) -> float | None:
        if not self.deletes or self.retention_ms is None:
            return None
        return self.retention_ms / 1000.0

    @classmethod
    def from_entries(cls, entries: Mapping[str, Any]) -> TopicRetention:
        """From DescribeConfigs' ConfigEntry objects (name -> entry)."""

        def number(name: str) -> int | None:  # None: missing, unreadable or Kafka's -1 (unlimited)
            try:
                value = int(entries[name].value)
            except (KeyError, AttributeError, TypeError, ValueError):
                return None
            return None if value < 0 else value

        policy = entries.get("cleanup.policy")
        policies = {p.strip() for p in str(getattr(policy, "value", None) or "delete").split(",")}
        return cls(number("retention.ms"), number("retention.bytes"), "delete" in policies)


def subscribe_regex(pattern: str) -> re.Pattern[str]:
    """Spark's ``subscribePattern`` as a Python regex. Spark (its default Admin-based offset
    reader) subscribes to every topic the pattern is FOUND in (``findFirstIn``, not a match of
    the whole name); anchor it (``^orders\\..*$``) to mean the whole name. Java syntax that
    Python does not read (``\\p{Alpha}``, ``(?<name>...)``) is refused, naming the pattern."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidParameter(
            f"cannot read {pattern!r} as a regular expression ({exc}); give the pattern in the "
            "syntax Java and Python share",
            "subscribe_pattern",
        ) from None


class KafkaOffsets(Protocol):
    """What the core asks a Kafka cluster; every call is bounded in time and raises the typed
    Kafka errors. A :class:`~airflow_sparklag.session.Session` hands one out per cluster::

        with Session(kafka_config={"bootstrap.servers": "broker:9092"}) as session:
            kafka: KafkaOffsets = session.kafka
            end = kafka.snapshot(["orders"]).partitions["orders"][0].log_end
    """

    @property
    def bootstrap_servers(self) -> str:
        """The cluster's bootstrap servers, as messages name it (no secret)."""

    def snapshot(
        self, topics: Iterable[str], *, read_committed: bool = False, pattern: str | None = None
    ) -> KafkaSnapshot:
        """Log start, log end (and the last stable offset when ``read_committed``) of every
        partition of ``topics``, and of every topic ``pattern`` (a subscribePattern) is found
        in; topics the cluster lacks are in ``missing_topics``."""

    def offsets_for_time(
        self, topics: Iterable[str], timestamp_ms: int
    ) -> dict[str, dict[int, int]]:
        """Each partition's first offset stamped at or after ``timestamp_ms``; its log end
        when every record is older. Raises ``KafkaError`` when a topic does not exist."""

    def record_timestamps(
        self, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int | None]:
        """The timestamp (ms) of the record at each (topic, partition) offset; None when there
        is no record to time (at or past the log end, out of range, not read in time)."""

    def retention(self, topics: Iterable[str]) -> dict[str, TopicRetention | None]:
        """Each topic's retention; None for a topic whose settings could not be read."""

    def close(self) -> None:
        """Let go of connections (the session closes the clients it built)."""
