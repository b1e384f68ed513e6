"""FleetChecker and discovery on the test bed: a real Spark checkpoint on S3 (moto), cloned,
one clone with a large state/ directory; S3 requests counted by botocore's own events."""

from __future__ import annotations

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from airflow_sparklag.fleet import FleetChecker, discover_checkpoints
from airflow_sparklag.session import Session
from testbed import jobs

pytestmark = pytest.mark.testbed

STATE_OBJECTS = 1500


def _counting_client(s3: Any) -> tuple[Any, Counter[str]]:
    client = s3.client()
    calls: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    client.meta.events.register("before-call.s3", count)
    return client, calls


@pytest.fixture(scope="module")
def fleet(spark: Any, kafka: Any, s3: Any) -> dict[str, Any]:
    topic = kafka.create_topic(f"fleet-{uuid.uuid4().hex[:8]}", partitions=4)
    kafka.produce(topic, 40)
    run = f"fleet-{uuid.uuid4().hex[:8]}"
    original = f"s3a://checkpoints/{run}/team-a/orders"
    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    jobs.run_available_now(jobs.select_value(stream), original)
    client = s3.client()
    listed = client.list_objects_v2(Bucket="checkpoints", Prefix=f"{run}/team-a/orders/")
    keys = [item["Key"] for item in listed["Contents"]]
    copies = {"clicks": f"{run}/team-a/clicks", "stateful": f"{run}/team-b/stateful"}
    for target in copies.values():
        for key in keys:
            client.copy_object(
                Bucket="checkpoints",
                Key=key.replace(f"{run}/team-a/orders", target, 1),
                CopySource={"Bucket": "checkpoints", "Key": key},
            )

    def put(i: int) -> None:
        client.put_object(
            Bucket="checkpoints",
            Key=f"{copies['stateful']}/state/0/{i % 200}/{i}.delta",
            Body=b"x",
        )

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(put, range(STATE_OBJECTS)))
    kafka.produce(topic, 8, start=40)
    return {
        "run": run,
        "topic": topic,
        "locations": sorted(
            [original, *(f"s3a://checkpoints/{target}" for target in copies.values())]
        ),
    }


def test_discovery_never_lists_state(s3: Any, fleet: dict) -> None:
    client, calls = _counting_client(s3)
    found = discover_checkpoints(
        f"s3a://checkpoints/{fleet['run']}",
        session=Session(s3_options={**s3.options, "client": client}),
    )
    assert found == fleet["locations"]
    # run/, team-a/, team-b/ and the three checkpoints: one ListObjectsV2 each
    assert calls == Counter({"ListObjectsV2": 6})


def test_polls_cost_the_same_with_and_without_a_large_state(
    s3: Any, kafka: Any, fleet: dict
) -> None:
    client, calls = _counting_client(s3)
    with FleetChecker(
        prefix=f"s3a://checkpoints/{fleet['run']}",
        kafka_config={"bootstrap.servers": kafka.bootstrap},
        s3_options={**s3.options, "client": client},
        history=1,
    ) as checker:
        results = checker.check()
        assert [r.location for r in results] == fleet["locations"]
        assert all(r.error is None and r.report is not None for r in results)
        assert {r.report.total_lag for r in results if r.report} == {8}
        # discovery (6 LISTs), then per checkpoint: ONE LIST (commits/, metadata, offsets/),
        # GET offsets/C (a fleet check does not read metadata unless query_ids=True)
        assert calls == Counter({"ListObjectsV2": 6 + 3 * 1, "GetObject": 3 * 1})
        assert checker.storage_requests == sum(calls.values())
        calls.clear()
        checker.check()
        assert calls == Counter({"ListObjectsV2": 3 * 1})  # nothing new: one listing each
