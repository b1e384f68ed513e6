"""docs/architecture.md and the import-linter contracts stay true to the package.

The module table names every module of ``airflow_sparklag/`` and nothing else; every module the
page mentions anywhere exists; the contracts in pyproject.toml place every top-level module
either in a layer of the core (which must not import Airflow) or on the Airflow side.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself needs tomli below 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_sparklag"
DOC = ROOT / "docs" / "architecture.md"


def package_modules() -> set[str]:
    """Every module of the package by its path in it: ``cli.py``, ``storage/s3.py``."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }


def table_modules(text: str) -> list[str]:
    """The modules the "## Modules" table names in its first column (``hooks/`` is the
    package's ``hooks/__init__.py``)."""
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    named = []
    for row in re.findall(r"^\|([^|\n]*)\|", section, flags=re.M):
        for name in re.findall(r"`([^`]+)`", row):
            named.append(f"{name}__init__.py" if name.endswith("/") else name)
    return named


def test_the_module_table_names_every_module_and_only_those() -> None:
    named = table_modules(DOC.read_text())
    assert len(named) == len(set(named)), "a module has two rows"
    modules = package_modules()
    assert sorted(modules - set(named)) == [], "modules missing from docs/architecture.md"
    assert sorted(set(named) - modules) == [], "docs/architecture.md names modules that are gone"


def mentioned_paths(text: str) -> set[str]:
    """What the page names as a file or module anywhere: ``x.py`` / ``dir/x.py`` (in the
    package, or from the repository root for tests/, scripts/, ...) and
    ``airflow_sparklag.x.y`` (down to the first part that is a module file: the rest may be
    names in it)."""
    found = set(re.findall(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b", text))
    for dotted in re.findall(r"\bairflow_sparklag((?:\.\w+)+)", text):
        path = PACKAGE
        for part in dotted.strip(".").split("."):
            if (path / part).is_dir():
                path = path / part
            elif (path / f"{part}.py").is_file():
                path = path / f"{part}.py"
                break
            else:
                found.add((path / f"{part}.py").relative_to(PACKAGE).as_posix())
                break
    return found


def exists(name: str) -> bool:
    name = name.removeprefix("airflow_sparklag/")
    return (PACKAGE / name).is_file() or (ROOT / name).is_file()


def test_every_module_the_page_mentions_exists() -> None:
    missing = sorted(name for name in mentioned_paths(DOC.read_text()) if not exists(name))
    assert missing == [], f"docs/architecture.md mentions what is not there: {missing}"


def test_the_checks_see_a_module_that_is_gone() -> None:
    """The two checks above fail on a stale page (so they can fail at all)."""
    stale = (
        "# A\n\n## Modules\n\n| module | what |\n|---|---|\n| `hooks/` | x |\n| `gone.py` | y |\n"
    )
    assert table_modules(stale) == ["hooks/__init__.py", "gone.py"]
    assert "gone.py" in mentioned_paths(stale) and not exists("gone.py")
    assert mentioned_paths("`airflow_sparklag.storage.gone`") == {"storage/gone.py"}
    assert mentioned_paths("`airflow_sparklag.gone`, `hooks/gone.py`") == {
        "gone.py",
        "hooks/gone.py",
    }
    assert mentioned_paths("`airflow_sparklag.monitor.check`") == set()


def contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["root_package"] == "airflow_sparklag"
    return config["contracts"]


def test_every_top_level_module_is_in_a_layer_or_on_the_airflow_side() -> None:
    (layers,) = (c for c in contracts() if c["type"] == "layers")
    assert layers["exhaustive"] is True
    layered = {name.strip() for layer in layers["layers"] for name in re.split(r"[|:]", layer)}
    airflow_side = set(layers["exhaustive_ignores"])
    top_level = {name.split("/")[0].removesuffix(".py") for name in package_modules()}
    assert layered | airflow_side == top_level - {"__init__"}
    assert layered & airflow_side == set()
    core, fenced = (c for c in contracts() if c["type"] == "forbidden")
    # the core contract covers every layered module: a new core module cannot import Airflow
    assert {m.removeprefix("airflow_sparklag.") for m in core["source_modules"]} == layered
    assert set(core["forbidden_modules"]) == {"airflow"} | {
        f"airflow_sparklag.{name}" for name in airflow_side
    }
    assert {m.removeprefix("airflow_sparklag.") for m in fenced["source_modules"]} == airflow_side


def test_mypy_checks_the_whole_package() -> None:
    # The page says so, and scripts/test.sh runs mypy with this config: no part left out.
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ["airflow_sparklag", "tests/fakes.py"]  # the fakes: against the ports
    assert "exclude" not in mypy, f"mypy leaves out {mypy['exclude']}"
    assert "mypy over the whole package" in " ".join(DOC.read_text().split())
