"""Builders of LagReport objects for the health rule tables (no tests here)."""

from __future__ import annotations

from airflow_sparklag.model.report import (
    HistoryBatch,
    InFlightBatch,
    LagReport,
    PartitionLag,
    Schedule,
    SourceLag,
    TopicLag,
)

NOW = 1_700_000_000.0


def part(
    lag: int = 0,
    *,
    partition: int = 0,
    topic: str = "t",
    committed: int = 100,
    history: tuple[int | None, ...] = (),
    lag_seconds: float | None = None,
    log_start: int = 0,
    data_loss: bool = False,
    ahead_of_log: bool = False,
) -> PartitionLag:
    return PartitionLag(
        topic=topic,
        partition=partition,
        committed_offset=committed,
        planned_offset=None,
        log_start_offset=log_start,
        log_end_offset=committed + lag,
        last_stable_offset=None,
        lag=lag,
        lag_seconds=0.0 if lag == 0 else lag_seconds,
        data_loss=data_loss,
        records_lost=max(0, log_start - committed) if data_loss else 0,
        ahead_of_log=ahead_of_log,
        offset_history=history or (committed,),
    )


def report(
    *parts: PartitionLag,
    batch_ages: tuple[float, ...] = (10.0,),
    committed_at_age: float | None = None,
    in_flight_age: float | None = None,
    mode: str = "estimate",
    missing_topics: tuple[str, ...] = (),
    committed: bool = True,
    kafka: bool = True,
    batch_records: tuple[int | None, ...] | None = None,
    in_flight_records: int = 0,
    schedule: Schedule | None = None,
) -> LagReport:
    """A report at NOW. `batch_ages` are seconds before NOW of each retained batch, oldest first;
    the commit time defaults to the newest batch. `batch_records` are the records each batch
    read (default: 10 for every batch but the oldest, which has no batch before it)."""
    topics: dict[str, list[PartitionLag]] = {}
    for p in parts:
        topics.setdefault(p.topic, []).append(p)
    topic_lags = tuple(
        TopicLag(name, name in missing_topics, tuple(ps), sum(p.lag for p in ps))
        for name, ps in sorted(topics.items())
    )
    sources = (
        (SourceLag("0", "kafka", True, topic_lags, sum(t.lag for t in topic_lags)),)
        if kafka
        else (SourceLag("0", "other", False, ()),)
    )
    if batch_records is None:
        batch_records = (None,) + (10,) * (len(batch_ages) - 1)
    history = tuple(
        HistoryBatch(i, int((NOW - age) * 1000), records)
        for i, (age, records) in enumerate(zip(batch_ages, batch_records, strict=True))
    )
    commit_age = batch_ages[-1] if committed_at_age is None else committed_at_age
    in_flight = (
        None
        if in_flight_age is None
        else InFlightBatch(len(batch_ages), NOW - in_flight_age, in_flight_age, in_flight_records)
    )
    total = sum(p.lag for p in parts)
    return LagReport(
        location="/ckpt",
        query_id="q",
        committed_batch_id=len(batch_ages) - 1 if committed else None,
        committed_at=NOW - commit_age if committed else None,
        commit_age_seconds=commit_age if committed else None,
        in_flight=in_flight,
        sources=sources,
        history=history if committed else (),
        consumption_rate=None,
        production_rate=None,
        catch_up_seconds=None,
        time_lag_mode=mode,
        read_committed=False,
        kafka_fetched_at=NOW,
        kafka_cluster_id=None,
        missing_topics=missing_topics,
        generated_at=NOW,
        continuous=False,
        total_lag=total,
        max_lag=max((p.lag for p in parts), default=0),
        max_lag_topic=None,
        max_lag_partition=None,
        max_lag_seconds=None,
        schedule=schedule,
    )
