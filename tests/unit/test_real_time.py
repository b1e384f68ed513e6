"""The real-time trigger: recognised from the checkpoint's shape, measured as of its checkpoints,
judged by rule_stopped_real_time and rule_lagging_real_time (one table each).

The shapes are those of real queries (tests/integration/test_real_time_mode.py): offsets/N
written ~5.1 s after its batchTimestampMs and commits/N 50-200 ms after it; a micro-batch
writes offsets/N well under a second after its batch time.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.checkpoint import real_time_interval
from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState
from airflow_sparklag.health import (
    evaluate,
    reads_lagging_real_time,
    rule_lagging_real_time,
    rule_stopped_real_time,
)
from airflow_sparklag.lag import answered
from airflow_sparklag.model.report import Reads, RealTime
from airflow_sparklag.model.verdict import Health, Thresholds

T = 1_795_622_184.0  # a batch time


def batch(batch_id: int, at: float, written: float) -> BatchOffsets:
    return BatchOffsets(batch_id, 1, int(at * 1000), 0, {}, (), modified=written)


def state(
    committed: BatchOffsets | None,
    commit: float | None,
    flight: BatchOffsets | None = None,
    before: float | None = None,
    preceding: tuple[BatchOffsets, float | None] | None = None,
) -> CheckpointState:
    """``before``: when what Spark wrote before the newest batch was (the previous offsets file
    or ``metadata``); by default 0.3 s before that batch's time, as in real queries (0.05-0.8 s
    measured). ``preceding``: the batch before C and its commit time (read for short spans)."""
    newest = flight or committed
    if before is None and newest is not None and newest.batch_timestamp_ms is not None:
        before = newest.batch_timestamp_ms / 1000 - 0.3
    previous, previous_commit = preceding or (None, None)
    return CheckpointState(
        "/ck", None, None if committed is None else committed.batch_id, committed, commit,
        flight, (), (), (), continuous=False, written_before=before, preceding=previous,
        preceding_commit_modified=previous_commit,
    )  # fmt: skip


def rt_before(span: float, gap: float, lead: float = 0.1) -> tuple[BatchOffsets, float]:
    """Batch 2 of a real-time query whose batch 3 began at T: its checkpoint written ``lead``
    before T (offsets), its interval ``span`` long, its commit ``gap`` after its offsets."""
    written = T - lead - gap
    return batch(2, written - span, written), T - lead


def mb_before(lead: float) -> tuple[BatchOffsets, float]:
    """Batch 2 of a micro-batch query whose batch 3 began at T: planned 1 s before it in 10 ms,
    committed ``lead`` before it."""
    return batch(2, T - 1, T - 0.99), T - lead


COPIED = T + 86_400.0  # `aws s3 sync` a day later: every file written then


SHAPES = [
    # id, state, interval
    ("real-time: offsets 5.1 s after the batch time, commit 0.1 s later",
     state(batch(3, T, T + 5.1), T + 5.2), 5.1),
    ("micro-batch: offsets planned at once, commit after the run",
     state(batch(3, T, T + 0.2), T + 5.2), None),
    ("micro-batch with a slow plan and a quick run: still not real-time",
     state(batch(3, T, T + 3.0), T + 3.2), None),
    ("real-time on S3: 1 s times", state(batch(3, T, T + 4.0), T + 5.0), 4.0),
    ("a long run after a long plan is a micro-batch",
     state(batch(3, T, T + 4.0), T + 6.1), None),
    ("real-time on a loaded machine: the commit 1.5 s after the offsets",
     state(batch(3, T, T + 5.3), T + 6.8), 5.3),
    ("real-time, read between offsets/4 and commits/4: C's interval",
     state(batch(3, T, T + 5.1), T + 5.2, batch(4, T + 5.3, T + 10.4)), 5.1),
    ("real-time before its first commit: offsets/0's interval",
     state(None, None, batch(0, T, T + 6.1)), pytest.approx(6.1)),
    ("a micro-batch in flight is planned at its batch time",
     state(batch(3, T, T + 5.1), T + 5.2, batch(4, T + 9.0, T + 9.1)), None),
    ("nothing committed, nothing in flight", state(None, None), None),
    ("a copied micro-batch checkpoint: offsets and commit written together a day later",
     state(batch(3, T, COPIED), COPIED + 0.01, before=COPIED), None),
    ("a copied one-batch checkpoint: metadata written at copy time too",
     state(batch(0, T, COPIED), COPIED, before=COPIED), None),
    ("a copy in flight", state(batch(3, T, COPIED), COPIED, batch(4, T + 5, COPIED), COPIED),
     None),
    ("real-time: the previous checkpoint 1.5 s after the batch time (S3's 1 s times)",
     state(batch(3, T, T + 5.1), T + 5.2, before=T + 1.5), 5.1),
    ("nothing known about what was written before",
     dataclasses.replace(state(batch(3, T, T + 5.1), T + 5.2), written_before=None), None),
    # Short intervals (minBatchDuration lowered), the numbers of real queries (pyspark 4.2, 2
    # cores; docs/lag-and-health.md): the span is the interval plus 0.02-0.25 s (1.2 s at a
    # load of 14), the commit 0.02-0.44 s after the offsets.
    ("real-time 1 s: recognised with the checkpoint before it",
     state(batch(3, T, T + 1.06), T + 1.1, preceding=rt_before(1.04, 0.03)), pytest.approx(1.06)),
    ("real-time 1 s at a load of 14: a 2.2 s span, the commit 0.44 s after",
     state(batch(3, T, T + 2.24), T + 2.68, preceding=rt_before(1.22, 0.09, lead=0.64)),
     pytest.approx(2.24)),
    ("real-time 2 s", state(batch(3, T, T + 2.08), T + 2.4, preceding=rt_before(2.65, 0.08)),
     pytest.approx(2.08)),
    ("real-time 3 s", state(batch(3, T, T + 3.04), T + 3.18, preceding=rt_before(3.16, 0.04)),
     pytest.approx(3.04)),
    ("real-time 3 s on S3: 1 s times (offsets and commit a second apart)",
     state(batch(3, T - 0.4, T + 2.0), T + 3.0, before=T - 1.0,
           preceding=(batch(2, T - 4.0, T - 1.0), T - 1.0)), pytest.approx(2.4)),
    ("real-time 1 s, read between offsets/4 and commits/4: C's interval",
     state(batch(3, T, T + 1.06), T + 1.1, batch(4, T + 1.2, T + 2.3)), pytest.approx(1.06)),
    ("real-time 1 s, its first checkpoint alone: not yet (3.1 s span with the start-up)",
     state(batch(0, T, T + 3.09), T + 3.15, before=T - 1.39), None),
    ("real-time 1 s, its first interval between its two writes: not yet",
     state(None, None, batch(0, T, T + 3.09)), None),
    ("real-time 1 s after a micro-batch run of the same checkpoint: not yet",
     state(batch(3, T, T + 1.06), T + 1.1, preceding=(batch(2, T - 5.0, T - 4.99), T - 4.8)),
     None),
    ("the batch before C is not committed (a crash, async progress)",
     state(batch(3, T, T + 1.06), T + 1.1, preceding=(batch(2, T - 1.2, T - 0.1), None)), None),
    ("real-time 0.5 s: under REAL_TIME_MIN_INTERVAL, judged as a micro-batch",
     state(batch(3, T, T + 0.61), T + 0.67, preceding=rt_before(0.56, 0.06)), None),
    ("micro-batch on a quiet machine: 4 ms plan, 0.13 s run",
     state(batch(3, T, T + 0.004), T + 0.13, preceding=mb_before(0.8)),
     None),
    ("micro-batch at a load of 14: a 0.78 s plan, a 0.66 s run",
     state(batch(3, T, T + 0.78), T + 1.44, preceding=mb_before(0.2)),
     None),
    ("micro-batch with a slow sink: commits 4 s after the offsets",
     state(batch(3, T, T + 0.01), T + 4.15, preceding=(batch(2, T - 4.2, T - 4.19), T - 0.1)),
     None),
    ("micro-batch, processingTime 1 s: the batch before ran and waited for its tick",
     state(batch(3, T, T + 0.17), T + 0.9, preceding=mb_before(0.6)),
     None),
    ("micro-batch, one 1.5 s plan with a quick run after a usual batch",
     state(batch(3, T, T + 1.5), T + 1.6, preceding=mb_before(0.7)),
     None),
    ("the bound: two micro-batch plans of 1.2 s in a row, each with a run under half of it",
     state(batch(3, T, T + 1.2), T + 1.3, preceding=(batch(2, T - 1.6, T - 0.4), T - 0.3)),
     pytest.approx(1.2)),
    ("a copy written at once, seconds after a 1 s query's batch times",
     state(batch(3, T, T + 1.5), T + 1.51, before=T + 1.49,
           preceding=(batch(2, T - 1.2, T + 1.48), T + 1.485)), None),
]  # fmt: skip


@pytest.mark.parametrize(("case", "shape", "interval"), SHAPES, ids=[c[0] for c in SHAPES])
def test_real_time_is_recognised_from_the_files(
    case: str, shape: CheckpointState, interval: float | None
) -> None:
    found = real_time_interval(shape)
    assert found == (interval if interval is None else pytest.approx(interval))


def real_time_report(*parts, ages=(15.0, 10.0, 5.0), records=(None, 250, 250), lags=()):  # type: ignore[no-untyped-def]
    """A real-time report at NOW whose checkpoints were written ``ages`` seconds ago."""
    base = report(*parts, batch_ages=ages, batch_records=records)
    times = tuple(NOW - age for age in ages)
    checkpoint = RealTime(5.0, times[-1], times, checkpoint_lags=lags, produced_since=0)
    return dataclasses.replace(base, trigger="real-time", real_time=checkpoint)


def test_the_lag_is_as_of_the_checkpoint_and_the_rest_is_produced_since() -> None:
    live = real_time_report(part(260, committed=1000, history=(500, 750, 1000)))
    # Kafka's end when each checkpoint was written: 751 (15 s ago), 1003 (10 s), 1010 (5 s).
    ends = [{"0": {"t": {0: 751}}}, {"0": {"t": {0: 1003}}}, {"0": {"t": {0: 1010}}}]
    measured = answered(live, ends, None)
    (p,) = measured.partitions()
    assert (p.lag, p.since_checkpoint, measured.total_lag) == (10, 250, 10)
    assert p.lag_seconds is None and p.lag_seconds_unknown  # only a record timestamp dates it
    assert measured.real_time is not None
    assert measured.real_time.checkpoint_lags == (251, 253, 10)
    assert measured.real_time.produced_since == 250
    assert measured.sources[0].lag == 10 and measured.sources[0].topics[0].lag == 10


def test_exact_time_lag_is_moved_to_the_checkpoint() -> None:
    live = real_time_report(part(260, committed=1000, lag_seconds=9.0))
    live = dataclasses.replace(live, time_lag_mode="exact")
    measured = answered(live, [None, None, {"0": {"t": {0: 1010}}}], None)
    (p,) = measured.partitions()
    assert p.lag_seconds == pytest.approx(4.0)  # 9 s old now, 4 s old 5 s ago
    assert measured.real_time is not None and measured.real_time.checkpoint_lags[:2] == (None, None)


def test_a_report_without_the_checkpoint_ends_is_left_as_is() -> None:
    live = real_time_report(part(260, committed=1000))
    assert answered(live, [None, None, None], None) is live
    micro = report(part(260))
    assert answered(micro, [{"0": {"t": {0: 0}}}], None) is micro


STOPPED = [
    # id, lag, since, newest checkpoint age, thresholds, fires
    ("a checkpoint 5 s ago", 0, 300, 5.0, {}, False),
    ("3 intervals but under 30 s", 0, 300, 29.0, {}, False),
    ("31 s without a checkpoint, records produced since", 0, 300, 31.0, {}, True),
    ("31 s without a checkpoint, lag as of it", 40, 0, 31.0, {}, True),
    ("31 s without a checkpoint, nothing waits", 0, 0, 31.0, {}, False),
    ("within allowed_lag", 0, 2, 31.0, {"allowed_lag": 2}, False),
    ("the user's max_commit_age_seconds decides", 0, 300, 31.0,
     {"max_commit_age_seconds": 60}, False),
    ("past the user's max_commit_age_seconds", 0, 300, 61.0,
     {"max_commit_age_seconds": 60}, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "lag", "since", "age", "limits", "fires"), STOPPED, ids=[c[0] for c in STOPPED]
)
def test_stopped_when_the_checkpoints_stop(
    case: str, lag: int, since: int, age: float, limits: dict, fires: bool
) -> None:
    waiting = dataclasses.replace(part(lag), since_checkpoint=since)
    found = real_time_report(waiting, ages=(age + 10, age + 5, age))
    result = rule_stopped_real_time(found, Thresholds(**limits), NOW)
    assert (result is not None) is fires
    if result is not None:
        assert result.health is Health.STOPPED and f"while {lag + since} record(s)" in result.reason


LAGGING = [
    # id, lag as of each checkpoint, records the newest interval read, fires
    ("keeping up: small lags, by chance growing", (2, 5, 9), 250, False),
    ("grew three times past an interval's read", (150, 260, 380), 250, True),
    ("past an interval's read but shrinking: catching up", (500, 400, 300), 250, False),
    ("grew, still under an interval's read", (50, 100, 150), 250, False),
    ("only two checkpoints measured", (None, 260, 380), 250, False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "lags", "read", "fires"), LAGGING, ids=[c[0] for c in LAGGING])
def test_lagging_when_the_lag_as_of_the_checkpoints_grows(
    case: str, lags: tuple, read: int, fires: bool
) -> None:
    found = real_time_report(part(lags[-1]), records=(None, read, read), lags=lags)
    result = rule_lagging_real_time(found, Thresholds(), NOW)
    assert (result is not None) is fires
    assert evaluate(found, now=NOW).health is (Health.LAGGING if fires else Health.OK)


def test_the_trend_is_read_only_past_an_interval_behind() -> None:
    behind = real_time_report(part(300), records=(None, 250, 250))
    assert reads_lagging_real_time(behind, Thresholds(), NOW, False) is Reads.WINDOW
    keeping_up = real_time_report(part(9), records=(None, 250, 250))
    assert reads_lagging_real_time(keeping_up, Thresholds(), NOW, False) is Reads.NOTHING
    newest_only = real_time_report(part(9), ages=(5.0,), records=(None,))
    assert reads_lagging_real_time(newest_only, Thresholds(), NOW, False) is Reads.OLDER


def test_the_reason_says_what_the_lag_is_measured_at() -> None:
    found = real_time_report(part(300))
    assert evaluate(found, now=NOW).reason.endswith("as of the newest checkpoint (real-time "
                                                    "trigger; 0 record(s) produced since, read "
                                                    "as they arrive)")  # fmt: skip
    breached = evaluate(found, Thresholds(max_lag_records_total=100), now=NOW)
    assert breached.health is Health.LAGGING
    assert breached.reason.startswith("total lag 300 records > 100 as of the newest checkpoint")


def test_the_report_dates_each_checkpoint_when_its_offsets_were_reached() -> None:
    """batchTimestampMs is an interval's start, its offsets those of the end: the history, the
    rates and the time lag use the offsets file's write, never the interval's start."""
    from airflow_sparklag.checkpoint_files import SourceOffset
    from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
    from airflow_sparklag.lag import compute_lag
    from airflow_sparklag.positions import REAL_TIME_AGE

    def checkpoint(n: int) -> BatchOffsets:
        offsets = {"t": {0: 250 * (n + 1)}}
        source = SourceOffset("0", "kafka", offsets, json.dumps(offsets))
        start = T + 5.1 * n
        return BatchOffsets(n, 1, int(start * 1000), 0, {}, (source,), modified=start + 5.0)

    batches = [checkpoint(n) for n in range(3)]
    written = [b.modified for b in batches]
    shape = CheckpointState(
        "/ck", None, 2, batches[-1], T + 15.3, None, tuple(batches), (0, 1, 2), (0, 1, 2),
        continuous=False, written_before=written[-2],
    )  # fmt: skip
    live = KafkaSnapshot({"t": {0: PartitionOffsets(0, 850, None)}}, frozenset(), T + 17.2, None)
    report = compute_lag(shape, live)
    assert report.trigger == "real-time"
    assert [h.timestamp_ms for h in report.history] == [int(w * 1000) for w in written]
    assert report.consumption_rate == pytest.approx(500 / (written[2] - written[0]))
    # An upper bound: 600 records since offsets/0 was reached (not since its interval began).
    assert report.production_rate == pytest.approx(600 / (T + 17.2 - written[0]))
    (p,) = report.partitions()
    assert (p.lag_seconds, p.lag_seconds_unknown) == (None, REAL_TIME_AGE)
