"""Where the test bed keeps its jar cache and its runtime directories."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SPARKLAG_CACHE", Path.home() / ".cache" / "sparklag"))
JARS = CACHE / "jars"
COMPONENTS = ("kafka", "spark-kafka", "s3a", "hdfs", "kdc", "spark-tests", "spark35-tests")


def jar_dir(component: str) -> Path:
    path = JARS / component
    if not (path / ".complete").exists():
        raise FileNotFoundError(
            f"jars for {component!r} are not in {path}: run scripts/setup.sh first"
        )
    return path


def jars(component: str) -> list[str]:
    return sorted(str(p) for p in jar_dir(component).glob("*.jar"))


def classpath(component: str) -> str:
    return str(jar_dir(component) / "*")
