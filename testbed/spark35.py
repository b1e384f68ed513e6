"""A Spark 3.5 driver process (pyspark 3.5 in its own venv, Scala 2.12 Kafka connector), and
the driver process in general (:class:`SparkDriver`; testbed/spark_kerberos.py runs one under
spark-submit).

The suite's own SparkSession is pyspark 4.x, in the main venv; Spark allows one per process and
pyspark 3.5 needs Python <= 3.11, so Spark 3.5 queries run in a child process:
``testbed/spark35_driver.py`` under the venv ``scripts/setup_spark35.sh`` makes. This class
starts it, sends it commands (see the driver's docstring) and stops it by its pid.

>>> driver = Spark35(Path("/tmp/s35")).start()
>>> driver.call("available_now", topic="t", checkpoint="/tmp/ck", bootstrap=..., max_offsets=100)
{'ok': True, 'progress': [[0, 100], [1, 50]]}
>>> driver.stop()
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from testbed.paths import CACHE, jars
from testbed.process import TestbedError, log_tail

VENV = CACHE / "venv-spark35"  # keep in step with scripts/setup_spark35.sh
PYSPARK_VERSION = "3.5.7"  # = the pin there and the connector in testbed/jars/spark35-kafka
DRIVER = Path(__file__).resolve().parent / "spark35_driver.py"
# The parent's Spark settings (SPARK_HOME, PYSPARK_GATEWAY_PORT, ...) could make the child use
# the parent's Spark (4.x) instead of its own.
_NOT_INHERITED = ("SPARK_", "PYSPARK_", "PYTHONPATH", "VIRTUAL_ENV")


def python() -> Path:
    """The venv's python; fails (never skips) with what to run when it is not there."""
    stamp = VENV / ".sparklag-installed"
    path = VENV / "bin" / "python"
    if not path.exists() or f"pyspark=={PYSPARK_VERSION}" not in _read(stamp):
        raise TestbedError(
            f"the Spark 3.5 venv (pyspark {PYSPARK_VERSION}) is not in {VENV}: "
            "run scripts/setup.sh (it calls scripts/setup_spark35.sh)"
        )
    return path


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class SparkDriver:
    """A driver process running ``spark35_driver.py``; ``call`` sends a command and returns its
    answer. :meth:`command` and :meth:`environment` say how it starts (subclasses: which Spark,
    which launcher); ``info`` is the driver's first answer (Spark version, Hadoop user)."""

    name = "Spark driver"
    # Where commands go: the driver's stdin, or (spark-submit, whose Python child's stdin is not
    # the launcher's) a FIFO named as the driver's third argument.
    fifo: Path | None = None

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log = workdir / "driver.log"
        self.version: str | None = None
        self.info: dict[str, Any] = {}
        self.start_seconds = 0.0  # from start() to the driver's first answer
        self._popen: subprocess.Popen[bytes] | None = None
        self._commands: IO[bytes] | None = None
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The parent's environment without its Spark settings, the driver bound to loopback."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED)}
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        return env

    def start(self, timeout: float = 300.0) -> SparkDriver:
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.fifo is not None and not self.fifo.exists():
            os.mkfifo(self.fifo)
        with open(self.log, "ab") as log:
            self._popen = subprocess.Popen(
                self.command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.environment(),
                cwd=self.workdir,
                start_new_session=True,
            )
        assert self._popen.stdout is not None
        threading.Thread(target=self._read, args=(self._popen.stdout,), daemon=True).start()
        self.info = self._answer(timeout, "start")
        self.version = self.info["spark"]
        self.start_seconds = time.monotonic() - began
        # The driver holds the FIFO open (read and write) before its first answer: no block.
        self._commands = open(self.fifo, "wb") if self.fifo else self._popen.stdin  # noqa: SIM115
        return self

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace")
            if line.startswith("REPLY "):
                self._replies.put(json.loads(line[len("REPLY ") :]))
        self._replies.put(None)  # the driver exited

    def _answer(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            answer = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise TestbedError(
                f"{self.name}: no answer to {what} in {timeout:.0f}s. "
                f"Log {self.log}:\n{log_tail(self.log)}"
            ) from None
        if answer is None:
            raise TestbedError(
                f"{self.name} exited during {what}. Log {self.log}:\n{log_tail(self.log)}"
            )
        if not answer.get("ok"):
            raise TestbedError(f"{self.name}: {what} failed: {answer.get('trace')}")
        return answer

    def call(self, cmd: str, timeout: float = 240.0, **args: Any) -> dict[str, Any]:
        if self._popen is None or self._commands is None:
            raise TestbedError(f"{self.name} is not running")
        self._commands.write((json.dumps({"cmd": cmd, **args}) + "\n").encode())
        self._commands.flush()
        return self._answer(timeout, cmd)

    def kill(self, timeout: float = 30.0) -> None:
        """``kill -9`` of the driver's whole process group (launcher, JVM, Python driver), as a
        crash or the OOM killer ends a job; returns once none of them runs."""
        if self._popen is None:
            raise TestbedError(f"{self.name} is not running")
        os.killpg(self._popen.pid, signal.SIGKILL)
        self._popen.wait(timeout)
        deadline = time.monotonic() + timeout
        while _group_running(self._popen.pid):
            if time.monotonic() > deadline:
                raise TestbedError(f"{self.name}: process group {self._popen.pid} outlived kill -9")
            time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> None:
        """Asks the driver to stop its queries and exit; ends its process group if it does not."""
        popen, self._popen = self._popen, None
        commands, self._commands = self._commands, None
        if popen is None:
            return
        with contextlib.suppress(OSError, ValueError, AttributeError):
            commands.write(b'{"cmd": "quit"}\n')  # type: ignore[union-attr]
            commands.close()  # type: ignore[union-attr]
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(10)
        # The JVM that pyspark started is in the same (our own) process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)


def _group_running(group: int) -> bool:
    """Whether a process of process group ``group`` runs (zombies do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


class Spark35(SparkDriver):
    """The Spark 3.5 driver: pyspark 3.5 from its venv, the Scala 2.12 Kafka connector."""

    name = "Spark 3.5 driver"

    def command(self) -> list[str]:
        return [str(python()), str(DRIVER), ":".join(jars("spark35-kafka")), str(self.workdir)]

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "PYSPARK_PYTHON": str(python())}
