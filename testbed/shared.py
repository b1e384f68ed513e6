"""One test-bed server for all the workers of a parallel run (``pytest -n N``, pytest-xdist).

Each xdist worker is its own Python process with its own session fixtures: without this, every
worker would start its own Kafka broker and HDFS MiniCluster (a JVM start-up of 10-15 s each
and its memory N times). Instead the first worker that needs one starts it under a file lock
and writes the started object, minus its process handle, to the run's shared directory; the
other workers load it from there. Tests already name their topics and paths uniquely (a uuid or
the test's name), so one server serves every worker. (The S3 server is not shared: moto serves
requests in one GIL, and one moto for every worker starved Spark's s3a queries.)

The controller process of the run owns the directory and stops every server listed in it when
the run ends (:func:`stop_all`): a worker that finishes early must not take the broker away
from the others. Without xdist the fixtures start and stop their own servers as before.
``SPARKLAG_SHARED_TESTBED=DIR`` shares them further, between pytest runs (scripts/test.sh: the
main run and the Airflow compatibility runs use one broker); the script that set it stops them
(``python -m testbed.shared stop DIR``).

    >>> broker = shared(Path("/tmp/run/testbed"), "kafka", lambda: KafkaBroker(...).start())
    >>> stop_all(Path("/tmp/run/testbed"))  # in the controller, at the end of the run
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

Component = TypeVar("Component")
PIDS = "pids"  # one process-group leader's pid a line, for stop_all


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared(directory: Path, name: str, start: Callable[[], Component]) -> Component:
    """The component ``name`` of this run: started by ``start()`` in the first worker that
    asks, loaded from ``directory`` in the others. Its ``process`` (a testbed Process) is left
    running when this worker ends; :func:`stop_all` stops it."""
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / f"{name}.pickle"
    with _locked(directory / f"{name}.lock"):
        if state.exists():
            component: Any = pickle.loads(state.read_bytes())
            return component  # type: ignore[no-any-return]
        component = start()
        process = component.process
        process.detach()
        with open(directory / PIDS, "a") as pids:
            pids.write(f"{process.pid}\n")
        component.process = None  # no worker stops it; the pickle carries addresses only
        state.write_bytes(pickle.dumps(component))
        return component  # type: ignore[no-any-return]


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie nobody reaped yet is gone too


def stop_all(directory: Path, timeout: float = 20.0) -> None:
    """Stop (SIGTERM, then SIGKILL after ``timeout``) the process group of every shared
    component started under ``directory``."""
    try:
        pids = [int(line) for line in (directory / PIDS).read_text().split()]
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.2)
    for pid in pids:
        if not _gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":  # `python -m testbed.shared stop DIR` (scripts/test.sh at exit)
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "stop":
        sys.exit("usage: python -m testbed.shared stop DIR")
    stop_all(Path(sys.argv[2]))
