"""Session fixtures: the real test bed (Kafka, S3, HDFS, Spark, Airflow), started once.

Each component starts on first use and stops at the end of the session. A component that cannot
start fails every test that needs it with the component's log tail: nothing is skipped.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Airflow reads AIRFLOW_HOME when it is first imported: point it at a throwaway directory before
# any test module imports airflow. SQLite metadata database, no examples.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="sparklag-airflow-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault(
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
)

# gcsfs >= 2026 asks a bucket's type over gRPC when it is imported with this on (the default);
# fake-gcs-server does not serve gRPC: a 60 s stall per bucket. Tests only; real GCS is fine.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from testbed.azurite import Azurite  # noqa: E402
from testbed.gcs_server import GcsServer  # noqa: E402
from testbed.hdfs_cluster import HdfsCluster  # noqa: E402
from testbed.kafka_broker import KafkaBroker  # noqa: E402
from testbed.s3_server import S3Server  # noqa: E402
from testbed.secure_hdfs import SecureHdfs  # noqa: E402
from testbed.toxiproxy import Toxiproxy  # noqa: E402

# py4j logs from __del__ at interpreter shutdown, after pytest closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

_TIMINGS: dict[str, float] = {}


def _timed(name: str, start: float) -> None:
    _TIMINGS[name] = time.monotonic() - start


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _TIMINGS:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in _TIMINGS.items())
        terminalreporter.write_line(f"test bed start-up: {parts}")


@pytest.fixture(scope="session")
def testbed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("testbed")


@pytest.fixture(scope="session")
def kafka(testbed_dir: Path) -> Iterator[KafkaBroker]:
    start = time.monotonic()
    broker = KafkaBroker(testbed_dir / "kafka").start()
    _timed("kafka", start)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3(testbed_dir: Path) -> Iterator[S3Server]:
    start = time.monotonic()
    server = S3Server(testbed_dir / "s3").start()
    server.client().create_bucket(Bucket="checkpoints")
    _timed("s3", start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hdfs(testbed_dir: Path) -> Iterator[HdfsCluster]:
    start = time.monotonic()
    cluster = HdfsCluster(testbed_dir / "hdfs").start()
    _timed("hdfs", start)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def secure_hdfs(testbed_dir: Path) -> Iterator[SecureHdfs]:
    """A Kerberized HDFS: MiniKdc + secure MiniDFSCluster, WebHDFS over SPNEGO, HTTPS only."""
    start = time.monotonic()
    os.environ.setdefault("PYTHON", sys.executable)  # kinit runs the krb5 package from here
    cluster = SecureHdfs(testbed_dir / "secure-hdfs").start()
    _timed("secure hdfs", start)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def toxiproxy(testbed_dir: Path) -> Iterator[Toxiproxy]:
    """One toxiproxy server for the session; each test module makes the proxies it needs."""
    start = time.monotonic()
    server = Toxiproxy(testbed_dir / "toxiproxy").start()
    _timed("toxiproxy", start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs(testbed_dir: Path) -> Iterator[GcsServer]:
    """fake-gcs-server (in memory) with a bucket ``checkpoints``."""
    start = time.monotonic()
    server = GcsServer(testbed_dir / "gcs").start()
    server.create_bucket("checkpoints")
    _timed("gcs", start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(testbed_dir: Path) -> Iterator[Azurite]:
    """Azurite's blob service with a container ``checkpoints``."""
    start = time.monotonic()
    server = Azurite(testbed_dir / "azurite").start()
    server.create_container("checkpoints")
    _timed("azurite", start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(testbed_dir: Path, s3: S3Server):  # type: ignore[no-untyped-def]
    """The one SparkSession of the test session, with Kafka, s3a (pointed at `s3`) and HDFS."""
    from testbed.spark import spark_session

    start = time.monotonic()
    session = spark_session(testbed_dir / "spark", s3_conf=s3.spark_conf())
    _timed("spark", start)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture
def topic(kafka: KafkaBroker, request: pytest.FixtureRequest) -> str:
    """A fresh 3-partition topic named after the test."""
    name = f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")
    return kafka.create_topic(name, partitions=3)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite Airflow metadata database in the session's AIRFLOW_HOME."""
    start = time.monotonic()
    airflow = Path(sys.executable).parent / "airflow"
    result = subprocess.run(
        [str(airflow), "db", "migrate"],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ.copy(),
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"airflow db migrate failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-3000:]}"
        )
    _timed("airflow db", start)
    return _AIRFLOW_HOME
