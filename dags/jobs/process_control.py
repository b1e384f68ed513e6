"""Start and stop a streaming job as a local background process, tracked by a pid file.

The example pipelines use this to run ``kafka_stream_job.py`` on the worker itself; in
production the same steps are a SparkSubmitOperator (start) and a stop through the cluster
manager (``yarn application -kill``, ``kubectl delete sparkapplication``, or a marker file the
job polls). See docs/operators/gated-deploy.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

JOB_SCRIPT = Path(__file__).resolve().parent / "kafka_stream_job.py"


def pid_file(run_dir: str, name: str) -> Path:
    return Path(run_dir) / f"{name}.pid"


def log_file(run_dir: str, name: str, version: str) -> Path:
    return Path(run_dir) / f"{name}-{version}.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, parent has not reaped it yet) is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def start_job(
    run_dir: str,
    name: str,
    version: str,
    job_args: list[str],
    *,
    startup_timeout: float = 180.0,
) -> int:
    """Launches the job detached from this process; returns its pid once the query runs."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    log_path = log_file(run_dir, name, version)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, str(JOB_SCRIPT), "--version", version, *job_args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the task process that started it
        )
    pid_file(run_dir, name).write_text(str(process.pid))
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if "QUERY_STARTED" in text and f"version={version}" in text:
            return process.pid
        if process.poll() is not None:
            raise RuntimeError(
                f"job {name} {version} exited with {process.returncode} before its query "
                f"started; log {log_path}:\n{text[-2000:]}"
            )
        time.sleep(0.5)
    process.terminate()
    raise TimeoutError(f"job {name} {version} did not start its query in {startup_timeout}s")


def stop_job(run_dir: str, name: str, *, timeout: float = 120.0) -> int | None:
    """SIGTERM to the job in the pid file (a clean query stop), SIGKILL after ``timeout``.
    Returns the pid stopped, or None when no job was running."""
    path = pid_file(run_dir, name)
    if not path.exists():
        return None
    pid = int(path.read_text().strip())
    if not _alive(pid):
        path.unlink()
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.5)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # the job's own session: its JVM goes too
    path.unlink(missing_ok=True)
    return pid
