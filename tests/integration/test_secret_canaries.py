"""Secret canaries: a distinct marker in every credential slot, every entry point driven through
its error paths for real, and no marker in anything a user, a log or a later task can see.

Slots: Kafka ``sasl.password``, ``sasl.jaas.config`` (``password="..."``), a mistyped
``sasl.passwd``, ``sasl.oauthbearer.config`` and ``ssl.key.password``, in a CLI
``--kafka-config`` file (.properties and JSON) and in the Airflow ``kafka`` connection's extra;
the ``aws`` connection's password and ``aws_session_token`` (also with a trailing newline,
which botocore refuses as a header value); the CLI's AWS environment (secret key, session
token, also with a trailing newline); the ``webhdfs`` connection's password; the
``google_cloud_platform`` connection's service-account key; the ``wasb`` connection's account
key and SAS token; a second ``kafka`` connection for one source (``source_kafka_conn_ids``);
URL userinfo in a location (``s3a://AKIA...:SECRET@bucket/ck``) and in ``--webhdfs-url``.

Error paths, on the real test bed: a bad SASL password (a SASL listener of its own), SASL, OAuth
and SSL handshakes against the plain listener, a closed broker port, a config librdkafka
refuses, unreadable config files, a bucket that does not exist, an S3 endpoint that does not
answer, a checkpoint that does not exist (local and HDFS), a NameNode that does not answer, a
key gcsfs cannot read, Azurite's 403 for a wrong key and a wrong SAS. The "unused slots"
config carries canaries in settings librdkafka ignores on a PLAINTEXT listener, so the same
entry points also run to success and write snapshots, journals and manifests, read back.

Looked at: stdout and stderr (every CLI command in a process of its own with our loggers at
DEBUG; the tasks' captured file descriptors, where Airflow's task logger writes), Python
logging at DEBUG (librdkafka's ``airflow_sparklag.kafka.librdkafka`` included), every
exception with its traceback and chained causes, XCom values, return values, trigger events,
the metrics sent, what `sparklag serve` answers over HTTP, and every object under the
snapshot and archive roots.

Leaks whose source is in a module this harness does not own are listed in KNOWN_LEAKS with the
fix they need there: they make an expected failure while they last, a failure once fixed.

The checkpoint is written here in Spark's own format (two batches of a Kafka source) rather
than by a Spark query: what is under test is what gets printed, not parsing, and a SparkSession
would cost more than the whole harness.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import multiprocessing
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed.kafka_broker import KafkaBroker

pytestmark = pytest.mark.testbed

SASL_USER = "app-user"
KAFKA_TIMEOUT = 4.0  # the CLI's --timeout and the hooks' kafka_timeout (2 s let a SASL handshake
# failure go unseen at load ~20: "did not answer" instead of the refusal, 1 run in 3)
TOPIC_PARTITIONS = 3
CANARY = "CANARY"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- canaries and what was seen -----------------------------------------------------------------


class Canaries:
    """``canaries(slot)`` -> a fresh marker for that slot; :meth:`find` names those in a text."""

    def __init__(self) -> None:
        self._slots: dict[str, str] = {}  # random part (or a whole secret) -> slot

    def __call__(self, slot: str) -> str:
        tag = secrets.token_hex(6)
        self._slots[tag] = slot
        short = re.sub(r"[^A-Za-z0-9]+", "-", slot.rsplit(" ", 1)[-1])
        return f"{CANARY}-{short}-{tag}"

    def register(self, secret: str, slot: str) -> str:
        """A secret that cannot carry a marker's shape (a base64 account key) found as is."""
        self._slots[secret] = slot
        return secret

    def find(self, text: str) -> list[tuple[str, int]]:
        """(slot, position) of every canary in ``text``; a cut one shows as its prefix."""
        found = [(slot, text.find(tag)) for tag, slot in self._slots.items() if tag in text]
        if not found and CANARY in text:
            found.append(("(cut or altered)", text.find(CANARY)))
        return found


@dataclass
class Evidence:
    """Everything an entry point let out, and the error paths that did not happen."""

    canaries: Canaries
    texts: list[tuple[str, str]] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def add(self, where: str, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
        self.texts.append((where, text))  # list.append: safe from the runs' threads
        return text

    def expect(self, where: str, pattern: str | None, text: str) -> None:
        """The error path really ran and its message says what failed."""
        if pattern and not re.search(pattern, text, re.IGNORECASE):
            self.missed.append(f"{where}: expected /{pattern}/ in: {text[-600:]!r}")

    def assert_clean(self, known: dict[str, str] | None = None) -> None:
        """No canary anywhere, every error path taken. Leaks listed in ``known`` (by where they
        show up) make an expected failure, as long as they still happen."""
        known = known or {}
        leaks = [
            (where, f"{where}: the {slot} canary: ...{text[max(0, pos - 200) : pos + 80]!r}")
            for where, text in self.texts
            for slot, pos in self.canaries.find(text)
        ]
        problems = [line for where, line in leaks if not where.startswith(tuple(known))]
        problems += self.missed
        assert not problems, f"{len(problems)} leak(s) or path(s) not taken:\n" + "\n".join(
            problems
        )
        ran = {key for key in known for where, _ in self.texts if where.startswith(key)}
        leaked = {key for key in known for where, _ in leaks if where.startswith(key)}
        assert ran <= leaked, f"fixed? remove from KNOWN_LEAKS: {sorted(ran - leaked)}"
        if leaked:
            pytest.xfail("; ".join(f"{key}: {known[key]}" for key in sorted(leaked)))


# -- the test bed: brokers, a checkpoint, configs -----------------------------------------------


@dataclass(frozen=True)
class Bed:
    plain: str  # the PLAINTEXT listener of the session's broker
    sasl: str  # a SASL_PLAINTEXT (PLAIN) listener
    closed: str  # nothing listens here
    topic: str
    checkpoint: Path  # local, Spark's layout, committed behind the log end
    s3_prefix: str  # s3a://checkpoints/<prefix>: copies of it, and the S3 roots
    s3_client: Any
    s3_endpoint: str
    s3_region: str
    hdfs_uri: str  # hdfs://127.0.0.1:<rpc port>
    webhdfs_url: str
    gcs_endpoint: str  # fake-gcs-server
    azure_blob_endpoint: str  # Azurite: http://127.0.0.1:<port>/<account>
    inputs: Path  # local copies of the checkpoint (a migration may move one)
    local_roots: Path  # snapshot and archive roots on local disk, one directory per test


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker whose SASL listener accepts one user, whose password no config here has."""
    broker = KafkaBroker(
        tmp_path_factory.mktemp("kafka-sasl"), heap="384m", sasl_users={SASL_USER: "right-pw"}
    ).start()
    yield broker
    broker.stop()


def write_checkpoint(root: Path, topic: str, committed: dict[int, int]) -> None:
    """Two committed batches of a Kafka source, as Spark 4 writes them (metadata, offsets/N,
    commits/N)."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    now_ms = int(time.time() * 1000)
    for batch in (0, 1):
        offsets = {str(p): o - (1 - batch) * 2 for p, o in committed.items()}
        (root / "offsets" / str(batch)).write_text(
            "v1\n"
            + json.dumps(
                {
                    "batchWatermarkMs": 0,
                    "batchTimestampMs": now_ms - (1 - batch) * 60_000,
                    "conf": {"spark.sql.shuffle.partitions": "2"},
                }
            )
            + "\n"
            + json.dumps({topic: offsets})
        )
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def upload(client: Any, checkpoint: Path, key_prefix: str) -> None:
    for path in sorted(checkpoint.rglob("*")):
        if path.is_file():
            key = f"{key_prefix}/{path.relative_to(checkpoint).as_posix()}"
            client.put_object(Bucket="checkpoints", Key=key, Body=path.read_bytes())


@pytest.fixture(scope="module")
def bed(  # type: ignore[no-untyped-def]
    kafka, sasl_broker, s3, hdfs, gcs, azurite, tmp_path_factory
) -> Bed:
    topic = kafka.create_topic(f"canary-{uuid.uuid4().hex[:8]}", partitions=TOPIC_PARTITIONS)
    kafka.produce(topic, 10 * TOPIC_PARTITIONS)
    committed = {p: max(0, o - 3) for p, o in kafka.end_offsets(topic).items()}  # lagging
    base = tmp_path_factory.mktemp("canary")
    checkpoint = base / "checkpoint"
    write_checkpoint(checkpoint, topic, committed)
    prefix = f"canary-{uuid.uuid4().hex[:8]}"
    upload(s3.client(), checkpoint, f"{prefix}/ck")
    return Bed(
        plain=kafka.bootstrap,
        sasl=str(sasl_broker.sasl_bootstrap),
        closed=f"127.0.0.1:{closed_port()}",
        topic=topic,
        checkpoint=checkpoint,
        s3_prefix=f"s3a://checkpoints/{prefix}",
        s3_client=s3.client(),
        s3_endpoint=s3.options["endpoint_url"],
        s3_region=s3.options["region_name"],
        hdfs_uri=hdfs.namenode_uri,
        webhdfs_url=hdfs.webhdfs_url,
        gcs_endpoint=gcs.endpoint,
        azure_blob_endpoint=azurite.endpoint,
        inputs=base / "inputs",
        local_roots=base / "roots",
    )


@pytest.fixture(scope="module")
def canaries() -> Canaries:
    return Canaries()


def jaas(password: str) -> str:
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{SASL_USER}" password="{password}";'
    )


def kafka_configs(bed: Bed, mark: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """Kafka config per error path; ``mark(slot)`` plants a canary. Every slot, every path."""
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    oauth = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
    }
    return {
        # Settings librdkafka ignores on a PLAINTEXT listener: the checks succeed.
        "unused-slots": {
            "bootstrap.servers": bed.plain,
            "sasl.password": mark("sasl.password"),
            "ssl.key.password": mark("ssl.key.password"),
            "sasl.oauthbearer.config": f"principal=app scope={mark('sasl.oauthbearer')}",
        },
        "malformed": {  # librdkafka refuses a Java JAAS line and an unknown key
            "bootstrap.servers": bed.plain,
            **sasl,
            "sasl.username": SASL_USER,
            "sasl.jaas.config": jaas(mark("sasl.jaas.config")),
            "sasl.passwd": mark("sasl.passwd"),
            "sasl.password": mark("sasl.password"),
            "ssl.key.password": mark("ssl.key.password"),
            "sasl.oauthbearer.config": f"principal=app clientSecret={mark('oauthbearer')}",
        },
        "bad-password": {
            "bootstrap.servers": bed.sasl,
            **sasl,
            "sasl.username": SASL_USER,
            "sasl.password": mark("sasl.password"),
            "debug": "security,broker",  # librdkafka's own debug lines go to the logger
        },
        "sasl-handshake": {  # SASL against the plain listener
            "bootstrap.servers": bed.plain,
            **sasl,
            "sasl.username": SASL_USER,
            "sasl.password": mark("sasl.password"),
        },
        "oauth": {  # librdkafka quotes the part of the OAuth config it cannot read
            "bootstrap.servers": bed.sasl,
            **oauth,
            "sasl.oauthbearer.config": f"principal=app clientSecret={mark('oauthbearer')}",
        },
        "ssl-handshake": {
            "bootstrap.servers": bed.plain,
            "security.protocol": "SSL",
            "ssl.key.password": mark("ssl.key.password"),
        },
        "unreachable": {
            "bootstrap.servers": bed.closed,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": SASL_USER,
            "sasl.password": mark("sasl.password"),
            "ssl.key.password": mark("ssl.key.password"),
        },
    }


# What each error path must say (the message stays useful); None: it may succeed.
KAFKA_EXPECT: dict[str, str | None] = {
    "unused-slots": None,
    "malformed": r"Kafka client|JAAS|configuration",
    "bad-password": r"authentication|credentials",
    "sasl-handshake": r"handshake|credentials|SASL",
    "oauth": r"OAUTHBEARER|oauthbearer|did not answer",  # librdkafka reports either
    "ssl-handshake": r"SSL|did not answer",
    "unreachable": r"did not answer",
    "extra-not-json": r"bootstrap\.servers",
    "source-cluster": r"authentication|credentials",
}
# A missing checkpoint is an error, except for a progress wait ("not yet").
MISSING = r"no Spark checkpoint|CheckpointNotFound|no checkpoint (found|yet)"
STORAGE_EXPECT: dict[str, str | None] = {
    "local": None,
    "local-missing": MISSING,
    "s3": None,
    "s3-missing-bucket": r"does not exist|BucketNotFound",
    "s3-wrong-endpoint": r"could not talk|could not connect",
    "s3-token-newline": r"header|could not talk",
    "s3-userinfo": r"holds credentials",
    "hdfs-missing": MISSING,
    "hdfs-down": r"could not talk|connection|did not answer|NameNode",
    "hdfs-url-userinfo": None,
    # gcsfs falls back from the unreadable service-account key to KeyError('refresh_token')
    "gcs-bad-key": r"refresh_token|private.key|service.account|credential",
    "azure-bad-key": r"403|authenticat|AuthorizationFailure|denied",
    "azure-sas": r"403|authenticat|AuthorizationFailure|denied|signature",
}


@dataclass(frozen=True)
class Scenario:
    """One error path: a Kafka config and a checkpoint location kind."""

    kafka: str
    storage: str

    @property
    def name(self) -> str:
        return f"{self.kafka}@{self.storage}"

    def expected(self, uses_kafka: bool) -> str | None:
        """What the output must say; Kafka errors only where Kafka is asked at all."""
        if self.kafka != "unused-slots" and self.storage != "local":
            return None  # two errors: either may come first
        storage = STORAGE_EXPECT[self.storage]
        if storage is not None:
            return storage
        return KAFKA_EXPECT[self.kafka] if uses_kafka else None


def scenarios(
    kafka_variants: list[str], storage_kinds: list[str], *both: tuple[str, str]
) -> list[Scenario]:
    """Each Kafka config on a local checkpoint, each storage error with the config that works,
    and ``both`` (a Kafka config and a storage error at once)."""
    return (
        [Scenario(k, "local") for k in kafka_variants]
        + [Scenario("unused-slots", s) for s in storage_kinds]
        + [Scenario(k, s) for k, s in both]
    )


def location_for(bed: Bed, storage: str, mark: Callable[[str], str]) -> str:
    """A checkpoint location of that kind (a fresh copy where it can be read: a migration
    moves it)."""
    if storage == "local":
        copy = bed.inputs / uuid.uuid4().hex[:8]
        shutil.copytree(bed.checkpoint, copy)
        return str(copy)
    if storage == "local-missing":
        return str(bed.inputs / "no-such-checkpoint")
    if storage == "s3-missing-bucket":
        return f"s3a://no-such-bucket-{uuid.uuid4().hex[:8]}/ck"
    if storage == "s3-userinfo":
        return (
            bed.s3_prefix.replace("s3a://", f"s3a://AKIASPARKLAG:{mark('url-userinfo')}@") + "/ck"
        )
    if storage == "s3":
        key_prefix = f"{bed.s3_prefix.split('/', 3)[3]}/inputs/{uuid.uuid4().hex[:8]}"
        upload(bed.s3_client, bed.checkpoint, key_prefix)
        return f"s3a://checkpoints/{key_prefix}"
    if storage.startswith("s3"):  # the client fails before it reads anything
        return f"{bed.s3_prefix}/ck"
    if storage.startswith("hdfs"):
        return f"{bed.hdfs_uri}/canary/no-such-checkpoint"
    if storage.startswith("gcs"):  # the credentials fail before anything is read
        return f"gs://checkpoints/{bed.s3_prefix.rsplit('/', 1)[-1]}/ck"
    if storage.startswith("azure"):  # so does the account key (403)
        return f"abfs://checkpoints/{bed.s3_prefix.rsplit('/', 1)[-1]}/ck"
    raise ValueError(storage)


def roots_for(bed: Bed, storage: str, test: str) -> tuple[str, str]:
    """(snapshot root, archive root) of one run of ``test``, on the store of the location."""
    run = f"{test}/{uuid.uuid4().hex[:8]}"
    if storage == "s3-missing-bucket":
        base = f"s3a://no-such-bucket-{uuid.uuid4().hex[:8]}/{run}"
    elif storage.startswith("s3"):
        base = f"{bed.s3_prefix}/roots/{run}"
    elif storage.startswith("hdfs"):
        base = f"{bed.hdfs_uri}/canary/roots/{run}"
    elif storage.startswith(("gcs", "azure")):
        scheme = "gs" if storage.startswith("gcs") else "abfs"
        base = f"{scheme}://checkpoints/roots/{run}"
    else:
        base = str(bed.local_roots / run)
    return f"{base}/snapshots", f"{base}/archive"


def written_objects(bed: Bed, test: str, evidence: Evidence) -> int:
    """Read every file and object ``test`` wrote under its roots, locally and on S3."""
    count = 0
    for path in sorted((bed.local_roots / test).rglob("*")):
        if path.is_file():
            evidence.add(f"file {path}", path.read_bytes().decode("utf-8", "replace"))
            count += 1
    client = bed.s3_client
    prefix = f"{bed.s3_prefix.split('/', 3)[3]}/roots/{test}/"
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket="checkpoints", Prefix=prefix
    ):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket="checkpoints", Key=item["Key"])["Body"].read()
            evidence.add(f"object {item['Key']}", body.decode("utf-8", "replace"))
            count += 1
    return count


# Leaks whose source is a module this harness may not change, with the fix it needs there.
KNOWN_LEAKS: dict[str, str] = {}


# -- the CLI ------------------------------------------------------------------------------------

CLI_KAFKA = [
    "unused-slots",
    *(k for k in KAFKA_EXPECT if k not in ("unused-slots", "extra-not-json", "source-cluster")),
]
# Also as a JSON file, with --json output: a success (every command), a refused config and a
# quoted OAuth config (`status`).
CLI_JSON_VARIANTS = ("unused-slots", "malformed", "oauth")
CLI_STORAGE = [
    "local-missing",
    "s3",
    "s3-missing-bucket",
    "s3-wrong-endpoint",
    "s3-token-newline",
    "s3-userinfo",
    "hdfs-missing",
    "hdfs-down",
    "hdfs-url-userinfo",  # last: `status` only
]
# Config files the CLI cannot read: each holds canaries, and the error must not quote them.
BAD_FILES = {
    "bad-json": lambda c: ('{"bootstrap.servers": "b:9092", "sasl.password": "' + c).encode(),
    "bad-properties": lambda c: f"bootstrap.servers=b:9092\nsasl.password {c}\n".encode(),
    "not-utf8": lambda c: b"\xff\xfe" + f"sasl.password={c}\n".encode(),
}
CLI_COMMANDS = ("status", "wait", "snapshot", "migrate", "history", "serve")
USES_KAFKA = {"wait-progress": False}
# `serve` counts a job whose check failed in a metric, by error class, instead of printing it.
SERVE_JOB_ERROR = r"sparklag_check_errors_total\{[^}]*\} 1"


def cli_commands(location: str, snapshots: str, archive: str) -> dict[str, list[str]]:
    """Every command of `sparklag --help`, as it would be run against ``location``."""
    wait = ["--max-wait", "1", "--poll-interval", "1"]
    return {
        "status": ["status", location],
        "status-prefix": ["status", "--prefix", location, "--no-progress"],
        "wait-health": ["wait", "health", location, *wait],
        "wait-progress": ["wait", "progress", location, "--after-batch-id", "5", *wait],
        "wait-catch-up": ["wait", "catch-up", location, "--target-time", str(time.time()), *wait],
        "snapshot": ["snapshot", location, "--snapshot-root", snapshots],
        "snapshot-group": [
            "snapshot",
            location,
            "--snapshot-root",
            snapshots,
            "--consumer-group",
            f"canary-{uuid.uuid4().hex[:6]}",
        ],
        "history": ["history", location, "--batches", "5"],
        "serve-once": ["serve", location, "--once"],
        "migrate-dry-run": [
            "migrate",
            location,
            "--archive-root",
            archive,
            "--dry-run",
            "--quiet-period",
            "0",
        ],
    }


def write_config(path: Path, config: dict[str, str], form: str) -> str:
    if form == "json":
        path.write_text(json.dumps(config))
    else:
        path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
    return str(path)


@dataclass(frozen=True)
class CliRun:
    where: str
    argv: list[str]
    env: dict[str, str]
    expect: str | None


def cli_env(mark: Callable[[str], str], *, token_newline: bool = False) -> dict[str, str]:
    """The AWS default chain's environment, every secret a canary."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW_CONN_"))}
    token = mark("env AWS_SESSION_TOKEN") + ("\n" if token_newline else "")
    env.update(
        AWS_ACCESS_KEY_ID="AKIASPARKLAGCANARYID",
        AWS_SECRET_ACCESS_KEY=mark("env AWS_SECRET_ACCESS_KEY"),
        AWS_SESSION_TOKEN=token,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def storage_flags(bed: Bed, storage: str, mark: Callable[[str], str]) -> list[str]:
    endpoint = f"http://127.0.0.1:{closed_port()}" if storage == "s3-wrong-endpoint" else None
    webhdfs = bed.webhdfs_url
    if storage == "hdfs-down":
        webhdfs = f"http://127.0.0.1:{closed_port()}"
    if storage == "hdfs-url-userinfo":
        webhdfs = bed.webhdfs_url.replace("http://", f"http://root:{mark('webhdfs-url')}@")
    return [
        "--s3-endpoint-url", endpoint or bed.s3_endpoint, "--s3-region", bed.s3_region,
        "--webhdfs-url", webhdfs, "--hdfs-user", "root",
    ]  # fmt: skip


def cli_runs(bed: Bed, command: str, canaries: Canaries, files: Path) -> list[CliRun]:
    """``command`` on every Kafka config and storage error, with --json on the config that
    works. Reading the config file and the --webhdfs-url do not depend on the command: the
    JSON file forms of the failing configs, the unreadable files and the URL userinfo run
    with `status` only."""
    runs = []
    storage = CLI_STORAGE if command == "status" else CLI_STORAGE[:-1]
    for scenario in scenarios(CLI_KAFKA, storage):
        json_too = scenario.storage == "local" and scenario.kafka in (
            CLI_JSON_VARIANTS if command == "status" else CLI_JSON_VARIANTS[:1]
        )
        forms = ("properties", "json") if json_too else ("properties",)
        for form in forms:
            where = f"sparklag {command} [{scenario.name}, {form}]"

            def mark(slot: str, where: str = where) -> str:
                return canaries(f"{where} {slot}")

            config = kafka_configs(bed, mark)[scenario.kafka]
            path = files / f"{uuid.uuid4().hex[:8]}.{form}"
            location = location_for(bed, scenario.storage, mark)
            snapshots, archive = roots_for(bed, scenario.storage, f"cli-{command}")
            argv = cli_commands(location, snapshots, archive)[command]
            argv += ["--kafka-config", write_config(path, config, form)]
            argv += ["--timeout", str(KAFKA_TIMEOUT), *storage_flags(bed, scenario.storage, mark)]
            argv += ["--json"] if form == "json" else []
            env = cli_env(mark, token_newline=scenario.storage == "s3-token-newline")
            expect = scenario.expected(USES_KAFKA.get(command, True))
            if command == "serve-once" and STORAGE_EXPECT[scenario.storage]:
                expect = SERVE_JOB_ERROR
            runs.append(CliRun(where, argv, env, expect))
    for name, content in BAD_FILES.items() if command == "status" else ():
        where = f"sparklag {command} [{name}]"
        path = files / f"{name}-{uuid.uuid4().hex[:8]}.conf"
        path.write_bytes(content(canaries(f"{where} file")))
        location = location_for(bed, "local", canaries)
        argv = cli_commands(location, *roots_for(bed, "local", f"cli-{command}"))[command]
        runs.append(
            CliRun(where, [*argv, "--kafka-config", str(path)], cli_env(canaries), "kafka-config")
        )
    return runs


# Modules the CLI imports on its paths: loaded once in the fork server, not in every run.
CLI_PRELOAD = [
    "airflow_sparklag.cli",
    "airflow_sparklag.session",
    "airflow_sparklag.monitor",
    "airflow_sparklag.fleet",
    "airflow_sparklag.conditions",
    "airflow_sparklag.snapshot",
    "airflow_sparklag.migration",
    "airflow_sparklag.consumer_group",
    "airflow_sparklag.storage.s3",
    "airflow_sparklag.storage.webhdfs",
    "boto3",
    "botocore.session",
    "confluent_kafka.admin",
    "requests",
]


def cli_process(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """`sparklag argv` in a worker process: the run's own environment, its stdout and stderr
    (file descriptors 1 and 2), our loggers at DEBUG on stderr. Nothing of an earlier run is
    kept: main() opens its own session and clients."""
    import io

    from airflow_sparklag.cli import main

    os.environ.clear()
    os.environ.update(env)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "wb", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "wb", closefd=False), write_through=True)
        logging.basicConfig(
            level=logging.INFO, format="%(levelname)s %(name)s %(message)s", force=True
        )
        logging.getLogger("airflow_sparklag").setLevel(logging.DEBUG)
        code = main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
        texts = []
        for handle in (out, err):
            handle.seek(0)
            texts.append(handle.read().decode("utf-8", "replace"))
    return code, texts[0], texts[1]


CliOutcomes = dict[str, list[tuple[CliRun, Any]]]  # command -> [(run, future of its outcome)]


@pytest.fixture(scope="module")
def cli_outcomes(bed: Bed, canaries: Canaries, tmp_path_factory: Any) -> Iterator[CliOutcomes]:
    """Every command on every scenario, all started at once in worker processes forked from a
    server that imported the CLI (a process per run costs more than the runs here). A late
    line of one run may show in the next run's output: any canary anywhere fails."""
    files = tmp_path_factory.mktemp("cli-configs")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*CLI_PRELOAD, __name__])  # this module: cli_process
    with ProcessPoolExecutor(8, mp_context=context) as pool:
        yield {
            command: [
                (run, pool.submit(cli_process, run.argv, run.env))
                for run in cli_runs(bed, command, canaries, files)
            ]
            for command in cli_commands("/ck", "/s", "/a")
        }


def test_every_cli_command_is_covered() -> None:
    """A command added to `sparklag` must be added to the harness too."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "sparklag"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    listed = set(re.search(r"\{([a-z,-]+)\}", out).group(1).split(","))  # type: ignore[union-attr]
    assert listed == set(CLI_COMMANDS)
    assert {name.split("-")[0] for name in cli_commands("/ck", "/s", "/a")} == listed


@pytest.mark.parametrize("command", list(cli_commands("/ck", "/s", "/a")))
def test_cli_prints_no_canary(command, bed, canaries, cli_outcomes):  # type: ignore[no-untyped-def]
    evidence = Evidence(canaries)
    for run, future in cli_outcomes[command]:
        code, stdout, stderr = future.result(timeout=120)
        evidence.add(f"{run.where} stdout", stdout)
        evidence.add(f"{run.where} stderr", stderr)
        evidence.expect(f"{run.where} (exit {code})", run.expect, stdout + stderr)
        if "Traceback" in stderr:
            evidence.missed.append(f"{run.where}: a traceback: {stderr[-800:]}")
    written = written_objects(bed, f"cli-{command}", evidence)
    if command.startswith("snapshot"):
        assert written, f"sparklag {command} wrote nothing to read back"
    evidence.assert_clean()


SERVE_SCENARIOS = [
    Scenario("unused-slots", "local"),
    Scenario("unreachable", "local"),
    Scenario("oauth", "local"),
    Scenario("unused-slots", "s3-token-newline"),
    Scenario("unused-slots", "s3-userinfo"),
]


def http_get(url: str) -> str:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return f"{response.status} {response.read().decode('utf-8', 'replace')}"
    except urllib.error.HTTPError as exc:  # 502, 503: their body is what a client sees
        return f"{exc.code} {exc.read().decode('utf-8', 'replace')}"


def serve_and_scrape(run: CliRun, location: str) -> dict[str, str]:
    """`sparklag serve` (the console script) until its first refresh; what its HTTP endpoints
    answer, then what it printed once stopped (SIGTERM)."""
    import signal
    import urllib.parse

    port = closed_port()
    script = Path(sys.executable).parent / "sparklag"
    argv = [str(script), *run.argv, "--address", "127.0.0.1", "--port", str(port)]
    seen: dict[str, str] = {}
    with subprocess.Popen(
        argv, env=run.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as server:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and '"refreshes": 0' in seen.get(
            "/healthz", '"refreshes": 0'
        ):
            time.sleep(0.3)
            with contextlib.suppress(OSError):
                seen["/healthz"] = http_get(f"{base}/healthz")
        job = urllib.parse.quote(location, safe="")
        for path in ("/metrics", "/healthz", f"/history?job={job}&batches=5"):
            seen[path.split("?")[0]] = http_get(base + path)
        server.send_signal(signal.SIGTERM)
        seen["stdout"], seen["stderr"] = server.communicate(timeout=30)
    return seen


def test_serve_endpoints_show_no_canary(bed, canaries, tmp_path):  # type: ignore[no-untyped-def]
    """The exporter's HTTP answers (/metrics, /healthz with the last error, /history) on a
    failing refresh, a failing job and a working one."""
    evidence = Evidence(canaries)
    runs = []
    for scenario in SERVE_SCENARIOS:
        where = f"sparklag serve [{scenario.name}]"

        def mark(slot: str, where: str = where) -> str:
            return canaries(f"{where} {slot}")

        location = location_for(bed, scenario.storage, mark)
        config = write_config(
            tmp_path / f"{uuid.uuid4().hex[:8]}.properties",
            kafka_configs(bed, mark)[scenario.kafka],
            "properties",
        )
        argv = ["serve", location, "--kafka-config", config, "--interval", "1"]
        argv += ["--timeout", str(KAFKA_TIMEOUT), *storage_flags(bed, scenario.storage, mark)]
        env = cli_env(mark, token_newline=scenario.storage == "s3-token-newline")
        runs.append((CliRun(where, argv, env, None), location))
    with ThreadPoolExecutor(len(runs)) as pool:
        outcomes = list(pool.map(lambda given: serve_and_scrape(*given), runs))
    for (run, _), seen in zip(runs, outcomes, strict=True):
        for what, text in seen.items():
            evidence.add(f"{run.where} {what}", text)
        evidence.expect(f"{run.where} /healthz", r'"refreshes": [1-9]', seen.get("/healthz", ""))
    evidence.assert_clean(KNOWN_LEAKS)


# -- Airflow: operators, sensors, triggers, the hook ----------------------------------------------

# Also: a properties text pasted as the extra; a source read from a cluster of its own
# (source_kafka_conn_ids) whose connection has the bad password.
AIRFLOW_KAFKA = list(KAFKA_EXPECT)
AIRFLOW_STORAGE = [
    *(s for s in CLI_STORAGE if s != "hdfs-url-userinfo"),
    "gcs-bad-key",  # a service-account key that cannot be read
    "azure-bad-key",  # a wrong account key: Azurite answers 403
    "azure-sas",  # a SAS token Azurite refuses
]
# The location's credentials when the connection cannot even be read (nothing known to scrub).
AIRFLOW_BOTH = [("extra-not-json", "s3-userinfo")]
AWS_CONN = {"s3-wrong-endpoint": "canary_aws_down", "s3-token-newline": "canary_aws_newline"}
WASB_CONN = {"azure-sas": "canary_wasb_sas"}
# Errors test_connection() can meet: it reads no checkpoint, it asks each connection.
CONNECTION_ERRORS = ("s3-wrong-endpoint", "s3-token-newline", "hdfs-down")


def kafka_conn_id(variant: str) -> str:
    return f"canary_kafka_{variant.replace('-', '_')}"


def airflow_connections(bed: Bed, canaries: Canaries) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` values: one kafka connection per config, the aws and webhdfs
    connections (working, token with a line end, endpoint or NameNode down)."""
    env = {}
    for variant in (v for v in AIRFLOW_KAFKA if v != "source-cluster"):  # two of these
        conn_id = kafka_conn_id(variant)

        def mark(slot: str, conn_id: str = conn_id) -> str:
            return canaries(f"connection {conn_id} {slot}")

        if variant == "extra-not-json":
            extra: Any = f"bootstrap.servers={bed.plain}\nsasl.password={mark('sasl.password')}"
        else:
            extra = kafka_configs(bed, mark)[variant]
        env[conn_id] = json.dumps({"conn_type": "kafka", "extra": extra})
    for conn_id, endpoint, newline in (
        ("canary_aws", bed.s3_endpoint, ""),
        ("canary_aws_newline", bed.s3_endpoint, "\n"),
        ("canary_aws_down", f"http://127.0.0.1:{closed_port()}", ""),
    ):
        token = canaries(f"connection {conn_id} aws_session_token") + newline
        extra = {"endpoint_url": endpoint, "region_name": bed.s3_region, "aws_session_token": token}
        login, password = "AKIASPARKLAGCANARYID", canaries(f"connection {conn_id} password")
        env[conn_id] = json.dumps(
            {"conn_type": "aws", "login": login, "password": password, "extra": extra}
        )
    for conn_id, port in (
        ("canary_webhdfs", int(bed.webhdfs_url.rsplit(":", 1)[1])),
        ("canary_webhdfs_down", closed_port()),
    ):
        password = canaries(f"connection {conn_id} password")
        env[conn_id] = json.dumps(
            {"conn_type": "webhdfs", "host": "127.0.0.1", "port": port, "login": "root",
             "password": password}
        )  # fmt: skip
    env.update(cloud_connections(bed, canaries))
    return {f"AIRFLOW_CONN_{conn_id.upper()}": value for conn_id, value in env.items()}


def cloud_connections(bed: Bed, canaries: Canaries) -> dict[str, str]:
    """google_cloud_platform: a service-account key that cannot be read; wasb: a wrong
    account key, a SAS token (both connection strings to Azurite)."""
    key = canaries("connection canary_gcp private_key")
    keyfile = {
        "type": "service_account",
        "project_id": "canary-project",
        "private_key_id": canaries("connection canary_gcp private_key_id"),
        "private_key": f"-----BEGIN PRIVATE KEY-----\n{key}\n-----END PRIVATE KEY-----\n",
        "client_email": "sparklag@canary-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"http://127.0.0.1:{closed_port()}/token",
    }
    gcp_extra = {"keyfile_dict": json.dumps(keyfile), "endpoint_url": bed.gcs_endpoint}
    account_key = canaries.register(
        base64.b64encode(f"{CANARY}{secrets.token_hex(16)}".encode()).decode(),
        "connection canary_wasb AccountKey",
    )
    blob = f"BlobEndpoint={bed.azure_blob_endpoint};"
    sas = "sv=2021-08-06&ss=b&srt=sco&sp=rl&se=2030-01-01T00:00:00Z&sig="
    sas += canaries("connection canary_wasb_sas sig")
    with_key = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={account_key};"
    )
    return {
        "canary_gcp": json.dumps({"conn_type": "google_cloud_platform", "extra": gcp_extra}),
        "canary_wasb": wasb_connection(with_key + blob),
        "canary_wasb_sas": wasb_connection(f"{blob}SharedAccessSignature={sas}"),
    }


def wasb_connection(connection_string: str) -> str:
    return json.dumps({"conn_type": "wasb", "extra": {"connection_string": connection_string}})


@pytest.fixture(scope="module")
def connections(bed: Bed, canaries: Canaries) -> Iterator[None]:
    """The connections as environment variables, and hooks bounded by KAFKA_TIMEOUT (the
    operators and triggers build their hooks with the default Kafka timeout)."""
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    with pytest.MonkeyPatch.context() as patch:
        for name, value in airflow_connections(bed, canaries).items():
            patch.setenv(name, value)
        patch.setitem(SparkLagHook.__init__.__kwdefaults__, "kafka_timeout", KAFKA_TIMEOUT)
        yield


class StatsRecorder:
    """Airflow's ``Stats`` as the provider's metrics see it: every name and tag sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __getattr__(self, kind: str) -> Callable[..., None]:  # gauge, incr, timing, ...
        def send(name: str, *args: Any, tags: Any = None, **kwargs: Any) -> None:
            self.sent.append(f"{kind} {name} {args} {tags}")

        return send


class XComRecorder:
    """``context["ti"]``: keeps what the task pushes."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@dataclass
class Run:
    """One entry point on one scenario: its connections, where it writes, what it let out."""

    where: str
    scenario: Scenario
    location: str
    snapshots: str
    archive: str
    conns: dict[str, str]
    evidence: Evidence
    texts: list[str] = field(default_factory=list)

    def call(self, what: str, work: Callable[[dict[str, Any]], Any]) -> Any:
        """``work(context)``; its return value or exception (traceback and causes, as the task
        runner logs them) and its XCom pushes are evidence."""
        context: dict[str, Any] = {"ti": XComRecorder()}
        try:
            result = work(context)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # TaskDeferred is no Exception
            self._seen(f"{what} raised", "".join(traceback.format_exception(exc)))
            result = exc
        else:
            shown = vars(result) if type(result).__name__ == "PokeReturnValue" else result
            self._seen(f"{what} returned", shown)
        for key, value in context["ti"].pushed.items():
            self._seen(f"{what} XCom {key}", value)
        return result

    def build(self, make: Callable[[], Any]) -> Any:
        """The operator or sensor ``make()`` returns, or None when its constructor refused the
        arguments (a location holding credentials is refused where the DAG is parsed): what it
        raised is evidence like any error of the task."""
        built = self.call("__init__", lambda _: make())
        return None if isinstance(built, BaseException) else built

    def first_event(self, trigger: Any) -> dict[str, Any]:
        """The trigger's first event, as the triggerer would hand it to the task."""

        async def first() -> dict[str, Any]:
            async for event in trigger.run():
                return dict(event.payload)
            raise AssertionError("the trigger ended without an event")

        payload = asyncio.run(asyncio.wait_for(first(), 30))
        self._seen(f"{type(trigger).__name__} event", payload)
        return payload

    def _seen(self, what: str, value: Any) -> None:
        self.texts.append(self.evidence.add(f"{self.where} {what}", value))


# Each entry point: what it runs on one scenario. ``run.conns`` are the three connection ids.


def check_operator(run: Run) -> None:
    from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

    op = run.build(
        lambda: SparkLagCheckOperator(task_id="check", location=run.location, **run.conns)
    )
    if op is not None:
        run.call("execute", op.execute)


def branch_operator(run: Run) -> None:
    from airflow_sparklag.operators.sparklag import SparkLagBranchOperator

    op = run.build(
        lambda: SparkLagBranchOperator(
            task_id="branch", location=run.location, default_task_id="next", **run.conns
        )
    )
    if op is not None:
        run.call("choose_branch", op.choose_branch)


def fleet_operator(run: Run) -> None:
    from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator

    for given in ({"locations": [run.location], "xcom_results": "all"}, {"prefix": run.location}):
        op = run.build(
            lambda given=given: SparkLagFleetCheckOperator(task_id="fleet", **given, **run.conns)
        )
        if op is not None:
            run.call(f"execute({', '.join(given)})", op.execute)


def lag_sensor(run: Run, deferrable: bool) -> Any:
    from airflow_sparklag.sensors.sparklag import SparkLagSensor

    return SparkLagSensor(
        task_id="lag", location=run.location, deferrable=deferrable, timeout=1, poke_interval=1,
        **run.conns,
    )  # fmt: skip


def progress_sensor(run: Run, deferrable: bool) -> Any:
    from airflow_sparklag.sensors.sparklag import SparkCheckpointProgressSensor

    return SparkCheckpointProgressSensor(
        task_id="progress", location=run.location, after_batch_id=5, deferrable=deferrable,
        timeout=1, poke_interval=1, **run.conns,
    )  # fmt: skip


def catch_up_sensor(run: Run, deferrable: bool) -> Any:
    from airflow_sparklag.sensors.sparklag import SparkKafkaCatchUpSensor

    return SparkKafkaCatchUpSensor(
        task_id="catch_up", location=run.location, target_time=time.time(),
        deferrable=deferrable, timeout=1, poke_interval=1, **run.conns,
    )  # fmt: skip


def trigger_for(sensor: Any, run: Run) -> Any:
    """The trigger the sensor defers to, with the sensor's own parameters."""
    from airflow_sparklag.triggers import sparklag as triggers

    common = {"deadline": time.time() + 1, "poll_interval": 1, **run.conns}
    kind = type(sensor).__name__
    if kind == "SparkLagSensor":
        return triggers.SparkLagTrigger(run.location, **common)
    if kind == "SparkCheckpointProgressSensor":
        return triggers.SparkCheckpointProgressTrigger(run.location, after_batch_id=5, **common)
    target_ms = int(float(sensor.target_time) * 1000)
    return triggers.SparkKafkaCatchUpTrigger(run.location, target_time_ms=target_ms, **common)


def poked(make: Callable[[Run, bool], Any]) -> Callable[[Run], None]:
    def adapter(run: Run) -> None:
        sensor = run.build(lambda: make(run, False))
        if sensor is not None:
            run.call("poke", sensor.poke)

    return adapter


def deferred(make: Callable[[Run, bool], Any]) -> Callable[[Run], None]:
    """execute() (it checks once, then defers), the trigger's run() to its first event (the
    trigger the sensor would defer to when its own check failed), execute_complete(event)."""
    from airflow.sdk.exceptions import TaskDeferred

    def adapter(run: Run) -> None:
        sensor = run.build(lambda: make(run, True))
        if sensor is None:
            return
        outcome = run.call("execute", sensor.execute)
        trigger = outcome.trigger if isinstance(outcome, TaskDeferred) else None
        event = run.first_event(trigger or trigger_for(sensor, run))
        run.call("execute_complete", lambda context: sensor.execute_complete(context, event))

    return adapter


def snapshot_operator(run: Run) -> None:
    from airflow_sparklag.operators.snapshot import CheckpointSnapshotOperator

    op = run.build(
        lambda: CheckpointSnapshotOperator(
            task_id="snapshot",
            location=run.location,
            snapshot_root=run.snapshots,
            consumer_group=f"canary-{uuid.uuid4().hex[:8]}",
            **run.conns,
        )
    )
    if op is not None:
        run.call("execute", op.execute)


def export_operator(run: Run) -> None:
    from airflow_sparklag.operators.snapshot import ConsumerGroupExportOperator

    op = run.build(
        lambda: ConsumerGroupExportOperator(
            task_id="export",
            location=run.location,
            consumer_group=f"canary-{uuid.uuid4().hex[:8]}",
            **run.conns,
        )
    )
    if op is not None:
        run.call("execute", op.execute)


def migration_operator(run: Run) -> None:
    """A real migration where the checkpoint is a fresh copy (snapshot, journal, manifest and
    archive are written and read back), a dry run elsewhere."""
    from airflow_sparklag.operators.snapshot import CheckpointMigrationOperator

    op = run.build(
        lambda: CheckpointMigrationOperator(
            task_id="migrate",
            location=run.location,
            archive_root=run.archive,
            snapshot_root=run.snapshots,
            quiet_period=0,
            dry_run=run.scenario.storage not in ("local", "s3"),
            **run.conns,
        )
    )
    if op is not None:
        run.call("execute", op.execute)


def hook_calls(run: Run) -> None:
    """The hook as a @task would call it (what it raises is what the task log shows)."""
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    hook = SparkLagHook(**run.conns)
    try:
        run.call("hook.check", lambda _: hook.check(run.location).to_dict())
        run.call("hook.lag_history", lambda _: hook.lag_history(run.location).to_dict())
    finally:
        hook.close()


def connection_test(run: Run) -> None:
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    run.call("hook.test_connection", lambda _: SparkLagHook(**run.conns).test_connection())


ENTRY_POINTS: dict[str, Callable[[Run], None]] = {
    "SparkLagCheckOperator": check_operator,
    "SparkLagBranchOperator": branch_operator,
    "SparkLagFleetCheckOperator": fleet_operator,
    "SparkLagSensor poke": poked(lag_sensor),
    "SparkLagSensor deferred": deferred(lag_sensor),
    "SparkCheckpointProgressSensor poke": poked(progress_sensor),
    "SparkCheckpointProgressSensor deferred": deferred(progress_sensor),
    "SparkKafkaCatchUpSensor poke": poked(catch_up_sensor),
    "SparkKafkaCatchUpSensor deferred": deferred(catch_up_sensor),
    "CheckpointSnapshotOperator": snapshot_operator,
    "ConsumerGroupExportOperator": export_operator,
    "CheckpointMigrationOperator": migration_operator,
    "SparkLagHook": hook_calls,
    "SparkLagHook.test_connection": connection_test,
}
NO_KAFKA = {"SparkCheckpointProgressSensor poke", "SparkCheckpointProgressSensor deferred"}


def expected(entry: str, scenario: Scenario) -> str | None:
    if entry == "SparkCheckpointProgressSensor poke" and scenario.storage.endswith("-missing"):
        return None  # "no checkpoint yet" is a poke that is not done, no error
    if entry == "SparkLagHook.test_connection":
        if scenario.storage == "local":
            return KAFKA_EXPECT[scenario.kafka]
        return STORAGE_EXPECT[scenario.storage] if scenario.storage in CONNECTION_ERRORS else None
    return scenario.expected(entry not in NO_KAFKA)


def test_every_airflow_class_is_covered() -> None:
    """An operator, sensor or trigger added to the provider must be added to the harness."""
    import inspect

    from airflow_sparklag.operators import fleet, snapshot, sparklag
    from airflow_sparklag.sensors import sparklag as sensors
    from airflow_sparklag.triggers import sparklag as triggers

    public = {
        name
        for module in (fleet, snapshot, sparklag, sensors, triggers)
        for name, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and not name.startswith("_")
    }
    covered = {entry.split()[0] for entry in ENTRY_POINTS}
    covered |= {"SparkLagTrigger", "SparkCheckpointProgressTrigger", "SparkKafkaCatchUpTrigger"}
    assert public <= covered


def conn_ids(scenario: Scenario) -> dict[str, Any]:
    """Every connection of an entry point, each failing the way ``scenario`` says."""
    source = scenario.kafka == "source-cluster"
    conns: dict[str, Any] = {
        "kafka_config_id": kafka_conn_id("unused-slots" if source else scenario.kafka),
        "aws_conn_id": AWS_CONN.get(scenario.storage, "canary_aws"),
        "webhdfs_conn_id": "canary_webhdfs" + ("_down" if scenario.storage == "hdfs-down" else ""),
        "gcp_conn_id": "canary_gcp",
        "wasb_conn_id": WASB_CONN.get(scenario.storage, "canary_wasb"),
    }
    if source:  # the checkpoint's one source, "0", read from the cluster of that connection
        conns["source_kafka_conn_ids"] = {"0": kafka_conn_id("bad-password")}
    return conns


def airflow_run(
    bed: Bed, canaries: Canaries, entry: str, scenario: Scenario, evidence: Evidence
) -> None:
    """``entry`` on ``scenario``: a location of that kind, connections failing that way."""
    test = f"airflow-{re.sub(r'[^A-Za-z0-9]+', '-', entry)}"
    snapshots, archive = roots_for(bed, scenario.storage, test)
    where = f"{entry} [{scenario.name}]"
    run = Run(
        where=where,
        scenario=scenario,
        location=location_for(bed, scenario.storage, lambda slot: canaries(f"{where} {slot}")),
        snapshots=snapshots,
        archive=archive,
        conns=conn_ids(scenario),
        evidence=evidence,
    )
    ENTRY_POINTS[entry](run)
    evidence.expect(run.where, expected(entry, scenario), "\n".join(run.texts))


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_airflow_entry_point_lets_out_no_canary(  # type: ignore[no-untyped-def]
    entry, bed, canaries, connections, caplog, capfd, monkeypatch
):
    """``entry`` on every scenario (in threads: most of the time is waiting for an error)."""
    stats = StatsRecorder()
    monkeypatch.setattr("airflow_sparklag.operators.metrics._stats", lambda: stats)
    caplog.set_level(logging.INFO)
    for name in ("airflow_sparklag", "airflow.task", "airflow.providers", "airflow.sdk"):
        caplog.set_level(logging.DEBUG, logger=name)
    evidence = Evidence(canaries)
    with ThreadPoolExecutor(max_workers=8) as pool:
        runs = [
            pool.submit(airflow_run, bed, canaries, entry, scenario, evidence)
            for scenario in scenarios(AIRFLOW_KAFKA, AIRFLOW_STORAGE, *AIRFLOW_BOTH)
        ]
        for run in runs:
            run.result()
    captured = capfd.readouterr()
    evidence.add(f"{entry}: Python logging", caplog.text)
    evidence.add(f"{entry}: stdout (task log)", captured.out)
    evidence.add(f"{entry}: stderr", captured.err)
    evidence.add(f"{entry}: metrics sent", "\n".join(stats.sent))
    written = written_objects(bed, f"airflow-{re.sub(r'[^A-Za-z0-9]+', '-', entry)}", evidence)
    if entry in ("CheckpointSnapshotOperator", "CheckpointMigrationOperator"):
        assert written, f"{entry} wrote nothing to read back"
    evidence.assert_clean(KNOWN_LEAKS)
