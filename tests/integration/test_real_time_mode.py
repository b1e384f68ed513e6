"""REAL real-time queries (Spark >= 4.1, ``trigger(realTime=...)``, Kafka to Kafka) on the REAL
broker, judged against an independent truth: the records produced to the source topic and
those the query wrote to its sink topic, counted by the broker and by a plain consumer.

Real-time mode writes ``offsets/N`` and ``commits/N`` together at the END of each interval, so
just before a checkpoint the live log is an interval of records past the newest offsets although
the query has processed them. Two queries run side by side (one partition each: a real-time
task holds its slot for the whole interval and the session has two):

- ``steady`` keeps up: polled as fast as a check goes (so also just before its checkpoints),
  with a total-lag threshold a live lag would breach every interval; then it is stopped while
  records keep coming, and is STOPPED once no checkpoint came for 3 intervals and 30 s;
- ``slow`` falls behind: its task sleeps 50 ms a record (20 records/s) while 30 records/s
  arrive; LAGGING once its lag as of the checkpoints grew three times past an interval's read.
  Once stopped, its ``sparklag history`` and its time lag are checked against the records'
  own timestamps (a plain consumer): each point is a checkpoint, dated when its offsets file
  was written, with the offsets reached then; the time lag is the first unread record's age
  as of the newest checkpoint (exact mode), unknown with the reason by default.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.history import REAL_TIME_NOW, history
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckResult, check_checkpoint
from airflow_sparklag.positions import REAL_TIME_AGE
from airflow_sparklag.render import render
from airflow_sparklag.session import Session
from testbed import jobs
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

INTERVAL = 5.0  # realTime="5 seconds": real-time mode's smallest interval by default
STEADY_RATE = 50  # records/s into the steady query's topic
SLOW_RATE = 30  # records/s into the slow query's topic, which processes 20/s
# A lag a live measure reaches before every checkpoint (an interval is 250 records), and one
# as of the checkpoint never does on a query that keeps up.
TOTAL_LIMIT = 150


class Producer:
    """Writes ``rate`` records a second to ``topic`` until stopped; counts what was acked."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.topic, self.rate = topic, rate
        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        sent = 0
        began = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - began) * self.rate)
            for i in range(sent, due):
                self.producer.produce(self.topic, value=f"r-{i}".encode(), key=str(i).encode())
            sent = max(sent, due)
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(30)


@contextlib.contextmanager
def producing(bootstrap: str, topic: str, rate: int) -> Iterator[Producer]:
    producer = Producer(bootstrap, topic, rate)
    producer.thread.start()
    try:
        yield producer
    finally:
        producer.stop.set()
        producer.thread.join(30)


def record_times(bootstrap: str, topic: str) -> list[float]:
    """Every record's timestamp (epoch seconds) in ``topic``'s partition 0, read by a plain
    consumer: the truth of when each was produced (source) or written by the query (sink)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sparklag-truth-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    times: list[float] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=0.5)
            if any(m.error() is not None and m.error().name() == "_PARTITION_EOF" for m in batch):
                times += [m.timestamp()[1] / 1000.0 for m in batch if m.error() is None]
                return times
            times += [m.timestamp()[1] / 1000.0 for m in batch if m.error() is None]
    finally:
        consumer.close()
    raise TimeoutError(f"no end of {topic} within 30 s")


def start(
    spark: Any,
    kafka: Any,
    source: str,
    sink: str,
    checkpoint: Path,
    *,
    slow: bool,
    nap_ms: int = 50,
    trigger: dict[str, str] | None = None,
) -> Any:
    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[source])
    value = "value"
    if slow:  # nap_ms a record in the task itself (Thread.sleep through reflect; 50: 20/s)
        nap = f"reflect('java.lang.Thread', 'sleep', CAST({nap_ms} AS BIGINT))"
        value = f"concat(CAST(value AS STRING), substr({nap}, 0, 0)) AS value"
    return (
        df.selectExpr("key", value)
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
        .trigger(**(trigger or {"realTime": f"{INTERVAL:.0f} seconds"}))
        .start()
    )


def check(kafka: Any, checkpoint: Path, exact: bool = False, **thresholds: Any) -> CheckResult:
    return check_checkpoint(
        str(checkpoint),
        kafka_config={"bootstrap.servers": kafka.bootstrap},
        thresholds=thresholds,
        exact_time_lag=exact,
    )


def waiting(kafka: Any, source: str, sink: str) -> int:
    """Truth: records produced and not yet in the sink (the query maps one to one)."""
    return kafka.end_offsets(source)[0] - kafka.end_offsets(sink)[0]


def committed_on_disk(checkpoint: Path) -> int:
    """Partition 0's offset in offsets/C for the newest commits/C, parsed by hand."""
    newest = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    return offset_on_disk(checkpoint, newest)


def offset_on_disk(checkpoint: Path, batch_id: int) -> int:
    """Partition 0's offset in offsets/<batch_id>, parsed by hand."""
    line = (checkpoint / "offsets" / str(batch_id)).read_text().split("\n")[2]
    return int(next(iter(json.loads(line).values()))["0"])


def test_real_time_keeping_up_falling_behind_and_stopped(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    topics = {
        n: kafka.create_topic(f"rt-{n}-{tag}", partitions=1) for n in ("a", "a-out", "b", "b-out")
    }
    steady_ck, slow_ck = tmp_path / "steady", tmp_path / "slow"
    with (
        producing(kafka.bootstrap, topics["a"], STEADY_RATE),
        producing(kafka.bootstrap, topics["b"], SLOW_RATE),
    ):
        steady = start(spark, kafka, topics["a"], topics["a-out"], steady_ck, slow=False)
        slow = start(spark, kafka, topics["b"], topics["b-out"], slow_ck, slow=True)
        try:
            polls = keeps_up(kafka, steady, steady_ck, topics["a"], topics["a-out"])
            steady.stop()
            lagging, stopped = behind_and_stopped(kafka, slow, slow_ck, steady_ck)
        finally:
            jobs.stop_quietly(steady)
            jobs.stop_quietly(slow)
        truth_waiting = kafka.end_offsets(topics["a"])[0] - committed_on_disk(steady_ck)
    first_check(kafka, steady_ck, topics["a"])
    history_and_time_lag(kafka, slow_ck, topics["b"], topics["b-out"])
    assert polls["before_checkpoint"] >= 3, polls
    assert stopped.report is not None
    assert stopped.verdict.health is Health.STOPPED, stopped.verdict
    assert stopped.verdict.rule == "stopped_real_time"
    # Every record produced since the last checkpoint waits: the verdict counts them exactly.
    assert f"while {stopped.report.total_lag + (stopped.report.real_time.produced_since or 0)}" in (
        stopped.verdict.reason
    )
    text = render(stopped.report, stopped.verdict)  # the CLI's text; JSON and XCom: to_dict
    assert "trigger     real-time, a checkpoint every" in text, text
    report_dict = json.loads(json.dumps(stopped.to_dict()))["report"]
    assert report_dict["trigger"] == "real-time" and report_dict["real_time"]["produced_since"]
    assert truth_waiting >= stopped.report.total_lag + (
        stopped.report.real_time.produced_since or 0
    )
    # The falling-behind query's lag as of each checkpoint, against the truth: records produced
    # before the checkpoint's time minus records its sink had by then.
    # LAGGING by the real-time rule; the micro-batch trend may fire first when what the
    # intervals read grew too (seen once on a loaded machine): both are in the findings.
    assert lagging.verdict.health is Health.LAGGING, lagging.verdict
    assert "lagging_real_time" in {f.rule for f in lagging.verdict.findings}, lagging.verdict
    assert lagging.report is not None and lagging.report.real_time is not None
    produced = record_times(kafka.bootstrap, topics["b"])
    sunk = record_times(kafka.bootstrap, topics["b-out"])
    real_time = lagging.report.real_time
    truths = [
        sum(t < at for t in produced) - sum(t <= at for t in sunk)
        for at in real_time.checkpoint_times[-3:]
        if at is not None
    ]
    assert truths == sorted(truths) and truths[0] < truths[-1], truths
    for ours, truth in zip(real_time.checkpoint_lags[-3:], truths, strict=True):
        assert ours is not None and abs(ours - truth) <= max(10, truth // 20), (ours, truth)


def first_check(kafka: Any, checkpoint: Path, topic: str) -> None:
    """`sparklag status` at defaults on the stopped query: what waits as of its newest
    checkpoint plus what came since is what waits (the producers have stopped), and the
    reason it is STOPPED asks for no flag."""
    first = status_at_defaults(str(checkpoint), kafka.bootstrap)
    assert first.job is not None and first.job["error"] is None, first
    (part,) = [
        p for s in first.job["report"]["sources"] for t in s["topics"] for p in t["partitions"]
    ]
    waiting = kafka.end_offsets(topic)[0] - committed_on_disk(checkpoint)
    assert part["lag"] + (part["since_checkpoint"] or 0) == waiting, part
    assert first.asks_for() == set(), first.messages()


def keeps_up(kafka: Any, query: Any, checkpoint: Path, source: str, sink: str) -> dict[str, int]:
    """Polls the steady query for 4 intervals from its first checkpoint after it read what
    arrived while it started (the truth says so): never a breach, the lag as of the
    checkpoint small while the truth says it keeps up; counts the polls
    made in the last fifth of an interval (just before a checkpoint)."""
    counts = {"polls": 0, "before_checkpoint": 0}
    first = caught_up = None
    deadline = time.monotonic() + 120
    while first is None or time.monotonic() - first < 4 * INTERVAL:
        assert time.monotonic() < deadline, "the steady query never caught up"
        if query.exception() is not None:
            raise AssertionError(f"steady query failed: {query.exception()}")
        result = check(kafka, checkpoint, max_lag_records_total=TOTAL_LIMIT)
        truth = waiting(kafka, source, sink)
        report = result.report
        if caught_up is None and truth <= TOTAL_LIMIT:
            caught_up = time.time()
        if first is None and (caught_up is None or _checkpoint_at(report) < caught_up):
            continue  # still reading what arrived while it started (a loaded machine)
        assert result.verdict.health in (Health.OK, Health.UNKNOWN), (result.verdict, truth)
        if report is None or report.committed_batch_id is None:
            assert result.verdict.rule == "no_commit", result.verdict
            continue
        first = first or time.monotonic()
        assert report.trigger == "real-time" and report.real_time is not None, report
        assert result.verdict.health is Health.OK, result.verdict
        # The truth: it keeps up (within an interval of records; two on a loaded machine, where
        # its sink writes come later).
        assert truth < 2 * INTERVAL * STEADY_RATE, truth
        part = next(report.partitions())
        assert part.committed_offset is not None and part.log_end_offset is not None
        # What the checkpoint has not got is split, never lost: lag then + produced since.
        assert (
            part.lag + (part.since_checkpoint or 0) == part.log_end_offset - part.committed_offset
        )
        assert report.total_lag <= TOTAL_LIMIT
        counts["polls"] += 1
        if (report.commit_age_seconds or 0.0) > 0.8 * report.real_time.interval_seconds:
            counts["before_checkpoint"] += 1
    return counts


def _checkpoint_at(report: Any) -> float:
    """When the report's newest checkpoint was written; 0 before the first."""
    real_time = None if report is None else report.real_time
    return 0.0 if real_time is None else real_time.checkpoint_at


def behind_and_stopped(
    kafka: Any, slow: Any, slow_ck: Path, stopped_ck: Path
) -> tuple[CheckResult, CheckResult]:
    """Polls the slow query until it is LAGGING (never STOPPED or STALLED), and the stopped
    one until it is STOPPED: OK while its last checkpoint is within 3 intervals and 30 s,
    STOPPED by 45 s after it. Within 150 s."""
    deadline = time.monotonic() + 150
    lagging = stopped = None
    while lagging is None or stopped is None:
        assert time.monotonic() < deadline, (lagging, stopped)
        if lagging is None:
            assert slow.exception() is None, f"slow query failed: {slow.exception()}"
            result = check(kafka, slow_ck)
            health = result.verdict.health
            assert health in (Health.OK, Health.UNKNOWN, Health.LAGGING), result.verdict
            lagging = result if health is Health.LAGGING else None
        if stopped is None:
            result = check(kafka, stopped_ck)
            assert result.report is not None and result.report.real_time is not None
            idle = time.time() - result.report.real_time.checkpoint_at
            if idle <= 30:
                assert result.verdict.health is Health.OK, (idle, result.verdict)
            assert idle < 45, (idle, result.verdict)
            stopped = result if result.verdict.health is Health.STOPPED else None
        time.sleep(0.5)
    return lagging, stopped


def history_and_time_lag(kafka: Any, checkpoint: Path, source: str, sink: str) -> None:
    """The stopped falling-behind query, against its records' own timestamps (one partition
    from offset 0: a record's index is its offset). ``sparklag history``: each point is a
    checkpoint at its offsets file's write, with offsets/N as processed, and its lag is the
    truth then; the ``now`` point has none. Time lag: the age of the first unread record as
    of the newest checkpoint in exact mode, and with a max_lag_seconds threshold (which reads
    it); unknown with the reason by default."""
    produced = record_times(kafka.bootstrap, source)
    sunk = record_times(kafka.bootstrap, sink)
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        past = history(session, str(checkpoint), batches=5)
    points = [p for p in past.points if p.kind == "committed"]
    assert len(points) >= 3 and past.points[-1].kind == "now", past.points
    assert past.points[-1].total_lag is None
    assert past.points[-1].partitions[0].unknown == REAL_TIME_NOW
    for point in points:
        assert point.batch_id is not None
        written = (checkpoint / "offsets" / str(point.batch_id)).stat().st_mtime
        assert abs(point.time_ms / 1000.0 - written) < 0.002, (point, written)
        (part,) = point.partitions
        assert part.processed_offset == offset_on_disk(checkpoint, point.batch_id)
        at = point.time_ms / 1000.0
        assert part.lag == sum(t < at for t in produced) - part.processed_offset, point
        # What the sink had then agrees: the offsets are those processed by that time.
        truth = sum(t < at for t in produced) - sum(t <= at for t in sunk)
        assert part.lag is not None and abs(part.lag - truth) <= max(10, truth // 20), point

    exact = check(kafka, checkpoint, exact=True)
    assert exact.report is not None and exact.report.real_time is not None
    (p,) = exact.report.partitions()
    assert p.committed_offset == committed_on_disk(checkpoint) and p.lag > 0, p
    age = exact.report.real_time.checkpoint_at - produced[p.committed_offset]
    assert p.lag_seconds == pytest.approx(age, abs=0.01), (p, age)
    assert exact.report.max_lag_seconds == p.lag_seconds
    # The estimate alone (the imminent-loss warning off): unknown, with the reason.
    alone = check(kafka, checkpoint, min_time_to_loss_ratio=0)
    assert alone.report is not None and alone.report.max_lag_seconds is None
    (q,) = alone.report.partitions()
    assert (q.lag_seconds, q.lag_seconds_unknown) == (None, REAL_TIME_AGE)
    # At defaults the time-to-loss rule reads the waiting record's age it cannot estimate.
    default = check(kafka, checkpoint)
    assert default.report is not None and default.report.time_lag_mode == "exact"
    assert default.report.min_time_to_loss_seconds is not None
    limited = check(kafka, checkpoint, max_lag_seconds=age / 2)
    assert limited.verdict.health is Health.LAGGING, limited.verdict
    assert limited.report is not None
    assert limited.report.max_lag_seconds == pytest.approx(age, abs=0.01)


MIN_BATCH_DURATION = "spark.sql.streaming.realTimeMode.minBatchDuration"


def test_a_one_second_real_time_query_is_recognised_and_micro_batches_are_not(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """``realTime="1 second"`` (minBatchDuration lowered to 1000 ms; Spark accepts any interval
    from 1 ms once it is lowered) beside a micro-batch query on a 1 s processingTime trigger
    whose sink takes 10 ms a record (its commits trail its offsets by 0.5 s and more), both
    checked continuously for 8 s (and until the second was seen committed 5 times): the first
    is real-time at every check from its second checkpoint on (its interval the span of
    offsets/C on disk), the second never. And a copy of the real-time checkpoint made as soon
    as a checkpoint is written (every file written at copy time, a moment after the newest
    batch time) is not."""
    tag = uuid.uuid4().hex[:6]
    topics = {n: kafka.create_topic(f"rt1-{n}-{tag}", partitions=1) for n in ("a", "b", "o")}
    rt_ck, mb_ck = tmp_path / "rt", tmp_path / "mb"
    lowered = spark.conf.get(MIN_BATCH_DURATION)
    spark.conf.set(MIN_BATCH_DURATION, "1000")
    rt = mb = None
    try:
        with (
            producing(kafka.bootstrap, topics["a"], STEADY_RATE),
            producing(kafka.bootstrap, topics["b"], STEADY_RATE),
        ):
            trigger = {"realTime": "1 second"}
            rt = start(spark, kafka, topics["a"], topics["o"], rt_ck, slow=False, trigger=trigger)
            trigger = {"processingTime": "1 second"}
            mb = start(spark, kafka, topics["b"], topics["o"], mb_ck, slow=True, nap_ms=10,
                       trigger=trigger)  # fmt: skip
            checks = poll_both(kafka, rt, rt_ck, mb, mb_ck)
            copy = copy_after_a_checkpoint(rt_ck, tmp_path / "copy")
    finally:
        jobs.stop_quietly(rt)
        jobs.stop_quietly(mb)
        spark.conf.set(MIN_BATCH_DURATION, lowered)
    assert checks["real-time"] >= 5 and checks["micro-batch"] >= 5, checks
    copied = check(kafka, copy)
    assert copied.report is not None and copied.report.trigger == "micro-batch", copied.report


def poll_both(kafka: Any, rt: Any, rt_ck: Path, mb: Any, mb_ck: Path) -> dict[str, int]:
    """Checks both queries for 8 s from the real-time one's second checkpoint, and until the
    micro-batch one was seen committed 5 times (within 90 s)."""
    counts = {"real-time": 0, "micro-batch": 0}
    first = None
    deadline = time.monotonic() + 90
    while first is None or time.monotonic() - first < 8 or counts["micro-batch"] < 5:
        assert time.monotonic() < deadline, counts  # no second checkpoint, or no micro-batch
        for query in (rt, mb):
            assert query.exception() is None, f"query failed: {query.exception()}"
        result = check(kafka, rt_ck)
        report = result.report
        if report is None or report.committed_batch_id is None or report.committed_batch_id < 1:
            continue
        first = first or time.monotonic()
        assert report.trigger == "real-time" and report.real_time is not None, (
            report,
            spans(rt_ck),
        )
        assert result.verdict.health is Health.OK, result.verdict
        offsets = rt_ck / "offsets" / str(report.committed_batch_id)
        written = offsets.stat().st_mtime
        began = json.loads(offsets.read_text().split("\n")[1])["batchTimestampMs"] / 1000.0
        assert report.real_time.checkpoint_at == pytest.approx(written, abs=0.002)
        assert report.real_time.interval_seconds == pytest.approx(written - began, abs=0.002)
        counts["real-time"] += 1
        other = check(kafka, mb_ck).report
        if other is not None and other.committed_batch_id is not None:
            assert other.trigger == "micro-batch" and other.real_time is None, spans(mb_ck)
            counts["micro-batch"] += 1
    return counts


def spans(checkpoint: Path) -> list[tuple[int, float, float | None]]:
    """(batch, offsets/N's write - its batch time, commits/N's write - offsets/N's) on disk: what
    an assertion shows when the shape was misread."""
    rows = []
    for path in sorted((checkpoint / "offsets").iterdir()):
        if path.name.isdigit():
            written = path.stat().st_mtime
            began = json.loads(path.read_text().split("\n")[1])["batchTimestampMs"] / 1000.0
            commit = checkpoint / "commits" / path.name
            gap = commit.stat().st_mtime - written if commit.exists() else None
            rows.append((int(path.name), round(written - began, 3), gap and round(gap, 3)))
    return sorted(rows)


def copy_after_a_checkpoint(checkpoint: Path, copy: Path) -> Path:
    """A byte-for-byte copy with fresh times of the running query, made as soon as its next
    checkpoint is written (a moment after its batch time: the hardest copy to tell), in the
    order that looks most like real-time mode: ``metadata`` and ``sources/`` first, then each
    offsets file followed by its commit."""
    import shutil

    def newest() -> int:
        return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())

    seen, deadline = newest(), time.monotonic() + 30
    while newest() == seen:
        assert time.monotonic() < deadline, "no checkpoint within 30 s"
        time.sleep(0.005)
    last = newest()
    copy.mkdir()
    shutil.copyfile(checkpoint / "metadata", copy / "metadata")
    shutil.copytree(checkpoint / "sources", copy / "sources", copy_function=shutil.copyfile)
    (copy / "offsets").mkdir()
    (copy / "commits").mkdir()
    for batch_id in range(last + 1):
        for log in ("offsets", "commits"):
            if (checkpoint / log / str(batch_id)).exists():
                shutil.copyfile(checkpoint / log / str(batch_id), copy / log / str(batch_id))
    return copy
