"""Session fixtures: the real test bed (Kafka, S3, HDFS, Spark, Airflow), started once.

Each component starts on first use and stops at the end of the session. A component that cannot
start fails every test that needs it with the component's log tail: nothing is skipped.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Airflow reads AIRFLOW_HOME when it is first imported: point it at a throwaway directory before
# any test module imports airflow. SQLite metadata database, no examples.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="sparklag-airflow-"))
# Each pytest process (every xdist worker too) makes its own and removes it when it exits.
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
# A database set outside is kept; the one this file chose is not: pytest-xdist workers inherit
# the controller's environment, and would all share its SQLite file (SPARKLAG_TEST_AIRFLOW_DB
# marks it).
_DB, _OURS = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "SPARKLAG_TEST_AIRFLOW_DB"
if os.environ.get(_DB, os.environ.get(_OURS)) == os.environ.get(_OURS):
    os.environ[_DB] = os.environ[_OURS] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"

# gcsfs >= 2026 asks a bucket's type over gRPC when it is imported with this on (the default);
# fake-gcs-server does not serve gRPC: a 60 s stall per bucket. Tests only; real GCS is fine.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from testbed.azurite import Azurite  # noqa: E402
from testbed.gcs_server import GcsServer  # noqa: E402
from testbed.hdfs_cluster import HdfsCluster  # noqa: E402
from testbed.kafka_broker import KafkaBroker  # noqa: E402
from testbed.postgres import PostgresServer  # noqa: E402
from testbed.s3_server import S3Server  # noqa: E402
from testbed.secure_hdfs import SecureHdfs  # noqa: E402
from testbed.shared import shared, stop_all  # noqa: E402
from testbed.toxiproxy import Toxiproxy  # noqa: E402

# py4j logs from __del__ at interpreter shutdown, after pytest closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

_TIMINGS: dict[str, float] = {}
Server = TypeVar("Server")


def _timed(name: str, start: float) -> None:
    _TIMINGS[name] = time.monotonic() - start


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _TIMINGS:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in _TIMINGS.items())
        terminalreporter.write_line(f"test bed start-up: {parts}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its start-up timings to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["sparklag_timings"] = dict(_TIMINGS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # type: ignore[no-untyped-def]
    worker = node.gateway.id
    for name, seconds in getattr(node, "workeroutput", {}).get("sparklag_timings", {}).items():
        _TIMINGS[f"{worker} {name}"] = seconds


# The longest test files, longest first (measured: docs/benchmarks.md, "Test suite"). A parallel
# run (scripts/test.sh: --dist loadfile --no-loadscope-reorder) hands work to workers in
# collection order, so these start first and no worker begins a minutes-long file at the end.
SLOW_FILES = (
    "airflow/test_airflow_smoke.py",
    "airflow/test_dags.py",
    "airflow/test_params_boundary.py",
    "integration/test_alert_truth.py",
    "integration/test_secret_canaries.py",
    "airflow/test_metrics.py",
    "integration/test_lag_scenarios.py",
    "integration/test_history_newest_first.py",
    "integration/test_spark35_checkpoints.py",
    "integration/test_faults.py",
    "integration/test_migration_sigkill.py",
    "integration/test_migration_e2e.py",
    "integration/test_kerberos_spark.py",
    "integration/test_kerberos_hdfs.py",
    "airflow/test_lag_page.py",
    "airflow/test_lag_page_parts.py",
    "integration/test_real_time_mode.py",
    "integration/test_async_progress.py",
    "integration/test_short_history.py",
    "integration/test_time_to_loss.py",
    "integration/test_subscribe_pattern.py",
    "airflow/test_hook_amazon.py",
)
# In a parallel run a file's tests stay on one worker (its module fixtures start once), except
# in these files of long, independent tests (no module fixtures): each of their tests goes to
# whichever worker is free. test_dags.py alone is half of tests/airflow (`airflow dags test`).
SPLIT_FILES = ("airflow/test_dags.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The SLOW_FILES first, then the integration and Airflow tests, then the unit tests; each
    file's tests keep their order."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.path.relative_to(REPO / "tests").as_posix()
        if path in SLOW_FILES:
            return (0, SLOW_FILES.index(path))
        return (2, 0) if path.startswith("unit/") else (1, 0)

    items.sort(key=rank)


@pytest.hookimpl(optionalhook=True)  # the compatibility venvs have no pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A parallel run (scripts/test.sh: ``--dist loadfile``) keeps a file's tests on one worker,
    so its module fixtures start once, except the SPLIT_FILES, whose tests go one by one to
    whichever worker is free. (Not with xdist_group marks: pytest 9.2 builds node ids from
    ``Node._id``, so the "@group" suffix xdist 3.8 writes into ``_nodeid`` never reaches its
    scheduler, and every file was spread over all workers, its module fixtures started on each.)
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    split = tuple(f"tests/{path}::" for path in SPLIT_FILES)

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.startswith(split) else nodeid.split("::", 1)[0]

    return FileScheduling(config, log)


@pytest.fixture(scope="session")
def testbed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("testbed")


# --- parallel runs (pytest-xdist): one Kafka broker and HDFS for every worker ------------------
_SHARED_KEY = "sparklag_shared_testbed"
_SHARED_ENV = "SPARKLAG_SHARED_TESTBED"


def _controller_shared_dir(config: pytest.Config) -> Path:
    return config._tmp_path_factory.getbasetemp() / "shared-testbed"  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # type: ignore[no-untyped-def]
    """xdist, in the controller: tell each worker where the run's shared servers live."""
    node.workerinput[_SHARED_KEY] = str(_controller_shared_dir(node.config))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller of a parallel run stops the servers its workers shared (testbed.shared),
    unless SPARKLAG_SHARED_TESTBED says a script shares them between runs and stops them."""
    if config.pluginmanager.hasplugin("dsession") and not os.environ.get(_SHARED_ENV):
        stop_all(_controller_shared_dir(config))


@pytest.fixture(scope="session")
def _shared_testbed(request: pytest.FixtureRequest) -> Path | None:
    """Where the servers shared with other processes live: SPARKLAG_SHARED_TESTBED (scripts/
    test.sh), else the run's directory in an xdist worker; None in a plain run."""
    if os.environ.get(_SHARED_ENV):
        return Path(os.environ[_SHARED_ENV])
    workerinput = getattr(request.config, "workerinput", None)
    return Path(workerinput[_SHARED_KEY]) if workerinput else None


def _session_server(
    shared_dir: Path | None, testbed_dir: Path, name: str, start: Callable[[Path], Server]
) -> Iterator[Server]:
    """`start(workdir)`'s server for the session: shared by the workers of a parallel run
    (testbed/shared.py; the controller stops it), else started and stopped here."""
    began = time.monotonic()
    if shared_dir is not None:
        shared_server = shared(shared_dir, name, lambda: start(shared_dir / name))
        _timed(name, began)
        yield shared_server
        return
    server = start(testbed_dir / name)
    _timed(name, began)
    yield server
    server.stop()  # type: ignore[attr-defined]


# The broker's SASL/PLAIN listener (`kafka.sasl_bootstrap`) accepts this user: the estate of a
# secured cluster, whose client settings a file holds (tests/integration/test_cli.py).
KAFKA_SASL_USER, KAFKA_SASL_PASSWORD = "walker", "walker-secret-5d1e"


@pytest.fixture(scope="session")
def kafka(_shared_testbed: Path | None, testbed_dir: Path) -> Iterator[KafkaBroker]:
    def start(workdir: Path) -> KafkaBroker:
        return KafkaBroker(workdir, sasl_users={KAFKA_SASL_USER: KAFKA_SASL_PASSWORD}).start()

    yield from _session_server(_shared_testbed, testbed_dir, "kafka", start)


def _start_s3(workdir: Path) -> S3Server:
    server = S3Server(workdir).start()
    server.client().create_bucket(Bucket="checkpoints")
    return server


@pytest.fixture(scope="session")
def s3(testbed_dir: Path) -> Iterator[S3Server]:
    # One per worker, not shared: moto spends ~3 ms of CPU in one GIL per request and s3a is
    # chatty; one moto serving every worker and compat run starved Spark's S3 queries (an
    # availableNow query on s3a:// did not finish in 180 s). It starts in ~2 s.
    yield from _session_server(None, testbed_dir, "s3", _start_s3)


@pytest.fixture(scope="session")
def hdfs(_shared_testbed: Path | None, testbed_dir: Path) -> Iterator[HdfsCluster]:
    yield from _session_server(
        _shared_testbed, testbed_dir, "hdfs", lambda workdir: HdfsCluster(workdir).start()
    )


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


def _migrate(url: str) -> None:
    """``airflow db migrate`` of the database at ``url``, as a deployment does it."""
    airflow = Path(sys.executable).parent / "airflow"
    result = subprocess.run(
        [str(airflow), "db", "migrate"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, _DB: url},
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"airflow db migrate of {url} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite Airflow metadata database in the session's AIRFLOW_HOME."""
    start = time.monotonic()
    _migrate(os.environ[_DB])
    _timed("airflow db", start)
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def postgres(testbed_dir: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL server (Debian's package): Airflow's metadata database in production."""
    yield from _session_server(
        None, testbed_dir, "postgres", lambda workdir: PostgresServer(workdir).start()
    )


@pytest.fixture(scope="session")
def airflow_postgres(postgres: PostgresServer) -> str:
    """The URL of a migrated Airflow metadata database on ``postgres``, one for the session
    (this process's Airflow stays on SQLite: tests/airflow/conftest.py's ``MetadataDb``
    points it here for a while)."""
    start = time.monotonic()
    url = postgres.create_database("airflow")
    _migrate(url)
    _timed("airflow db (postgresql)", start)
    return url
