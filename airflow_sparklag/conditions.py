"""Wait conditions: healthy, progressing, caught up. Serializable (a trigger carries the
``to_dict()`` without ``kind`` as its kwargs), one ``probe(session)`` each: the whole of a
sensor's, a trigger's and ``sparklag wait``'s domain logic::

    from airflow_sparklag.conditions import HealthCondition
    from airflow_sparklag.session import Session

    condition = HealthCondition("s3a://lake/ck/orders")
    with Session(kafka_config={"bootstrap.servers": "broker:9092"}) as session:
        probe = condition.probe(session)
    probe.done, probe.failed, probe.message
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

from airflow_sparklag.errors import CheckpointNotFound, InvalidParameter
from airflow_sparklag.model.report import moment, utc_text
from airflow_sparklag.model.result import CheckResult, document, summary_of
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckOptions, check
from airflow_sparklag.render import breach_message
from airflow_sparklag.session import Session
from airflow_sparklag.snapshot import by_partition

# Verdicts a health wait accepts, and those that end it at once (see HealthCondition).
DEFAULT_ACCEPT = (Health.OK,)
DEFAULT_FAIL_FAST = (Health.DATA_LOSS, Health.STOPPED)


@dataclass(frozen=True)
class Probe:
    """One poll of a wait condition: is the wait over, did it fail for good, and ``payload``,
    the JSON document of the wait (XCom, trigger events, ``sparklag wait --json``)."""

    done: bool
    message: str
    payload: dict[str, Any]
    failed: bool = False  # the condition can no longer be met (e.g. data loss): stop waiting

    @classmethod
    def of(
        cls,
        kind: str,
        done: bool,
        message: str,
        seen: Mapping[str, Any] | CheckResult,
        failed: bool = False,
    ) -> Probe:
        if isinstance(seen, CheckResult):
            summary, seen = summary_of([seen]), seen.to_dict()
        else:
            summary = {"jobs": 1, "failed_checks": 0}
        summary.update(condition=kind, done=done, failed=failed, message=message)
        return cls(done, message, document("wait", [seen], summary), failed)


class WaitCondition(Protocol):
    kind: ClassVar[str]

    @property
    def location(self) -> str: ...  # read-only: the conditions are frozen dataclasses

    def probe(self, session: Session) -> Probe: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class HealthCondition:
    """Done when the verdict is one of ``accept``; failed for good on one of ``fail_fast``
    (waiting will not bring records back nor start a query) unless also accepted. STOPPED
    never fails a wait on a scheduled job: between runs, waiting is the point."""

    kind: ClassVar[str] = "health"
    location: str
    options: CheckOptions = field(default_factory=CheckOptions)
    accept: tuple[Health, ...] = DEFAULT_ACCEPT
    fail_fast: tuple[Health, ...] = DEFAULT_FAIL_FAST

    def __post_init__(self) -> None:
        if not self.accept:
            raise InvalidParameter("accept: give at least one verdict to wait for, e.g. OK")

    def probe(self, session: Session) -> Probe:
        result = check(session, self.location, self.options)
        health = result.verdict.health
        between_runs = health is Health.STOPPED and self._scheduled(result)
        if health in self.accept:
            message = f"{self.location}: {health.value}: {result.verdict.reason}"
            return Probe.of(self.kind, True, message, result)
        failed = health in self.fail_fast and not between_runs
        return Probe.of(self.kind, False, breach_message(result), result, failed=failed)

    def _scheduled(self, result: CheckResult) -> bool:
        """A declared scheduled job, or one whose history looks like runs."""
        if self.options.runs_every is not None:
            return True
        schedule = result.report.schedule if result.report is not None else None
        return schedule is not None and schedule.scheduled

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "options": self.options.to_dict(),
            "accept": [h.value for h in self.accept],
            "fail_fast": [h.value for h in self.fail_fast],
        }


def committed_kafka_offsets(state: Any) -> dict[str, dict[str, dict[int, int]]]:
    """source id -> topic -> partition -> committed (next to read) offset, Kafka sources only."""
    if state.committed is None:
        return {}
    return {
        source.source_id: {t: dict(parts) for t, parts in source.kafka.items()}
        for source in state.committed.sources
        if source.kind == "kafka" and source.kafka is not None
    }


def committed_offsets(session: Session, location: str) -> dict[str, Any]:
    """What the query has processed (the NEXT offsets to read), JSON-safe: for recording
    before a stop or migration."""
    state = session.read(location, history=1)
    return {
        "location": location,
        "query_id": state.query_id,
        "committed_batch_id": state.committed_batch_id,
        **moment("committed_at", state.commit_modified),
        "offsets": {
            source: by_partition(topics)
            for source, topics in committed_kafka_offsets(state).items()
        },
    }


@dataclass(frozen=True)
class ProgressCondition:
    """Done when the query committed a batch newer than ``after_batch_id`` and/or later than
    ``after_commit_time`` (epoch seconds; either alone; with neither: any committed batch).
    A checkpoint that does not exist yet is "not yet", not an error."""

    kind: ClassVar[str] = "progress"
    location: str
    after_batch_id: int | None = None
    after_commit_time: float | None = None

    def probe(self, session: Session) -> Probe:
        try:
            payload = committed_offsets(session, self.location)
        except CheckpointNotFound:
            message = f"{self.location}: no checkpoint yet"
            return Probe.of(self.kind, False, message, {"location": self.location})
        batch = payload["committed_batch_id"]
        ms = payload["committed_at_ms"]
        committed_at = None if ms is None else ms / 1000.0
        if batch is None:
            return Probe.of(self.kind, False, f"{self.location}: no batch committed yet", payload)
        newer = self.after_batch_id is None or batch > self.after_batch_id
        after = self.after_commit_time
        later = after is None or (committed_at is not None and committed_at > after)
        wanted = []
        if self.after_batch_id is not None:
            wanted.append(f"batch > {self.after_batch_id}")
        if after is not None:
            wanted.append(f"commit after {_iso(after)}")
        message = f"{self.location}: committed batch {batch} at {_iso(committed_at)}" + (
            f" (waiting for {', '.join(wanted)})" if wanted else ""
        )
        return Probe.of(self.kind, newer and later, message, payload)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


def _iso(epoch: float | None) -> str:
    return "never" if epoch is None else str(utc_text(epoch * 1000))


@dataclass(frozen=True)
class CatchUpCondition:
    """Done when every partition's committed offset reached the first offset produced at or
    after ``target_time_ms``, each source on its own cluster; ``topics`` limits the check."""

    kind: ClassVar[str] = "catch_up"
    location: str
    target_time_ms: int
    topics: tuple[str, ...] | None = None

    def probe(self, session: Session) -> Probe:
        state = session.read(self.location, history=1)
        committed = _slowest_positions(state, session.cluster_of)
        wanted = _wanted_topics(committed, self.topics)
        if not wanted:
            message = f"{self.location}: no Kafka offsets committed yet"
            return Probe.of(self.kind, False, message, {"location": self.location})
        behind: list[dict[str, Any]] = []
        for cluster, topics in wanted.items():
            targets = session.cluster_kafka(cluster).offsets_for_time(topics, self.target_time_ms)
            for topic in topics:
                for partition, target_offset in sorted(targets.get(topic, {}).items()):
                    position = committed.get(cluster, {}).get(topic, {}).get(partition)
                    if (position or 0) < target_offset:
                        behind.append(
                            {
                                "topic": topic,
                                "partition": partition,
                                "committed_offset": position,
                                "target_offset": target_offset,
                            }
                        )
        records = sum(b["target_offset"] - (b["committed_offset"] or 0) for b in behind)
        payload: dict[str, Any] = {
            "location": self.location,
            "target_time": utc_text(self.target_time_ms),
            "target_time_ms": self.target_time_ms,
            "committed_batch_id": state.committed_batch_id,
            "records_behind": records,
            "partitions_behind": behind[:20],
        }
        target = _iso(self.target_time_ms / 1000.0)
        if not behind:
            message = f"{self.location}: caught up with everything before {target}"
            return Probe.of(self.kind, True, message, payload)
        summary = ", ".join(
            f"{b['topic']}[{b['partition']}] {b['committed_offset']}<{b['target_offset']}"
            for b in behind[:5]
        )
        message = f"{self.location}: {records} records before {target} not processed: {summary}"
        return Probe.of(self.kind, False, message, payload)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self), "topics": list(self.topics or ()) or None}


def _slowest_positions(
    state: Any, cluster_of: Callable[[str], int]
) -> dict[int, dict[str, dict[int, int]]]:
    """cluster -> topic -> partition -> committed offset (cluster 0: the main one); a topic
    read by two sources of one cluster is caught up when the slower one is."""
    committed: dict[int, dict[str, dict[int, int]]] = {}
    for source_id, source_topics in committed_kafka_offsets(state).items():
        on_cluster = committed.setdefault(cluster_of(source_id), {})
        for topic, parts in source_topics.items():
            merged = on_cluster.setdefault(topic, {})
            for partition, offset in parts.items():
                merged[partition] = min(offset, merged.get(partition, offset))
    return committed


def _wanted_topics(
    committed: Mapping[int, Mapping[str, Any]], topics: tuple[str, ...] | None
) -> dict[int, list[str]]:
    """cluster -> topics to compare: every committed topic, or those of ``topics`` (one that
    no source has committed yet is asked of the main cluster)."""
    if topics is None:
        return {c: sorted(names) for c, names in sorted(committed.items()) if names}
    wanted = {c: sorted(set(topics) & set(names)) for c, names in sorted(committed.items())}
    rest = set(topics) - {topic for names in wanted.values() for topic in names}
    if rest:
        wanted[0] = sorted(set(wanted.get(0, [])) | rest)
    return {c: names for c, names in wanted.items() if names}
