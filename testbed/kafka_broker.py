"""A single-node Apache Kafka broker in KRaft mode (broker + controller), from Maven jars."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from testbed.paths import classpath
from testbed.process import Process, TestbedError, free_port, log_tail, port_open

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.started.name = kafka.server.BrokerServer
logger.started.level = INFO
"""


class KafkaBroker:
    """Starts a broker in `workdir`; `bootstrap` is "127.0.0.1:<port>".

    >>> broker = KafkaBroker(Path("/tmp/kb")).start()
    >>> broker.bootstrap
    '127.0.0.1:41234'
    >>> broker.stop()

    Options for fault and security tests (the default broker has neither):

    - `advertised_port`: the PLAINTEXT listener tells clients to connect to this port instead
      of its own (a proxy in front of it, which forwards to `port`); `bootstrap` is then the
      proxy's address, so every client request goes through the proxy;
    - `sasl_users` ({user: password}): an extra SASL_PLAINTEXT listener with the PLAIN
      mechanism at `sasl_bootstrap`, accepting those users;
    - `oauthbearer`: that SASL_PLAINTEXT listener also (or only) takes OAUTHBEARER with
      unsecured JWTs (`alg: none`, validated by Kafka's default unsecured validator), as
      librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` or any `oauth_cb` makes them.
    """

    def __init__(
        self,
        workdir: Path,
        heap: str = "512m",
        *,
        port: int | None = None,
        advertised_port: int | None = None,
        sasl_users: dict[str, str] | None = None,
        oauthbearer: bool = False,
    ) -> None:
        self.workdir = workdir
        self.heap = heap
        self.port = port or free_port()
        self.controller_port = free_port()
        self.advertised_port = advertised_port or self.port
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.sasl_users = dict(sasl_users or {})
        self.oauthbearer = oauthbearer
        self.sasl_port = free_port() if self.sasl_users or oauthbearer else None
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}" if self.sasl_port else None
        self.process: Process | None = None
        self._admin = None  # kept: a dropped AdminClient cancels its pending futures

    def _listener_lines(self) -> list[str]:
        listeners = [
            f"PLAINTEXT://127.0.0.1:{self.port}",
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
        ]
        advertised = [f"PLAINTEXT://127.0.0.1:{self.advertised_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        lines: list[str] = []
        if self.sasl_port:
            listeners.append(f"SASL://127.0.0.1:{self.sasl_port}")
            advertised.append(f"SASL://127.0.0.1:{self.sasl_port}")
            protocols.append("SASL:SASL_PLAINTEXT")
            mechanisms = []
            if self.sasl_users:
                mechanisms.append("PLAIN")
                users = " ".join(f'user_{n}="{secret}"' for n, secret in self.sasl_users.items())
                lines.append(
                    "listener.name.sasl.plain.sasl.jaas.config="
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                )
            if self.oauthbearer:
                mechanisms.append("OAUTHBEARER")
                # No server callback handler: Kafka validates unsecured JWTs (alg: none).
                lines.append(
                    "listener.name.sasl.oauthbearer.sasl.jaas.config="
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    "required;"
                )
            lines.append(f"sasl.enabled.mechanisms={','.join(mechanisms)}")
        return [
            f"listeners={','.join(listeners)}",
            f"advertised.listeners={','.join(advertised)}",
            f"listener.security.protocol.map={','.join(protocols)}",
            *lines,
        ]

    def _write_config(self) -> Path:
        data = self.workdir / "data"
        props = self.workdir / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    *self._listener_lines(),
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "log.flush.interval.messages=1000000",
                    # retention is enforced within a second (tests of time to data loss)
                    "log.retention.check.interval.ms=1000",
                    "num.network.threads=2",
                    "num.io.threads=2",
                    "background.threads=2",
                ]
            )
            + "\n"
        )
        (self.workdir / "log4j2.properties").write_text(
            LOG4J2.format(log=self.workdir / "server.log")
        )
        return props

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            classpath("kafka"),
            main,
            *args,
        ]

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self._write_config()
        cluster_id = str_uuid_base64()
        fmt = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if fmt.returncode != 0:
            raise TestbedError(
                f"Kafka storage format failed ({fmt.returncode}):\n{fmt.stdout}\n{fmt.stderr}"
            )
        self.process = Process(
            "kafka", self._java("kafka.Kafka", str(props)), self.workdir / "stdout.log"
        )
        self.process.wait_ready(self._answers, timeout, f"AdminClient on {self.bootstrap}")
        return self

    def _answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if not self.process or not port_open(self.port):
            return False
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000, "log_level": 0}
        )
        return bool(admin.list_topics(timeout=3).brokers)

    def log_tail(self) -> str:
        return log_tail(self.workdir / "server.log") + "\n" + log_tail(self.workdir / "stdout.log")

    def stop(self) -> None:
        # The kept AdminClient first: alive after the broker, its librdkafka threads print
        # "Connection refused" lines until the interpreter exits (the demo's last output).
        self._admin = None
        if self.process:
            self.process.stop()

    # --- conveniences for tests and the demo -------------------------------------------------
    def admin(self):  # type: ignore[no-untyped-def]
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(
                {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000, "log_level": 3}
            )
        return self._admin

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None) -> str:
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
            operation_timeout=20,
            request_timeout=20,
        )
        futures[name].result(timeout=30)
        self._wait_for_leaders(name, partitions)
        return name

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self.admin().create_partitions([NewPartitions(name, total)], request_timeout=20)[
            name
        ].result(timeout=30)
        self._wait_for_leaders(name, total)

    def _wait_for_leaders(self, name: str, partitions: int) -> None:
        """Metadata and leadership propagate asynchronously: wait until the topic lists every
        partition and each answers a ListOffsets (a new partition's first answers can be
        NOT_LEADER_FOR_PARTITION)."""
        deadline = time.monotonic() + 30
        last: object = None
        while time.monotonic() < deadline:
            md = self.admin().list_topics(name, timeout=5).topics.get(name)
            if md and not md.error and len(md.partitions) == partitions:
                try:
                    self.end_offsets(name, retry=False)
                    return
                except Exception as exc:  # retried until the deadline
                    last = exc
            time.sleep(0.2)
        raise TestbedError(f"topic {name} did not get {partitions} led partitions in time: {last}")

    def produce(
        self, topic: str, n: int, partition: int | None = None, prefix: str = "r", start: int = 0
    ) -> int:
        """Produces n records (values f"{prefix}-{i}"); returns n once all are acknowledged."""
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "message.timeout.ms": 30000}
        )
        errors: list[str] = []

        def on_delivery(err, _msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))

        for i in range(start, start + n):
            kwargs = {"partition": partition} if partition is not None else {}
            while True:
                try:
                    producer.produce(
                        topic,
                        value=f"{prefix}-{i}".encode(),
                        key=str(i).encode(),
                        on_delivery=on_delivery,
                        **kwargs,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        remaining = producer.flush(30)
        if remaining or errors:
            raise TestbedError(
                f"produce to {topic} failed: {remaining} unsent, errors {errors[:3]}"
            )
        return n

    def end_offsets(self, topic: str, retry: bool = True) -> dict[int, int]:
        """Log end offset of each partition; a partition whose leader is moving is asked again
        (for up to 30 s) unless ``retry`` is False."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        deadline = time.monotonic() + (30 if retry else 0)
        while True:
            md = self.admin().list_topics(topic, timeout=10).topics[topic]
            request = {TopicPartition(topic, p): OffsetSpec.latest() for p in md.partitions}
            result = self.admin().list_offsets(request, request_timeout=10)
            try:
                return {tp.partition: fut.result(timeout=15).offset for tp, fut in result.items()}
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)


def str_uuid_base64() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding."""
    import base64

    # Like Kafka's own Uuid.randomUuid(): never start with "-", which the format tool's argument
    # parser would take for an option.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
