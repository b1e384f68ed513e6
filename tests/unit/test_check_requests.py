"""A single-job check reads the older batches only when the verdict or the numbers need them:
none for a caught-up job, offsets/C-1 alone when it settles every rule, else the whole window.

Checkpoints are written from a real Spark 3.5 checkpoint's files (ck35: the ``metadata``, the
offsets metadata line with its ``conf``, the commit) with Kafka source offsets; a fake Kafka
cluster answers. Every lazy check is compared with the eager way (the whole window read, then
judged at the same instant): same verdict, and the same report for every job the window
matters to. Request counts are real HTTP requests to a moto S3 server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions, CheckResult, check, check_many, judge_states
from airflow_sparklag.session import Session
from airflow_sparklag.storage import open_storage
from testbed.s3_server import put_objects
from tests.fakes import FakeKafka, written_steadily
from tests.unit.test_storage_s3 import CREDENTIALS, SentRequests, _boto_client, endpoint

__all__ = ["endpoint"]  # the moto server fixture, shared with test_storage_s3

CK35 = Path(__file__).resolve().parent.parent / "data" / "checkpoints" / "ck35"
NOW = 1_800_000_000.0
TOPIC = "orders"
BUCKET = "lazy"
# What only the window gives: a caught-up job's report differs from an eager one only here.
# the rates' window, and what is made of them (catch-up, when each threshold is crossed)
WINDOW_FIELDS = (
    "history",
    "consumption_rate",
    "production_rate",
    "catch_up_seconds",
    "time_to_breach",
)


def cluster(
    ends: dict[int, int], starts: dict[int, int] | None = None, rate: float = 1.0
) -> FakeKafka:
    """Topic "orders" of the in-memory cluster: log ends and starts per partition; ``rate``
    records a second in each partition, the last one written at NOW - 1 (for exact time lag and
    ListOffsets by time)."""
    ends = dict(ends)
    written = written_steadily(ends, rate, NOW - 1)
    return FakeKafka({TOPIC: ends}, written, {TOPIC: dict(starts or {})}, now=NOW)


def _offsets_file(ts_ms: int, offsets: dict[int, int]) -> bytes:
    meta = json.loads((CK35 / "offsets" / "6").read_text().split("\n")[1])
    meta["batchTimestampMs"] = ts_ms
    source = json.dumps({TOPIC: {str(p): o for p, o in offsets.items()}}, separators=(",", ":"))
    return f"v1\n{json.dumps(meta, separators=(',', ':'))}\n{source}".encode()


def checkpoint_files(
    batches: list[tuple[float, dict[int, int]]], committed: int | None = None
) -> dict[str, bytes]:
    """offsets/0..n-1 at the given times (epoch s) and offsets; commits/0..committed-1."""
    files = {"metadata": (CK35 / "metadata").read_bytes()}
    commit = (CK35 / "commits" / "6").read_bytes()
    for batch_id, (at, offsets) in enumerate(batches):
        files[f"offsets/{batch_id}"] = _offsets_file(int(at * 1000), offsets)
        if committed is None or batch_id < committed:
            files[f"commits/{batch_id}"] = commit
    return files


def _write(root: Path, files: dict[str, bytes]) -> str:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    return str(root)


def steady(n: int = 12, end: int = 1200, lag: int = 0, every: float = 10.0) -> list:
    """n batches ``every`` s apart up to NOW - 2 s; the last one ``lag`` behind ``end``."""
    return [
        (NOW - 2 - (n - 1 - i) * every, {p: (end - lag) * (i + 1) // n for p in (0, 1)})
        for i in range(n)
    ]


def eager(location: str, kafka: FakeKafka, options: CheckOptions) -> CheckResult:
    """The way before: the whole window read, then judged."""
    with Session(kafka_client=kafka) as session:
        state = session.read(location, history=options.history_to_read)
        assert not state.unread_history
        return judge_states(session, {location: state}, options, now=NOW)[location]


def lazy(location: str, kafka: FakeKafka, options: CheckOptions) -> tuple[CheckResult, int]:
    """A default check (lazy history), and the storage requests it sent."""
    with Session(kafka_client=kafka) as session:
        result = check(session, location, options, now=NOW)
        return result, session.storage_requests


def judged(result: CheckResult) -> dict[str, Any]:
    """A result's report and verdict: what was judged, without what was read to judge it
    (``evidence``, which is less when reading newest first settles the job early)."""
    document = result.to_dict()
    document.pop("evidence")
    return document


def _without_window(result: CheckResult) -> dict[str, Any]:
    document = judged(result)
    for name in WINDOW_FIELDS:
        document["report"].pop(name)
        document["report"]["unknown"].pop(name, None)  # why catch-up is unknown: the rates'
    for source in document["report"]["sources"]:
        for topic in source["topics"]:
            for part in topic["partitions"]:
                part.pop("offset_history")
    return document


# -- the reader --------------------------------------------------------------------------------


def test_lazy_read_lists_the_window_and_reads_it_only_when_asked(tmp_path: Path) -> None:
    location = _write(tmp_path, checkpoint_files(steady()))
    storage = open_storage(location)
    reader = CheckpointReader(storage, location)
    state = reader.read(10, lazy_history=True)
    assert [b.batch_id for b in state.history] == [11]
    assert [info.name for info in state.unread_history] == [str(i) for i in range(2, 11)]
    # LIST commits/, LIST offsets/, GET metadata, GET offsets/11, GET commits/11 (local disk
    # has no content hash): no older batch.
    assert storage.requests.by_operation == {"list": 2, "read": 3}
    storage.requests.reset()
    full = reader.read_history(state)
    assert storage.requests.by_operation == {"read": 9}
    assert full.history == CheckpointReader(open_storage(location), location).read(10).history
    assert full.unread_history == ()
    # The window stays cached across lazy reads: a poll of a lagging job re-reads nothing.
    storage.requests.reset()
    again = reader.read_history(reader.read(10, lazy_history=True))
    assert again.history == full.history
    assert storage.requests.by_operation == {"list": 2}


def test_a_shrunk_offsets_file_reads_the_window_at_once(tmp_path: Path) -> None:
    """Offsets only grow: offsets/C smaller than an older file (the topic was recreated and
    the job caught up at lower offsets) can only be judged with the older batches."""
    batches = [*steady(n=5, end=50_000)[:4], (NOW - 2, {0: 50, 1: 50})]
    location = _write(tmp_path, checkpoint_files(batches))
    state = CheckpointReader(open_storage(location), location).read(10, lazy_history=True)
    assert state.unread_history == () and len(state.history) == 5
    kafka = cluster({0: 50, 1: 50})
    result, _ = lazy(location, kafka, CheckOptions())
    assert result.verdict.health is Health.REWIND
    assert judged(result) == judged(eager(location, kafka, CheckOptions()))


# -- verdicts and numbers: lazy == eager -------------------------------------------------------


def _stopped() -> list:
    return [(NOW - 900 - (11 - i) * 5, {0: 100 * (i + 1), 1: 100 * (i + 1)}) for i in range(12)]


def _stalled() -> list:
    moving = steady(n=12, end=1200)
    return [(at, {0: offsets[0], 1: 300}) for at, offsets in moving]


def _growing() -> list:
    total = 0
    batches = []
    for i in range(12):
        total += 10 * (i + 1)
        batches.append((NOW - 2 - (11 - i) * 10, {0: total, 1: total}))
    return batches


def _capped() -> list:
    """maxOffsetsPerTrigger-like: every batch read 50 records per partition, 10 s apart."""
    return [(NOW - 2 - (11 - i) * 10, {0: 50 * (i + 1), 1: 50 * (i + 1)}) for i in range(12)]


def _runs() -> list:
    """Two hourly runs of three batches; the last one ended 10 min ago."""
    starts = [NOW - 3600 - 600, NOW - 600]
    return [
        (start + i * 5, {0: 100 * (run * 3 + i + 1), 1: 100 * (run * 3 + i + 1)})
        for run, start in enumerate(starts)
        for i in range(3)
    ]


END = {0: 1200, 1: 1200}


def limits(**values: Any) -> CheckOptions:
    return CheckOptions(Thresholds(**values))


# name: (batches, committed, kafka ends, kafka starts (and rate), options, expected verdict,
#        what is read: "C-1" (offsets/C-1 settles it) or "window" (the whole window))
CASES: dict[str, tuple[Any, ...]] = {
    "lagging, records threshold": (
        steady(lag=40), None, END, {}, limits(max_lag_records_total=50), Health.LAGGING, "C-1",
    ),
    "lagging, seconds threshold (time lag estimated)": (
        steady(lag=40), None, END, {}, limits(max_lag_seconds=1), Health.LAGGING, "C-1",
    ),
    "lag within limits: rates and time lag": (
        steady(lag=5), None, END, {}, CheckOptions(), Health.OK, "C-1",
    ),
    "lag within limits, exact time lag": (
        steady(lag=5), None, END, {}, CheckOptions(exact_time_lag=True), Health.OK, "C-1",
    ),
    "lag grew at every batch": (
        _growing(), None, END, {}, CheckOptions(), Health.LAGGING, "window",
    ),
    "stalled: a partition does not move": (
        _stalled(), None, {0: 1200, 1: 400}, {}, CheckOptions(exact_time_lag=True),
        Health.STALLED, "window",
    ),
    "stopped: no batch for 15 min with records waiting": (
        _stopped(), None, {0: 1500, 1: 1500}, {}, CheckOptions(), Health.STOPPED, "window",
    ),
    "data loss": (
        steady(), None, {0: 1300, 1: 1300}, {0: 1250}, CheckOptions(), Health.DATA_LOSS, "window",
    ),
    "rewind: beyond the log end": (
        steady(), None, {0: 1000, 1: 1200}, {}, CheckOptions(), Health.REWIND, "window",
    ),
    "rewind: offsets/C below offsets/C-1, same file size": (
        [*steady(n=11, end=1900), (NOW - 1, {0: 1500, 1: 1500})], None, {0: 1510, 1: 1510}, {},
        CheckOptions(), Health.REWIND, "window",
    ),
    "rate limited: every batch read 100 records, more wait": (
        _capped(), None, {0: 900, 1: 900}, {}, CheckOptions(), Health.OK, "window",
    ),
    "rate limited, seconds threshold (records dated)": (
        _capped(), None, {0: 900, 1: 900}, {}, limits(max_lag_seconds=60), Health.LAGGING,
        "window",
    ),
    "in flight, lagging": (
        steady(n=13, lag=30), 12, {0: 1250, 1: 1250}, {}, limits(max_lag_records_total=10),
        Health.LAGGING, "window",
    ),
    "in flight, stuck": (
        steady(n=13), 12, END, {}, limits(max_in_flight_seconds=1), Health.STALLED, "window",
    ),
    "scheduled runs_every (caught up)": (
        _runs(), None, {0: 600, 1: 600}, {}, CheckOptions(runs_every=3600), Health.OK, "window",
    ),
    "scheduled runs_every, a missed run": (
        [(at - 7200, o) for at, o in _runs()], None, {0: 700, 1: 700}, {"rate": 0.01},
        CheckOptions(runs_every=3600), Health.STOPPED, "window",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_a_job_that_needs_older_batches_reads_them_and_is_judged_as_before(
    tmp_path: Path, name: str
) -> None:
    batches, committed, ends, starts, options, expected, reads = CASES[name]
    location = _write(tmp_path, checkpoint_files(batches, committed))
    starts = dict(starts)
    rate = starts.pop("rate", 1.0)
    result, requests = lazy(location, cluster(dict(ends), dict(starts), rate), options)
    before = eager(location, cluster(dict(ends), dict(starts), rate), options)
    assert result.verdict.health is expected, result.verdict
    assert result.verdict == before.verdict
    report, eager_report = result.report, before.report
    assert report is not None and eager_report is not None
    if reads == "window":
        assert judged(result) == judged(before)
        assert len(report.history) == len(eager_report.history) > 1
        return
    # offsets/C-1 settled it: every number but those measured over the batches read.
    assert _without_window(result) == _without_window(before)
    assert [h.batch_id for h in report.history] == [h.batch_id for h in eager_report.history][-2:]
    # local disk: 2 LISTs, GET metadata, offsets/C, commits/C, offsets/C-1 (+ offsets/L)
    assert requests == 6 + (committed is not None)


def test_a_damaged_older_batch_fails_the_check_that_needs_it(tmp_path: Path) -> None:
    files = checkpoint_files(_growing())
    files["offsets/5"] = b"v1\n{not json"
    location = _write(tmp_path, files)
    from airflow_sparklag.errors import CheckpointCorrupt

    with pytest.raises(CheckpointCorrupt, match="offsets/5"):
        lazy(location, cluster(dict(END)), CheckOptions())
    with Session(kafka_client=cluster(dict(END))) as session:
        [result] = check_many(session, [location], CheckOptions(), now=NOW)
    assert result.report is None and result.verdict.health is Health.UNKNOWN
    assert result.error is not None and result.error.startswith("CheckpointCorrupt")
    # A caught-up job never reads it (as a check with history=1 never did), nor one whose
    # offsets/C-1 settles every rule (as a check with history=2 never did).
    last = _growing()[-1][1]
    for ends, expected in ((last, Health.OK), ({p: o + 5 for p, o in last.items()}, Health.OK)):
        result, _ = lazy(location, cluster(dict(ends)), CheckOptions())
        assert result.verdict.health is expected


HEALTHY: dict[str, tuple[Any, ...]] = {
    "caught up": (steady(), None, CheckOptions()),
    "caught up, thresholds": (
        steady(),
        None,
        CheckOptions(Thresholds(max_lag_seconds=60, max_commit_age_seconds=60)),
    ),
    "caught up, exact time lag": (steady(), None, CheckOptions(exact_time_lag=True)),
    "caught up, batch in flight": ([*steady(), (NOW - 1, END)], 12, CheckOptions()),
}


@pytest.mark.parametrize("name", list(HEALTHY))
def test_a_caught_up_job_reads_no_older_batch_and_keeps_its_verdict(
    tmp_path: Path, name: str
) -> None:
    batches, committed, options = HEALTHY[name]
    location = _write(tmp_path, checkpoint_files(batches, committed))
    result, requests = lazy(location, cluster(dict(END)), options)
    before = eager(location, cluster(dict(END)), options)
    assert result.verdict == before.verdict and result.verdict.health is Health.OK
    # Everything but what only the window gives is the same: lag, ages, commit age, in flight.
    assert _without_window(result) == _without_window(before)
    report = result.report
    assert report is not None and [h.batch_id for h in report.history] == [11]
    assert report.consumption_rate is None and report.catch_up_seconds == 0.0
    # local disk: 2 LISTs, GET metadata, offsets/C, commits/C (+ offsets/L in flight)
    assert requests == 5 + (committed is not None)


# -- on S3: real HTTP requests ------------------------------------------------------------------


@pytest.fixture(scope="module")
def lazy_endpoint(endpoint: str) -> str:
    """test_storage_s3's moto server, with this module's checkpoints in a bucket of their own."""
    admin = _boto_client(endpoint)
    admin.create_bucket(Bucket=BUCKET)
    objects: dict[str, bytes] = {}
    shapes = (("healthy", steady()), ("stateful", steady()), ("lagging", steady()))
    for name, batches in (*shapes, ("growing", _growing())):
        objects.update({f"{name}/{k}": v for k, v in checkpoint_files(batches).items()})
    for index in range(2000):
        objects[f"stateful/state/0/{index % 200}/{index}.delta"] = b"s"
    put_objects(admin, BUCKET, objects.items(), create=False)
    return endpoint


def _sent(session: Session, location: str) -> tuple[Any, SentRequests]:
    storage = session.storage(location)
    return storage, SentRequests(storage)  # type: ignore[arg-type]


def _s3_session(endpoint: str, kafka: FakeKafka) -> Session:
    return Session(kafka_client=kafka, s3_options={"endpoint_url": endpoint, **CREDENTIALS})


@pytest.mark.parametrize("name", ["healthy", "stateful"])
def test_default_check_of_a_healthy_job_on_s3_is_list_and_get_whatever_the_state_size(
    lazy_endpoint: str, name: str
) -> None:
    location = f"s3a://{BUCKET}/{name}"
    with _s3_session(lazy_endpoint, cluster({0: 1200, 1: 1200})) as session:
        storage, sent = _sent(session, location)
        result = check(session, location, CheckOptions(), now=NOW)
        assert result.verdict.health is Health.OK and result.report is not None
        assert result.report.query_id == json.loads((CK35 / "metadata").read_text())["id"]
        # ONE LIST (commits/, metadata, offsets/), GET offsets/11, GET metadata (once per
        # reader: the query id). commits/11 is proven by its ETag. No older batch.
        assert storage.requests.by_operation == {"list": 1, "read": 2}
        assert len(sent.urls) == 3, sent.urls
        assert not any("/state/" in url or "offsets/10" in url for url in sent.urls)
        sent.urls.clear()
        check(session, location, CheckOptions(), now=NOW)
        assert len(sent.urls) == 1  # a repeated check: the listing only
    with _s3_session(lazy_endpoint, cluster({0: 1200, 1: 1200})) as session:
        _, sent = _sent(session, location)
        [result] = check_many(session, [location], CheckOptions(), now=NOW, query_id=False)
        assert result.verdict.health is Health.OK
        assert len(sent.urls) == 2, sent.urls  # LIST + GET offsets/11


def test_check_of_a_lagging_job_on_s3_reads_offsets_c_minus_1_once(lazy_endpoint: str) -> None:
    """Lag 100 per partition, as much as the newest batch read, 2 s after it: offsets/C-1
    settles every rule (no trend, no rate limit, not idle), so the rest is not read."""
    location = f"s3a://{BUCKET}/lagging"
    options = CheckOptions(Thresholds(max_lag_records_total=50))
    with _s3_session(lazy_endpoint, cluster({0: 1300, 1: 1300})) as session:
        storage, sent = _sent(session, location)
        result = check(session, location, options, now=NOW)
        assert result.verdict.health is Health.LAGGING
        # LIST + GET offsets/11 + GET metadata + GET offsets/10.
        assert storage.requests.by_operation == {"list": 1, "read": 3}
        assert sorted(url.split("/lazy/lagging/")[-1] for url in sent.urls[1:]) == [
            "metadata",
            "offsets/10",
            "offsets/11",
        ]
        sent.urls.clear()
        again = check(session, location, options, now=NOW)
        assert len(sent.urls) == 1  # offsets/10 is cached: the listing only
        assert again.to_dict() == result.to_dict()
    with _s3_session(lazy_endpoint, cluster({0: 1300, 1: 1300})) as session:
        state = session.read(location, history=10)
        before = judge_states(session, {location: state}, options, now=NOW)[location]
    assert result.verdict == before.verdict
    assert _without_window(result) == _without_window(before)


def test_check_of_a_job_whose_lag_may_grow_on_s3_reads_its_window_once(
    lazy_endpoint: str,
) -> None:
    location = f"s3a://{BUCKET}/growing"
    ends = {p: o + 200 for p, o in _growing()[-1][1].items()}
    with _s3_session(lazy_endpoint, cluster(dict(ends))) as session:
        storage, sent = _sent(session, location)
        result = check(session, location, CheckOptions(), now=NOW)
        assert result.verdict.health is Health.LAGGING
        # LIST + GET offsets/11 + GET metadata + offsets/10, then the 8 older ones at once.
        assert storage.requests.by_operation == {"list": 1, "read": 11}
        assert len(sent.urls) == 12
        sent.urls.clear()
        again = check(session, location, CheckOptions(), now=NOW)
        assert len(sent.urls) == 1  # the window is cached: the listing only
        # The same judgment; the evidence says the older batches came with the first read.
        assert {**again.to_dict(), "evidence": None} == {**result.to_dict(), "evidence": None}
        assert [read.what for read in again.evidence] == [
            "listing, offsets/C and 9 older batch(es) held, Kafka end offsets",
            "topic retention",
        ]
    with _s3_session(lazy_endpoint, cluster(dict(ends))) as session:
        state = session.read(location, history=10)
        before = judge_states(session, {location: state}, CheckOptions(), now=NOW)[location]
    assert judged(result) == judged(before)
