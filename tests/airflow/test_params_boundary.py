"""Every templated parameter a task cannot read fails it at once, naming the parameter, before
anything is read or changed; the text Airflow renders for a valid value works.

Fields are Jinja templates over DAG params, rendered by the Task SDK
(``task.render_template_fields``) exactly as a worker renders them: a bool renders as
``"True"``, a list as ``"['STOPPED', 'LAGGING']"``, a dict as ``"{'max_lag_seconds': 60}"``.
Each class of bad input has a test against the real test bed (Kafka, Spark-written checkpoints,
a copy of the sample checkpoint ck35) on a task that would otherwise run: a readable value does
what it says (migrates, fails on the breach, passes, waits), so the refusals are not vacuous.
"""

from __future__ import annotations

import hashlib
import shutil
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from airflow_sparklag.operators.snapshot import CheckpointMigrationOperator
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import SparkLagSensor
from tests.airflow.conftest import airflow_env

pytestmark = pytest.mark.testbed

CK35 = Path(__file__).resolve().parents[1] / "data" / "checkpoints" / "ck35"
LAGGING_AT_10 = {"max_lag_records_total": 10}  # the lagging job (45 records behind) breaches it


class XComRecorder:
    """Stands in for the task instance in ``context["ti"]``: keeps what the task pushes."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def rendered(
    make: Callable[[], Any], params: dict[str, Any], *, native: bool = False
) -> tuple[Any, dict[str, Any]]:
    """``make()``'s task in a DAG with ``params``, its fields rendered by the Task SDK; the
    task and the context to execute it with."""
    with DAG(
        f"params_boundary_{uuid.uuid4().hex[:8]}",
        schedule=None,
        params=params,
        render_template_as_native_obj=native,
    ) as dag:
        task = make()
    context: dict[str, Any] = {"params": dag.params.dump(), "ti": XComRecorder()}
    task.render_template_fields(context)
    return task, context


def tree(root: Path) -> dict[str, str | None]:
    """Every path under ``root`` (hidden .crc files too) -> sha256 of its bytes (None: a dir)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else None
        for p in sorted(root.rglob("*"))
    }


def invalid(name: str) -> str:
    """What the task's failure says about parameter ``name`` (operators/base.read_params)."""
    return f"invalid parameter {name}: "


# -- the migration: nothing moves on a value it could not read ----------------------------------


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    location = tmp_path / "ck"
    shutil.copytree(CK35, location)
    return location


def migration(kafka_conn: str, checkpoint: Path, archive: Path, **given: Any) -> tuple[Any, dict]:
    """A migration whose every other parameter would let it run (quiet period 0, no dry run)."""
    return rendered(
        lambda: CheckpointMigrationOperator(
            task_id="migrate",
            location="{{ params.checkpoint }}",
            archive_root="{{ params.archive_root }}",
            dry_run="{{ params.dry_run }}",
            quiet_period="{{ params.quiet_period }}",
            kafka_config_id=kafka_conn,
        ),
        {
            "checkpoint": str(checkpoint),
            "archive_root": str(archive),
            "dry_run": False,
            "quiet_period": 0,
            **given,
        },
    )


BAD_MIGRATION = [
    ("dry_run", "Ture"),
    ("dry_run", ""),  # bool("") is False: it would have migrated
    ("quiet_period", "nan"),  # now - t < nan is always False: no quiet period at all
    ("quiet_period", "-60"),
]


@pytest.mark.parametrize(
    ("name", "value"), BAD_MIGRATION, ids=[f"{n}={v!r}" for n, v in BAD_MIGRATION]
)
def test_migration_refuses_an_unreadable_value_and_touches_nothing(
    kafka_conn, checkpoint, tmp_path, name, value
):
    archive = tmp_path / "archive"
    before = tree(checkpoint)
    task, context = migration(kafka_conn, checkpoint, archive, **{name: value})
    assert getattr(task, name) == value  # the rendered text, as a worker sees it
    with pytest.raises(AirflowFailException) as failure:
        task.execute(context)
    assert invalid(name) in str(failure.value)
    assert tree(checkpoint) == before
    assert not archive.exists()


def test_migration_with_the_default_rendered_values_migrates(kafka_conn, checkpoint, tmp_path):
    """The same task with the params' defaults, rendered "False" and "0": it really migrates,
    so each refusal above is the parameter's doing."""
    archive = tmp_path / "archive"
    before = tree(checkpoint)
    task, context = migration(kafka_conn, checkpoint, archive)
    assert (task.dry_run, task.quiet_period) == ("False", "0")
    (payload,) = task.execute(context)["results"]
    assert payload["status"] == "completed"
    assert not checkpoint.exists()
    assert tree(Path(payload["archive_location"])) == before


# -- verdict names -----------------------------------------------------------------------------


def lag_check(job: Any, kafka_conn: str, **fields: Any) -> Callable[[], SparkLagCheckOperator]:
    def make() -> SparkLagCheckOperator:
        return SparkLagCheckOperator(
            task_id="lag",
            location=job.location,
            kafka_config_id=kafka_conn,
            emit_metrics=False,
            **fields,
        )

    return make


def assert_no_check_ran(pushed: dict, name: str) -> None:
    """Only the failure record the "Streaming lag" page shows: CHECK_FAILED naming the
    parameter, no report (nothing was read)."""
    ((failed,),) = (document["results"] for document in pushed.values())
    assert failed["report"] is None and failed["verdict"]["health"] == "CHECK_FAILED"
    assert invalid(name) in failed["error"]


def test_check_refuses_an_unknown_verdict_in_fail_on(kafka_conn, lagging_job):
    task, context = rendered(
        lag_check(lagging_job, kafka_conn, fail_on=["{{ params.f }}"]), {"f": "LAGGIN"}
    )
    with pytest.raises(AirflowFailException) as failure:
        task.execute(context)
    assert invalid("fail_on") + "unknown verdict 'LAGGIN'" in str(failure.value)
    assert_no_check_ran(context["ti"].pushed, "fail_on")


@pytest.mark.parametrize(
    ("fail_on", "fails"), [(["STOPPED", "LAGGING"], True), (["STOPPED"], False)]
)
def test_check_reads_fail_on_rendered_from_a_list(kafka_conn, lagging_job, fail_on, fails):
    task, context = rendered(
        lag_check(lagging_job, kafka_conn, fail_on="{{ params.f }}", thresholds=LAGGING_AT_10),
        {"f": fail_on},
    )
    assert task.fail_on == repr(fail_on)  # "['STOPPED', 'LAGGING']": text, not a list
    if fails:
        with pytest.raises(AirflowFailException, match=r"LAGGING: total lag 45") as failure:
            task.execute(context)
        assert f"{lagging_job.topic}[0] lag=15" in str(failure.value)
        assert context["ti"].pushed["return_value"]["results"][0]["verdict"]["health"] == "LAGGING"
    else:
        assert task.execute(context)["results"][0]["verdict"]["health"] == "LAGGING"


def accept_sensor(kafka_conn: str, job: Any, accept: list[str], **given: Any) -> Any:
    """A health sensor on ``job`` (LAGGING_AT_10), ``accept`` rendered from a template."""
    return rendered(
        lambda: SparkLagSensor(
            task_id="wait",
            location=job.location,
            kafka_config_id=kafka_conn,
            thresholds=LAGGING_AT_10,
            accept="{{ params.accept }}",
            **given,
        ),
        {"accept": accept},
    )


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
@pytest.mark.parametrize("soft_fail", [False, True], ids=["hard", "soft_fail"])
def test_sensor_refuses_an_unknown_verdict_in_accept_without_waiting(
    kafka_conn, lagging_job, deferrable, soft_fail
):
    """With accept=["OK"] this sensor would wait (the job lags) and time out; "HEALTHY" is no
    verdict: the task fails at once, also with soft_fail (a typo is no reason to skip). Given
    as it is, the DAG already fails to import (tests/airflow/test_parse_time.py); rendered from
    a template, the task fails when it runs."""
    sensor, context = accept_sensor(
        kafka_conn,
        lagging_job,
        ["HEALTHY"],
        deferrable=deferrable,
        soft_fail=soft_fail,
        poke_interval=5,
        timeout=8,
    )
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failure:
        sensor.execute(context)
    assert invalid("accept") + "unknown verdict 'HEALTHY'" in str(failure.value)
    assert time.monotonic() - started < 5  # not one poke interval


@pytest.mark.parametrize(("accept", "waits"), [(["OK"], True), (["OK", "LAGGING"], False)])
def test_sensor_reads_accept_rendered_from_a_list(kafka_conn, lagging_job, accept, waits):
    task, context = accept_sensor(kafka_conn, lagging_job, accept, deferrable=True)
    assert task.accept == repr(accept)
    if waits:
        with pytest.raises(TaskDeferred):
            task.execute(context)
    else:
        assert task.execute(context)["results"][0]["verdict"]["health"] == "LAGGING"


# -- thresholds --------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "fails"), [(10, True), (100, False)])
def test_thresholds_rendered_as_python_dict_text_work(kafka_conn, lagging_job, limit, fails):
    task, context = rendered(
        lag_check(lagging_job, kafka_conn, thresholds="{{ params.t }}"),
        # A day's commit age decides STOPPED: past STOPPED_MIN_IDLE_SECONDS the session's
        # one-batch job would otherwise be UNKNOWN (too short a history), whenever this runs.
        {"t": {"max_lag_records_total": limit, "max_commit_age_seconds": 86400}},
    )
    assert task.thresholds == (
        f"{{'max_lag_records_total': {limit}, 'max_commit_age_seconds': 86400}}"
    )
    if fails:
        with pytest.raises(AirflowFailException, match=r"LAGGING: total lag 45 records > 10"):
            task.execute(context)
    else:
        assert task.execute(context)["results"][0]["verdict"]["health"] == "OK"


IN_A_FIELD = {"max_lag_seconds": "{{ params.t }}"}
AS_TEXT = "{{ params.t }}"
BAD_THRESHOLDS = {  # id: (thresholds field, params.t, the parameter the error names)
    "list-in-a-field": (IN_A_FIELD, [60, 120], "thresholds.max_lag_seconds"),
    "list-in-dict-text": (AS_TEXT, {"max_lag_seconds": [60, 120]}, "thresholds.max_lag_seconds"),
    "nan-in-a-field": (IN_A_FIELD, "nan", "thresholds.max_lag_seconds"),
    "negative-in-a-field": (IN_A_FIELD, -1, "thresholds.max_lag_seconds"),
    "unknown-name": (AS_TEXT, {"max_lag_secs": 60}, "thresholds"),
    "not-a-mapping": (AS_TEXT, [60], "thresholds"),
}


@pytest.mark.parametrize(
    ("thresholds", "value", "name"), BAD_THRESHOLDS.values(), ids=list(BAD_THRESHOLDS)
)
def test_unreadable_thresholds_are_refused_naming_the_threshold(
    kafka_conn, healthy_job, thresholds, value, name
):
    """On the healthy job: a threshold ignored instead of refused would let the check pass."""
    task, context = rendered(
        lag_check(healthy_job, kafka_conn, thresholds=thresholds), {"t": value}
    )
    with pytest.raises(AirflowFailException) as failure:
        task.execute(context)
    assert invalid(name) in str(failure.value)
    assert_no_check_ran(context["ti"].pushed, name)


# -- locations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("native", [False, True], ids=["given", "native-rendered"])
@pytest.mark.parametrize("kind", ["check", "sensor"])
def test_a_list_of_locations_where_one_is_expected_names_location(
    kafka_conn, healthy_job, lagging_job, kind, native
):
    jobs = [healthy_job.location, lagging_job.location]
    cls = SparkLagCheckOperator if kind == "check" else SparkLagSensor
    if not native:  # given as it is: read when the DAG file is parsed
        with pytest.raises(InvalidParameter, match=r"^one: invalid parameter location: must be"):
            cls(task_id="one", location=jobs, kafka_config_id=kafka_conn)
        return
    task, context = rendered(
        lambda: cls(task_id="one", location="{{ params.ck }}", kafka_config_id=kafka_conn),
        {"ck": jobs},
        native=native,
    )
    assert task.location == jobs  # a real list (a DAG rendering native objects)
    with pytest.raises(AirflowFailException) as failure:
        task.execute(context)
    assert invalid("location") + "must be one location, got a list of 2" in str(failure.value)
    assert "SparkLagFleetCheckOperator" in str(failure.value)  # what to use instead


def test_a_list_of_locations_rendered_as_text_names_location(kafka_conn, healthy_job, lagging_job):
    jobs = [healthy_job.location, lagging_job.location]
    task, context = rendered(
        lambda: SparkLagCheckOperator(
            task_id="one", location="{{ params.ck }}", kafka_config_id=kafka_conn
        ),
        {"ck": jobs},
    )
    assert task.location == repr(jobs)
    with pytest.raises(AirflowFailException) as failure:
        task.execute(context)
    assert invalid("location") in str(failure.value)


# -- the fleet check ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_failing", "outcome"), [("x", "invalid"), ("0", "fails"), ("1", "passes")]
)
def test_fleet_max_failing_is_read_before_any_check(
    kafka_conn, healthy_job, lagging_job, max_failing, outcome
):
    task, context = rendered(
        lambda: SparkLagFleetCheckOperator(
            task_id="fleet",
            locations=[healthy_job.location, lagging_job.location],
            kafka_config_id=kafka_conn,
            thresholds=LAGGING_AT_10,
            max_failing="{{ params.m }}",
        ),
        {"m": max_failing},
    )
    if outcome == "passes":
        assert task.execute(context)["summary"]["health"] == {"LAGGING": 1, "OK": 1}
        return
    with pytest.raises(AirflowFailException) as failure:
        task.execute(context)
    if outcome == "fails":
        assert str(failure.value).startswith("1 of 2 jobs failing (at most 0 allowed)")
    else:
        assert invalid("max_failing") + "must be a number, got 'x'" in str(failure.value)
        assert context["ti"].pushed == {}  # no check ran


# -- one real run: `airflow dags test --conf '{"dry_run": "Ture"}'` ----------------------------

MIGRATION_DAG = textwrap.dedent(
    """
    from airflow.sdk import DAG

    from airflow_sparklag.operators.snapshot import CheckpointMigrationOperator

    with DAG(
        "sparklag_params_boundary",
        schedule=None,
        params={{"dry_run": True}},  # untyped: --conf may give any value
        tags=["sparklag"],
    ):
        CheckpointMigrationOperator(
            task_id="migrate",
            location={checkpoint!r},
            archive_root={archive!r},
            dry_run="{{{{ params.dry_run }}}}",
            quiet_period=0,
            kafka_config_id={kafka_conn!r},
        )
    """
)


def test_dags_test_with_dry_run_ture_fails_and_moves_nothing(
    airflow_db, kafka_conn, checkpoint, tmp_path
):
    from tests.airflow.test_dags import dags_test, run_state

    archive = tmp_path / "archive"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "params_boundary.py").write_text(
        MIGRATION_DAG.format(
            checkpoint=str(checkpoint), archive=str(archive), kafka_conn=kafka_conn
        )
    )
    env = airflow_env(tmp_path)
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    before = tree(checkpoint)
    output = dags_test("sparklag_params_boundary", {"dry_run": "Ture"}, env)
    assert run_state(output) == "failed", output[-6000:]
    assert "invalid parameter dry_run: must be true or false, got 'Ture'" in output, output[-6000:]
    assert tree(checkpoint) == before
    assert not archive.exists()
