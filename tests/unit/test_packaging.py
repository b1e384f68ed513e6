"""The wheel as users get it: built from this tree, it carries every module of the package, the
license, the entry points pyproject.toml declares and the version of ``__version__``, and
passes ``twine check``."""

from __future__ import annotations

import configparser
import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import airflow_sparklag
from airflow_sparklag.airflow.provider_info import get_provider_info

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_sparklag"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (hatchling) comes from the dev extra, nothing is
    # downloaded.
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (built,) = out.glob("*.whl")
    return built


def _dist_info(names: list[str]) -> str:
    (dist_info,) = {name.split("/", 1)[0] for name in names if ".dist-info/" in name}
    return dist_info


def test_wheel_holds_every_module_of_the_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert expected - names == set()
    for subpackage in ("airflow", "hooks", "operators", "sensors", "triggers"):
        assert f"airflow_sparklag/{subpackage}/__init__.py" in names


def test_wheel_carries_the_license(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    license_text = archive.read(f"{_dist_info(archive.namelist())}/licenses/LICENSE").decode()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    metadata = email.message_from_bytes(archive.read(f"{_dist_info(archive.namelist())}/METADATA"))
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"


def test_wheel_version_is_the_package_version(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    metadata = email.message_from_bytes(archive.read(f"{_dist_info(archive.namelist())}/METADATA"))
    assert metadata["Name"] == "airflow-provider-sparklag"
    assert metadata["Version"] == airflow_sparklag.__version__
    assert (
        wheel.name == f"airflow_provider_sparklag-{airflow_sparklag.__version__}-py3-none-any.whl"
    )
    assert get_provider_info()["versions"] == [airflow_sparklag.__version__]


def test_wheel_declares_the_entry_points_of_pyproject(wheel: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {group: dict(points) for group, points in project["entry-points"].items()}
    declared["console_scripts"] = dict(project["scripts"])
    archive = zipfile.ZipFile(wheel)
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(archive.read(f"{_dist_info(archive.namelist())}/entry_points.txt").decode())
    in_wheel = {group: dict(parser[group]) for group in parser.sections()}
    assert in_wheel == declared
    # Airflow finds the provider through this one, and its plugin through the other.
    assert in_wheel["apache_airflow_provider"] == {
        "provider_info": "airflow_sparklag.airflow.provider_info:get_provider_info"
    }
    plugin = "airflow_sparklag.airflow.plugin:SparkLagPlugin"
    assert in_wheel["airflow.plugins"] == {"sparklag": plugin}


def test_provider_info_entry_point_imports_no_airflow() -> None:
    """Airflow reads the provider info whenever it lists providers: loading it stays cheap."""
    code = (
        "import sys\n"
        "from airflow_sparklag.airflow.provider_info import get_provider_info\n"
        "get_provider_info()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'airflow', 'confluent_kafka'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_twine_check_passes(wheel: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_provider_info_passes_airflows_schema_and_registers_sparklag() -> None:
    """What ProvidersManager validates at start: the provider info against the running
    Airflow's provider_info.schema.json (the airflow_compat tests register it on 2.11 and 3.0
    too), with the `sparklag` connection type and its form."""
    import json

    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    (connection_type,) = info["connection-types"]
    assert connection_type["connection-type"] == "sparklag"
    assert connection_type["hook-class-name"] == "airflow_sparklag.hooks.sparklag.SparkLagHook"
    fields = connection_type["conn-fields"]
    assert list(fields) == [
        "kafka_config_id",
        "aws_conn_id",
        "webhdfs_conn_id",
        "gcp_conn_id",
        "wasb_conn_id",
        "source_kafka_conn_ids",
        "location",
    ]
    assert all(field["label"] and field["schema"]["type"] for field in fields.values())
    hidden = connection_type["ui-field-behaviour"]["hidden-fields"]
    assert hidden == ["host", "schema", "login", "password", "port"]
