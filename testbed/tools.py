"""Tools the test bed installs into the cache on first use (set-up normally did it already):
a version stamp beside each, so a second run installs nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.process import TestbedError


def is_installed(binary: Path, stamp: Path, version: str) -> bool:
    """``binary`` is there and its stamp names ``version``."""
    try:
        return binary.exists() and stamp.read_text().strip() == version
    except OSError:
        return False


def mark_installed(stamp: Path, version: str) -> None:
    stamp.write_text(version + "\n")


def go_install(module: str, version: str, binary: Path, stamp: Path, *, built_as: str) -> Path:
    """``go install module@version`` into ``binary``'s directory; ``built_as`` is the name
    go gives the binary (its package directory), renamed to ``binary``."""
    if is_installed(binary, stamp, version):
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise TestbedError(f"{binary.name} needs Go to install it: https://go.dev/dl/")
    binary.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [go, "install", f"{module}@{version}"],
        env={**os.environ, "GOBIN": str(binary.parent)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    built = binary.parent / built_as
    if result.returncode != 0 or not built.exists():
        raise TestbedError(f"go install {module}@{version} failed:\n{result.stderr[-3000:]}")
    if built != binary:
        built.replace(binary)
    mark_installed(stamp, version)
    return binary
