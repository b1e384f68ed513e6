"""The one in-memory Kafka cluster of the unit tests: a fake of the ``KafkaOffsets`` port that a
real Session is handed (``Session(kafka_client=FakeKafka(...))``). Integration tests ask real
brokers (tests/integration/test_kafka_client.py); this answers what those tests show Kafka
answers, from a few numbers.

mypy checks it against the port (``mypy tests/fakes.py``: the assignment at the bottom).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from airflow_sparklag.kafka_model import (
    KafkaOffsets,
    KafkaSnapshot,
    PartitionOffsets,
    TopicRetention,
    subscribe_regex,
)

# When the record at (topic, partition, offset) was written, epoch seconds; None: unknown.
Written = Callable[[str, int, int], float | None]


def never_written(topic: str, partition: int, offset: int) -> float | None:
    return None


def written_steadily(ends: Mapping[int, int], rate: float, last_at: float) -> Written:
    """``rate`` records a second in each partition, the last one (log end - 1) at ``last_at``."""
    return lambda topic, partition, offset: last_at - (ends[partition] - 1 - offset) / rate


def written_in_stretches(writes: Mapping[int, float]) -> Written:
    """Records written in stretches, in every partition alike: ``writes`` maps the first offset
    of each stretch to the time its records were written (None before the first)."""
    marks = sorted(writes.items())

    def written(topic: str, partition: int, offset: int) -> float | None:
        at = [when for first, when in marks if first <= offset]
        return at[-1] if at else None

    return written


class Call(NamedTuple):
    """A read the cluster was asked for."""

    name: str  # "snapshot", "offsets_for_time", "record_timestamps"
    topics: tuple[str, ...]  # record_timestamps: the topic of each partition asked
    timestamp_ms: int | None = None  # offsets_for_time's


@dataclass
class FakeKafka:
    """A cluster of ``topics`` (topic -> partition -> log end; log start 0 unless ``starts``
    says; the last stable offset is the log end) whose record at an offset was written at
    ``written(topic, partition, offset)``. Snapshots are taken at ``now``. ``calls`` lists the
    reads asked, in order (retention is not one: its settings are not offsets or records).

    >>> kafka = FakeKafka({"t": {0: 10}})
    >>> kafka.snapshot(["t", "gone"]).missing_topics
    frozenset({'gone'})
    """

    topics: dict[str, dict[int, int]]
    written: Written = never_written
    starts: dict[str, dict[int, int]] = field(default_factory=dict)
    now: float = 1_700_000_000.0
    cluster_id: str | None = "c"
    bootstrap_servers: str = "fake:9092"
    calls: list[Call] = field(default_factory=list)
    closed: bool = False

    def asked(self, name: str) -> list[Call]:
        """The calls of one kind."""
        return [call for call in self.calls if call.name == name]

    def snapshot(
        self, topics: Iterable[str], *, read_committed: bool = False, pattern: str | None = None
    ) -> KafkaSnapshot:
        asked = list(topics)
        self.calls.append(Call("snapshot", tuple(asked)))
        matched: frozenset[str] = frozenset()
        if pattern is not None:
            regex = subscribe_regex(pattern)
            matched = frozenset(t for t in self.topics if regex.search(t))
        partitions = {
            t: {
                p: PartitionOffsets(self.starts.get(t, {}).get(p, 0), end, end)
                for p, end in self.topics[t].items()
            }
            for t in sorted(set(asked) | matched)
            if t in self.topics
        }
        missing = frozenset(set(asked) - set(self.topics))
        return KafkaSnapshot(partitions, missing, self.now, self.cluster_id, pattern, matched)

    def offsets_for_time(
        self, topics: Iterable[str], timestamp_ms: int
    ) -> dict[str, dict[int, int]]:
        """The first offset written at or after ``timestamp_ms``, else the log end."""
        asked = list(topics)
        self.calls.append(Call("offsets_for_time", tuple(asked), timestamp_ms))

        def first_at(topic: str, partition: int, end: int) -> int:
            for offset in range(end):
                at = self.written(topic, partition, offset)
                if at is not None and at * 1000 >= timestamp_ms:
                    return offset
            return end

        return {
            t: {p: first_at(t, p, end) for p, end in self.topics[t].items()}
            for t in asked
            if t in self.topics
        }

    def record_timestamps(
        self, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int | None]:
        self.calls.append(Call("record_timestamps", tuple(sorted(t for t, _ in offsets))))
        stamps = {(t, p): self.written(t, p, o) for (t, p), o in offsets.items()}
        return {key: None if at is None else int(at * 1000) for key, at in stamps.items()}

    def retention(self, topics: Iterable[str]) -> dict[str, TopicRetention | None]:
        return dict.fromkeys(topics)  # settings unreadable: time to loss unknown

    def close(self) -> None:
        self.closed = True


_: KafkaOffsets = FakeKafka({})  # mypy: the fake has the port's shape
