"""`sparklag status` (the installed console script) on checkpoints written by real PySpark queries.

Checks the table (one row per partition, numbers as Kafka says), `--json` (parses, same numbers
as `check_checkpoint`), and the exit codes: 0 healthy, 1 lagging, 2 stopped, 4 the check failed
(closed broker port: within the timeout, a clear message, no traceback; missing checkpoint: the
typed error naming the path).
"""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.model.verdict import STOPPED_MIN_IDLE_SECONDS
from airflow_sparklag.monitor import check_checkpoint
from testbed import jobs
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

SPARKLAG = Path(sys.executable).parent / "sparklag"
DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


# A day's commit age decides STOPPED. The checkpoints hold one batch each: without it, once
# their records waited STOPPED_MIN_IDLE_SECONDS they are UNKNOWN (too short a history to
# judge, exit 3), so verdicts would depend on when each test runs.
DAY = ("--max-commit-age-seconds", "86400")


def sparklag(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SPARKLAG), "status", *args], capture_output=True, text=True, timeout=timeout
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def checkpoints(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    """`lagging`: consumed 30 records, then 9 more produced; `caught_up`: consumed all 39."""
    topic = kafka.create_topic(f"cli-{uuid.uuid4().hex[:8]}", partitions=3)
    for p in range(3):
        kafka.produce(topic, 10, partition=p, start=p * 100)
    base = tmp_path_factory.mktemp("cli")
    lagging, caught_up = base / "lagging", base / "caught-up"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(lagging))
    kafka.produce(topic, 2, partition=0, start=1000)
    kafka.produce(topic, 7, partition=2, start=1000)
    waiting_since = time.time()
    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    jobs.run_available_now(df, str(caught_up))
    return {
        "topic": topic,
        "lagging": str(lagging),
        "caught_up": str(caught_up),
        "waiting_since": waiting_since,
    }


def table_rows(stdout: str, topic: str) -> dict[int, dict[str, str]]:
    """The partition table as {partition: {column: cell}} for rows of `topic`."""
    lines = stdout.splitlines()
    header_at = next(
        i for i, line in enumerate(lines) if line.split()[:3] == ["source", "topic", "part"]
    )
    header = lines[header_at].split()
    rows: dict[int, dict[str, str]] = {}
    for line in lines[header_at + 1 :]:
        cells = line.split()
        if len(cells) < 8 or cells[1] != topic:
            continue
        rows[int(cells[2])] = dict(zip(header, cells, strict=False))
    return rows


def test_table_shows_every_partition(checkpoints, kafka):
    topic = checkpoints["topic"]
    proc = sparklag(checkpoints["lagging"], "--bootstrap-servers", kafka.bootstrap, *DAY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ends = kafka.end_offsets(topic)
    assert ends == {0: 12, 1: 10, 2: 17}
    rows = table_rows(proc.stdout, topic)
    assert sorted(rows) == [0, 1, 2], proc.stdout
    for p, row in rows.items():
        assert row["committed"] == "10", row
        assert row["log_end"] == str(ends[p]), row
        assert row["log_start"] == "0", row
        assert row["lag"] == str(ends[p] - 10), row
    assert checkpoints["lagging"] in proc.stdout
    assert "9 records" in proc.stdout  # the summary's total
    assert "health      OK" in proc.stdout


def test_json_parses_and_matches(checkpoints, kafka):
    location = checkpoints["lagging"]
    proc = sparklag(location, "--bootstrap-servers", kafka.bootstrap, "--json", *DAY)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["schema"] == "sparklag/1" and document["summary"]["jobs"] == 1
    (payload,) = document["results"]
    direct = check_checkpoint(
        location,
        kafka_config={"bootstrap.servers": kafka.bootstrap},
        thresholds={"max_commit_age_seconds": 86400},
    )
    assert payload["location"] == location and payload["error"] is None
    assert payload["verdict"]["health"] == "OK" == direct.verdict.health.value
    report = payload["report"]
    assert report["total_lag"] == 9 == direct.report.total_lag
    rows = [
        (p["topic"], p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"])
        for s in report["sources"]
        for t in s["topics"]
        for p in t["partitions"]
    ]
    assert rows == [
        (p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag)
        for p in direct.report.partitions()
    ]
    assert [r[4] for r in rows] == [2, 0, 7]


def test_explain_says_what_each_job_was_judged_on(checkpoints, kafka):
    """--explain: a line per job, what was read and which rule asked; --json: 'evidence'."""
    both = [checkpoints["caught_up"], checkpoints["lagging"]]
    proc = sparklag(*both, "--bootstrap-servers", kafka.bootstrap, "--explain", *DAY)
    assert proc.returncode == 0, proc.stderr
    lines = {
        line.split(": ", 1)[0].removeprefix("evidence    "): line.split(": ", 1)[1]
        for line in proc.stdout.splitlines()
        if line.startswith("evidence    ")
    }
    assert lines[checkpoints["caught_up"]] == "listing, offsets/C, Kafka end offsets", lines
    # One batch: nothing older to read; its waiting records cannot be dated by the estimate,
    # so the time-to-loss rule asked for the topic's retention and their timestamps.
    assert lines[checkpoints["lagging"]] == (
        "listing, offsets/C, Kafka end offsets; topic retention (time_to_data_loss); "
        "record timestamps of 2 partition(s) (time_to_data_loss)"
    ), lines
    payload = json.loads(
        sparklag(both[1], "--bootstrap-servers", kafka.bootstrap, "--json", *DAY).stdout
    )["results"][0]
    assert payload["evidence"][0] == {
        "read": "listing, offsets/C, Kafka end offsets",
        "asked_by": [],
    }, payload["evidence"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SPARKLAG), *args], capture_output=True, text=True, timeout=120)


def documents(checkpoints, kafka, tmp_path):  # type: ignore[no-untyped-def]
    """command -> (exit code, the document on stdout) of every command that takes --json."""
    broker = ["-b", kafka.bootstrap, "--json"]
    lagging, caught_up = checkpoints["lagging"], checkpoints["caught_up"]
    runs = {
        "status one": ("status", lagging, *broker, *DAY),
        "status two": ("status", lagging, caught_up, *broker, *DAY),
        "status unreachable": ("status", lagging, "-b", f"127.0.0.1:{closed_port()}", "--json"),
        "wait health": ("wait", "health", caught_up, *broker, *DAY),
        "wait progress": ("wait", "progress", lagging, *broker),
        "wait catch-up": ("wait", "catch-up", caught_up, "--target-time", "0", *broker),
        "wait gives up": (
            "wait",
            "health",
            lagging,
            "--max-lag-records-per-partition",
            "1",
            "--max-wait",
            "0",
            "--accept",
            "OK",
            "--fail-fast",
            "DATA_LOSS",
            *broker,
        ),
        "history": ("history", lagging, *broker),
        "snapshot": ("snapshot", lagging, "--snapshot-root", str(tmp_path / "snapshots"), *broker),
        "migrate": (
            "migrate",
            lagging,
            "--archive-root",
            str(tmp_path / "archive"),
            "--dry-run",
            "--quiet-period",
            "0",
            *broker,
        ),
    }
    out = {}
    for name, args in runs.items():
        proc = run(*args)
        assert proc.stdout, f"{name}: nothing on stdout; stderr: {proc.stderr}"
        out[name] = (proc.returncode, json.loads(proc.stdout))
    return out


def test_every_command_prints_one_versioned_document_on_stdout(checkpoints, kafka, tmp_path):
    """Before: one job gave a bare result, two {summary, results}; Kafka unreachable printed
    nothing on stdout; wait printed its result on stderr; committed_at was float seconds."""
    import jsonschema

    schema = json.loads((Path(__file__).parents[2] / "docs/schema/sparklag-1.json").read_text())
    found = documents(checkpoints, kafka, tmp_path)
    for name, (_, document) in found.items():
        jsonschema.validate(document, schema)  # the published schema, against real output
        assert document["schema"] == "sparklag/1", name
        assert len(document["results"]) == document["summary"]["jobs"], name
    codes = {name: code for name, (code, _) in found.items()}
    assert codes.pop("migrate") in (0, 5)  # a dry run: planned, or would be refused
    assert codes == {
        "status one": 0, "status two": 0, "status unreachable": 4, "wait health": 0,
        "wait progress": 0, "wait catch-up": 0, "wait gives up": 75, "history": 0,
        "snapshot": 0,
    }  # fmt: skip
    one, two = found["status one"][1], found["status two"][1]
    assert one.keys() == two.keys() and one["summary"].keys() == two["summary"].keys()
    assert one["results"][0].keys() == two["results"][0].keys()
    # a failed check is one state, CHECK_FAILED, on stdout too
    (failed,) = found["status unreachable"][1]["results"]
    assert failed["verdict"]["health"] == "CHECK_FAILED" and "KafkaUnavailable" in failed["error"]
    assert found["status unreachable"][1]["summary"]["health"] == {"CHECK_FAILED": 1}
    # one time format: ISO 8601 UTC beside epoch milliseconds
    report = one["results"][0]["report"]
    assert report["committed_at"].endswith("Z") and isinstance(report["committed_at_ms"], int)
    assert abs(
        datetime.datetime.fromisoformat(report["committed_at"].replace("Z", "+00:00")).timestamp()
        * 1000 - report["committed_at_ms"]
    ) < 1  # fmt: skip
    (past,) = found["history"][1]["results"]
    assert all(p["time"].endswith("Z") and isinstance(p["time_ms"], int) for p in past["points"])
    assert found["wait gives up"][1]["summary"]["timed_out"] is True


@pytest.mark.parametrize(
    ("which", "flags", "code", "health"),
    [
        ("caught_up", [], 0, "OK"),
        (
            "caught_up",
            ["--max-commit-age-seconds", "0.001", "--max-lag-records-per-partition", "0"],
            0,
            "OK",
        ),
        ("lagging", ["--max-lag-records-per-partition", "5"], 1, "LAGGING"),
        ("lagging", ["--max-lag-records-total", "8"], 1, "LAGGING"),
        ("lagging", ["--max-commit-age-seconds", "0.001"], 2, "STOPPED"),
        ("lagging", ["--window", "5", "--allowed-lag", "1", *DAY], 0, "OK"),
    ],
)
def test_exit_codes(checkpoints, kafka, which, flags, code, health):
    proc = sparklag(checkpoints[which], "--bootstrap-servers", kafka.bootstrap, *flags)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"health      {health}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_unreachable_broker_exit_4_fast(checkpoints):
    port = closed_port()
    start = time.monotonic()
    proc = sparklag(checkpoints["lagging"], "--bootstrap-servers", f"127.0.0.1:{port}")
    elapsed = time.monotonic() - start
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert elapsed < 30, elapsed  # the Kafka timeout is 10 s
    assert "Traceback" not in proc.stderr
    assert "KafkaUnavailable" in proc.stderr and f"127.0.0.1:{port}" in proc.stderr
    assert proc.stderr.startswith("sparklag: KafkaUnavailable:"), proc.stderr
    assert "|FAIL|" not in proc.stderr  # no raw librdkafka log lines


def test_missing_checkpoint_exit_4(kafka, tmp_path):
    missing = str(tmp_path / "nowhere" / "ck")
    proc = sparklag(missing, "--bootstrap-servers", kafka.bootstrap)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    assert "CheckpointNotFound" in output and missing in output
    assert "Traceback" not in proc.stderr


def test_several_checkpoints_worst_exit_code(checkpoints, kafka, tmp_path):
    missing = str(tmp_path / "gone")
    proc = sparklag(
        checkpoints["caught_up"], missing, "--bootstrap-servers", kafka.bootstrap, "--json"
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    by_location = {r["location"]: r for r in document["results"]}
    assert set(by_location) == {checkpoints["caught_up"], missing}
    caught_up, gone = by_location[checkpoints["caught_up"]], by_location[missing]
    assert caught_up["report"]["total_lag"] == 0 and caught_up["error"] is None
    assert "CheckpointNotFound" in gone["error"] and missing in gone["error"]
    assert document["summary"]["jobs"] == 2 and document["summary"]["failed_checks"] == 1


@pytest.mark.parametrize(
    ("flags", "code", "health"),
    [
        (["--max-commit-age-seconds", "0.001"], 2, "STOPPED"),
        (["--max-lag-records-per-partition", "5", *DAY], 1, "LAGGING"),
    ],
)
def test_a_fleet_exits_with_its_worst_verdict_not_its_highest_code(
    checkpoints, kafka, flags, code, health
):
    # Before: the highest number won, so the job with no Kafka source (UNKNOWN, 3) hid the
    # stopped one (2) from cron and Nagios-style wrappers.
    no_kafka = str(DATA / "cka")  # written by a real PySpark query from the rate source
    args = [no_kafka, checkpoints["lagging"], "--bootstrap-servers", kafka.bootstrap, "--json"]
    proc = sparklag(*args, *flags)
    assert proc.returncode == code, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)["results"]
    verdicts = {r["location"]: r["verdict"]["health"] for r in results}
    assert verdicts == {no_kafka: "UNKNOWN", checkpoints["lagging"]: health}


@pytest.mark.parametrize(
    "config",
    [
        {"bogus.key": "x"},  # misspelt
        {"security.protocol": "SASL_FOO"},
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},  # no user/password
    ],
)
def test_a_kafka_config_librdkafka_refuses_is_a_configuration_error(
    checkpoints, kafka, tmp_path, config
):
    path = tmp_path / "kafka.json"
    path.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap, **config}))
    proc = sparklag(checkpoints["lagging"], "--kafka-config", str(path))
    assert proc.returncode == 64, proc.stdout + proc.stderr  # before: 4, a failed check
    assert proc.stderr.startswith("sparklag: Cannot create a Kafka client"), proc.stderr
    assert list(config)[-1] in proc.stderr and "Traceback" not in proc.stderr


def test_two_checkpoints_of_one_topic(checkpoints, kafka):
    proc = sparklag(
        checkpoints["lagging"],
        checkpoints["caught_up"],
        "--bootstrap-servers",
        kafka.bootstrap,
        "--detail",
        *DAY,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sections = {s.strip().splitlines()[0]: s for s in proc.stdout.split("-" * 80)}
    lagging = next(s for head, s in sections.items() if checkpoints["lagging"] in head)
    caught_up = next(s for head, s in sections.items() if checkpoints["caught_up"] in head)
    assert "lag         9 records" in lagging and "lag         0 records" in caught_up
    compact = sparklag(
        checkpoints["lagging"],
        checkpoints["caught_up"],
        "--bootstrap-servers",
        kafka.bootstrap,
        *DAY,
    )
    lines = compact.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["JOB", "HEALTH", "LAG"] and len(lines) == 4
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows[checkpoints["lagging"]][2] == "9" and rows[checkpoints["caught_up"]][2] == "0"
    assert lines[3].startswith("2 jobs (2 OK); total lag 9 records")


@pytest.fixture(scope="module")
def remote(spark, kafka, s3, hdfs):  # type: ignore[no-untyped-def]
    """The same query on S3 and on HDFS; 4 records produced after both stopped."""
    topic = kafka.create_topic(f"cli-remote-{uuid.uuid4().hex[:8]}", partitions=2)
    kafka.produce(topic, 6, partition=0)
    kafka.produce(topic, 6, partition=1)
    tag = uuid.uuid4().hex[:8]
    urls = {
        "s3": f"s3a://checkpoints/cli/{tag}",
        "hdfs": f"{hdfs.namenode_uri}/checkpoints/cli/{tag}",
    }
    for url in urls.values():
        jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), url)
    kafka.produce(topic, 4, partition=1, start=100)
    return {"topic": topic, "urls": urls}


@pytest.mark.parametrize("reader", [[], ["--s3-reader", "boto3"]], ids=["default", "boto3"])
def test_status_on_s3_and_hdfs(remote, kafka, s3, hdfs, monkeypatch, reader):
    options = s3.options
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["aws_secret_access_key"])
    proc = subprocess.run(
        [
            str(SPARKLAG),
            "status",
            remote["urls"]["s3"],
            remote["urls"]["hdfs"],
            "--bootstrap-servers",
            kafka.bootstrap,
            "--s3-endpoint-url",
            options["endpoint_url"],
            "--s3-region",
            options["region_name"],
            "--webhdfs-url",
            hdfs.webhdfs_url,
            "--json",
            *reader,
            *DAY,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads(proc.stdout)["results"]
    topic = remote["topic"]
    assert {r["location"] for r in payload} == {remote["urls"]["s3"], remote["urls"]["hdfs"]}
    for result in payload:
        assert result["error"] is None
        parts = [
            (p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"])
            for s in result["report"]["sources"]
            for t in s["topics"]
            if t["topic"] == topic
            for p in t["partitions"]
        ]
        assert parts == [(0, 6, 6, 0), (1, 6, 10, 4)]
        assert result["report"]["total_lag"] == 4


# -- a first check on each estate (tests/first_check.py; docs/index.md) ------------------------


def test_first_check_of_an_available_now_job_on_local_disk(checkpoints, kafka):
    """An availableNow job's checkpoint on local disk, at defaults: the lag is Kafka's end
    offsets minus the committed ones. Once its records waited past the bound, one batch cannot
    tell a job between runs from a stopped one: one message names what to declare, and with
    it the verdict is the schedule's."""
    time.sleep(max(0.0, checkpoints["waiting_since"] + STOPPED_MIN_IDLE_SECONDS + 1 - time.time()))
    topic = checkpoints["topic"]
    first = status_at_defaults(checkpoints["lagging"], kafka.bootstrap)
    ends = kafka.end_offsets(topic)
    assert first.lags() == {(topic, p): ends[p] - 10 for p in range(3)}
    assert first.code == 3 and first.job["verdict"]["health"] == "UNKNOWN", first
    assert first.asks_for() == {"--runs-every", "--max-commit-age-seconds"}, first.messages()
    declared = status_at_defaults(checkpoints["lagging"], kafka.bootstrap, "--runs-every", "1h")
    assert declared.code == 0 and declared.lags() == first.lags(), declared
    assert declared.asks_for() == set(), declared.messages()


def test_first_check_on_s3_with_the_aws_environment(remote, kafka, s3):
    """S3 at defaults: the AWS default chain's variables (keys, region, endpoint) and nothing
    of sparklag's own."""
    options = s3.options
    aws = {
        "AWS_ACCESS_KEY_ID": options["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": options["aws_secret_access_key"],
        "AWS_REGION": options["region_name"],
        "AWS_ENDPOINT_URL": options["endpoint_url"],
    }
    first = status_at_defaults(remote["urls"]["s3"], kafka.bootstrap, env=aws)
    assert first.lags() == {(remote["topic"], 0): 0, (remote["topic"], 1): 4}, first
    assert first.asks_for() == set(), first.messages()


def test_first_check_on_hdfs_with_the_hadoop_configuration(remote, kafka, hdfs, tmp_path):
    """HDFS at defaults: the NameNode's HTTP address from HADOOP_CONF_DIR, as a Hadoop or
    Spark client host has it; without it, one message naming what to give."""
    location = remote["urls"]["hdfs"]
    unset = status_at_defaults(location, kafka.bootstrap)
    assert unset.code == 4, unset
    assert unset.asks_for() == {"--webhdfs-url"}, unset.messages()
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    site = {
        "core-site.xml": {"fs.defaultFS": hdfs.namenode_uri},
        "hdfs-site.xml": {"dfs.namenode.http-address": hdfs.webhdfs_url.removeprefix("http://")},
    }
    for name, values in site.items():
        rows = "".join(
            f"<property><name>{k}</name><value>{v}</value></property>" for k, v in values.items()
        )
        (conf / name).write_text(f"<configuration>{rows}</configuration>")
    first = status_at_defaults(location, kafka.bootstrap, env={"HADOOP_CONF_DIR": str(conf)})
    assert first.lags() == {(remote["topic"], 0): 0, (remote["topic"], 1): 4}, first
    assert first.asks_for() == set(), first.messages()


def test_first_check_on_a_sasl_listener(checkpoints, kafka, tmp_path):
    """A secured cluster: its address alone gets one message naming --kafka-config; the
    client settings file the estate has (a .properties file) then gives the exact answer."""
    from tests.conftest import KAFKA_SASL_PASSWORD, KAFKA_SASL_USER

    topic, location = checkpoints["topic"], checkpoints["lagging"]
    bare = status_at_defaults(location, kafka.sasl_bootstrap)
    assert bare.code == 4, bare
    assert bare.asks_for() == {"--kafka-config"}, bare.messages()
    settings = tmp_path / "client.properties"
    settings.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username={KAFKA_SASL_USER}\nsasl.password={KAFKA_SASL_PASSWORD}\n"
    )
    first = status_at_defaults(location, kafka.sasl_bootstrap, "--kafka-config", str(settings))
    ends = kafka.end_offsets(topic)
    assert first.lags() == {(topic, p): ends[p] - 10 for p in range(3)}
    assert KAFKA_SASL_PASSWORD not in str(first)
