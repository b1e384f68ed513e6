"""SparkLagEventTrigger in-process: construction and its Airflow-version gate, and real polls
of real Spark checkpoints against real Kafka (one transition, one event; a state that
persists, none; recovery when asked for; a fleet names the job that changed).

The triggerer, the asset watcher and a triggerer restart are tested in a real deployment in
tests/airflow/test_event_trigger_airflow.py."""

from __future__ import annotations

import asyncio
import importlib
import json
import time
import uuid
from collections.abc import Callable

import pytest

from airflow_sparklag.errors import InvalidParameter, UsageError
from airflow_sparklag.triggers.events import airflow_version

THRESHOLDS = {"max_lag_records_total": 100}


@pytest.mark.airflow_compat
def test_needs_airflow_3_else_round_trips_as_an_asset_watcher():
    from airflow_sparklag.triggers.events import SparkLagEventTrigger

    if airflow_version() < (3, 0):
        with pytest.raises(UsageError, match=r"needs Airflow 3\.0 or later .* this is Airflow 2"):
            SparkLagEventTrigger("/ck/orders", kafka_config_id="kafka_x")
        return
    from airflow.sdk import Asset, AssetWatcher

    trigger = SparkLagEventTrigger(
        "s3a://b/ck/orders",
        prefix="s3a://b/ck/team-a",
        unhealthy="stalled, stopped",
        fire_on_recovery=True,
        thresholds={"max_lag_seconds": 60},
        kafka_config_id="kafka_x",
        aws_conn_id="aws_x",
        poll_interval=30,
    )
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # the triggerer stores them as JSON
    assert kwargs["locations"] == ["s3a://b/ck/orders"] and kwargs["unhealthy"] == [
        "STALLED",
        "STOPPED",
    ]
    assert "deadline" not in kwargs and "accept" not in kwargs
    module, name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    # The recorded state follows what is watched, not how often.
    given = {k: v for k, v in kwargs.items() if k != "state_variable"}
    assert SparkLagEventTrigger(**given).state_variable == trigger.state_variable
    assert SparkLagEventTrigger(**{**given, "poll_interval": 5}).state_variable == (
        trigger.state_variable
    )
    assert SparkLagEventTrigger(**{**given, "unhealthy": ["LAGGING"]}).state_variable != (
        trigger.state_variable
    )
    asset = Asset("orders_health", watchers=[AssetWatcher(name="orders", trigger=trigger)])
    assert asset.watchers[0].trigger is trigger


@pytest.mark.skipif(airflow_version() < (3, 0), reason="the trigger is Airflow 3 only")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "location: give a checkpoint location, locations or a prefix"),
        ({"location": "/ck", "unhealthy": ["OK", "LAGGING"]}, "unhealthy: name the verdicts"),
        ({"location": "/ck", "unhealthy": "lagging stale"}, "known verdicts are LAGGING"),
    ],
)
def test_bad_settings_name_the_parameter(kwargs, message):
    from airflow_sparklag.triggers.events import SparkLagEventTrigger

    with pytest.raises(InvalidParameter, match=message):
        SparkLagEventTrigger(**kwargs)


class Watch:
    """Runs a trigger in the background of the test's event loop, collecting its events."""

    def __init__(self, trigger) -> None:  # type: ignore[no-untyped-def]
        self.trigger = trigger
        self.events: list[dict] = []
        self.task = asyncio.ensure_future(self._collect())

    async def _collect(self) -> None:
        async for event in self.trigger.run():
            json.dumps(event.payload)  # JSON-safe, as an asset event's extra
            self.events.append(event.payload)

    async def until(self, check: Callable[[], bool], what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.task.done():
                self.task.result()  # the trigger's own exception, if any
                pytest.fail(f"the trigger ended while waiting for {what}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {timeout}s; events: {self.events}")
            await asyncio.sleep(0.1)

    async def polls(self, more: int) -> None:
        """Wait until the trigger has polled ``more`` more times."""
        target = self.trigger.polls + more
        await self.until(lambda: self.trigger.polls >= target, f"{more} more polls")

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.mark.testbed
@pytest.mark.skipif(airflow_version() < (3, 0), reason="the trigger is Airflow 3 only")
def test_one_event_per_transition_none_while_it_persists(kafka, kafka_conn, consume, tmp_path):
    """Two jobs of one fleet, both OK: nothing fires. One of them falls behind: one event
    naming it, and none over the next polls while it stays behind. It catches up: one
    "recovered" event. The other job never fires."""
    from airflow_sparklag.triggers.events import SparkLagEventTrigger

    topic = kafka.create_topic(f"events-{uuid.uuid4().hex[:6]}", partitions=3)
    quiet = kafka.create_topic(f"events-quiet-{uuid.uuid4().hex[:6]}", partitions=1)
    kafka.produce(topic, 30)
    kafka.produce(quiet, 5)
    orders = consume(topic, str(tmp_path / "fleet" / "orders")).location
    consume(quiet, str(tmp_path / "fleet" / "quiet"))

    async def scenario() -> None:
        trigger = SparkLagEventTrigger(
            prefix=str(tmp_path / "fleet"),
            thresholds=THRESHOLDS,
            fire_on_recovery=True,
            kafka_config_id=kafka_conn,
            poll_interval=0.2,
        )
        watch = Watch(trigger)
        try:
            await watch.polls(3)
            assert watch.events == []  # OK from the start: nothing to say
            await asyncio.to_thread(kafka.produce, topic, 300)  # lag 300 > 100
            await watch.until(lambda: len(watch.events) == 1, "the unhealthy event")
            (event,) = watch.events
            assert (event["status"], event["job"], event["previous"]) == ("unhealthy", orders, "OK")
            assert event["health"] == "LAGGING", event
            assert event["result"]["report"]["total_lag"] == 300
            assert "300" in event["message"], event["message"]
            await watch.polls(10)  # still 300 behind at every poll
            assert len(watch.events) == 1, watch.events
            await asyncio.to_thread(consume, topic, orders)  # the job catches up
            await watch.until(lambda: len(watch.events) == 2, "the recovered event")
            recovered = watch.events[1]
            assert (recovered["status"], recovered["job"]) == ("recovered", orders)
            assert (recovered["previous"], recovered["health"]) == ("LAGGING", "OK")
            await watch.polls(5)
            assert len(watch.events) == 2, watch.events
            # Every poll went through one checker on one session: its readers and clients
            # lived between polls (one reader per job, none rebuilt).
            # (one poll may be in flight when looked at: counted by the trigger, not yet by
            # the checker)
            assert trigger.polls - 1 <= trigger.fleet.polls <= trigger.polls
            assert sorted(k[0] for k in trigger.fleet.session._readers) == trigger.fleet.locations
        finally:
            await watch.stop()

    asyncio.run(scenario())


@pytest.mark.testbed
@pytest.mark.skipif(airflow_version() < (3, 0), reason="the trigger is Airflow 3 only")
def test_first_seen_unhealthy_fires_once_and_a_failed_check_keeps_the_side(
    kafka_conn, lagging_job, tmp_path
):
    """A job already behind when the watcher starts fires once; without ``fire_on_recovery``
    and with a checkpoint that cannot be read, nothing else fires, and the trigger keeps
    polling (it never ends)."""
    from airflow_sparklag.triggers.events import SparkLagEventTrigger

    missing = str(tmp_path / "not-there")

    async def scenario() -> None:
        trigger = SparkLagEventTrigger(
            lagging_job.location,
            locations=[missing],
            thresholds={"max_lag_records_total": 10},
            kafka_config_id=kafka_conn,
            poll_interval=0.2,
        )
        watch = Watch(trigger)
        try:
            await watch.until(lambda: len(watch.events) == 1, "the unhealthy event")
            await watch.polls(5)
        finally:
            await watch.stop()
        (event,) = watch.events
        assert (event["job"], event["previous"], event["health"]) == (
            lagging_job.location,
            None,
            "LAGGING",
        )

    asyncio.run(scenario())


@pytest.mark.testbed
@pytest.mark.skipif(airflow_version() < (3, 0), reason="the trigger is Airflow 3 only")
def test_imminent_data_loss_fires_at_defaults_before_kafka_deletes(
    spark, kafka, kafka_conn, tmp_path
):
    """Issue 34 item 4: a real query stopped after ONE batch on a topic kept 60 s while
    production goes on, watched at defaults (no threshold): the trigger fires "unhealthy"
    on the time_to_data_loss verdict while the records are still there, and its payload
    (what a remediation run reads from the asset event) says when they go and what to do."""
    from airflow_sparklag.triggers.events import SparkLagEventTrigger
    from testbed import jobs

    ck = str(tmp_path / "ck")
    topic = jobs.stopped_after_one_batch(spark, kafka, ck, retention_s=60)

    async def scenario() -> list[dict]:
        trigger = SparkLagEventTrigger(ck, kafka_config_id=kafka_conn, poll_interval=1)
        watch = Watch(trigger)
        try:
            await watch.until(lambda: len(watch.events) == 1, "the imminent-loss event", 120)
            await watch.polls(3)
        finally:
            await watch.stop()
        return watch.events

    with jobs.trickle(kafka, topic, 10):
        (event,) = asyncio.run(scenario())
    verdict, report = event["result"]["verdict"], event["result"]["report"]
    assert (event["status"], event["health"], verdict["rule"]) == (
        "unhealthy",
        "LAGGING",
        "time_to_data_loss",
    ), event["message"]
    assert 0 < report["min_time_to_loss_seconds"] <= 60, report["min_time_to_loss_seconds"]
    assert not any(p["data_loss"] for p in report["sources"][0]["topics"][0]["partitions"])
    # the next step, in the message the remediation DAG logs and in the verdict
    for step in ("restart or scale the job", "retention.ms", "sparklag snapshot"):
        assert step in event["message"] and step in verdict["reason"], event["message"]
    print(f"fired with {report['min_time_to_loss_seconds']:.1f} s left: {event['message']}")


def _poll(location: str, health: str) -> object:
    from airflow_sparklag.model.verdict import Health, HealthVerdict
    from airflow_sparklag.monitor import CheckResult

    # A failed check has no report (the breach message then is the error).
    error = None if health != "UNKNOWN" else "CheckpointNotFound: gone"
    return CheckResult(
        None, HealthVerdict(Health(health), f"{health} because", "rule"), location, error
    )


@pytest.mark.skipif(airflow_version() < (3, 0), reason="the trigger is Airflow 3 only")
@pytest.mark.parametrize(
    ("fire_on_recovery", "verdicts", "fired"),
    [
        (False, ["OK", "OK", "OK"], []),
        (False, ["OK", "LAGGING", "LAGGING", "STALLED", "LAGGING"], ["unhealthy OK->LAGGING"]),
        (False, ["LAGGING", "LAGGING"], ["unhealthy None->LAGGING"]),
        (False, ["OK", "LAGGING", "OK", "LAGGING"], ["unhealthy OK->LAGGING"] * 2),
        (
            True,
            ["OK", "LAGGING", "UNKNOWN", "LAGGING", "OK", "OK", "UNKNOWN", "OK"],
            ["unhealthy OK->LAGGING", "recovered LAGGING->OK"],
        ),
        (True, ["UNKNOWN", "OK", "STOPPED"], ["unhealthy UNKNOWN->STOPPED"]),
    ],
)
def test_transitions_table(fire_on_recovery, verdicts, fired):
    """One job's verdicts poll after poll -> the events: only crossings of the set fire."""
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from airflow_sparklag.triggers.events import SparkLagEventTrigger

    trigger = SparkLagEventTrigger("/ck/orders", fire_on_recovery=fire_on_recovery)
    recorded: dict[str, str] = {}
    events: list[str] = []
    for health in verdicts:
        new, recorded = trigger._transitions(
            recorded, [_poll("/ck/orders", health)], SparkLagHook()
        )
        events += [f"{e['status']} {e['previous']}->{e['health']}" for e in new]
    assert events == fired


@pytest.mark.skipif(airflow_version() < (3, 0), reason="the trigger is Airflow 3 only")
def test_payload_has_no_credentials_of_a_location():
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from airflow_sparklag.triggers.events import SparkLagEventTrigger

    location = "s3a://AKIAKEY:s3cr%2Fet@lake/ck/orders"
    trigger = SparkLagEventTrigger(location)
    (event,), recorded = trigger._transitions({}, [_poll(location, "STALLED")], SparkLagHook())
    text = json.dumps(event)
    assert "AKIAKEY" not in text and "s3cr" not in text, text
    assert event["job"] == "s3a://lake/ck/orders" and list(recorded) == [event["job"]]
