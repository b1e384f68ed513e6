"""Starting, ready-checking and stopping the test bed's processes."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# Java 17 needs these for Spark's and Hadoop's reflection (the set Spark itself passes).
JAVA_OPENS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
        for pkg in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
]


def hadoop_jvm(workdir: Path, heap: str) -> list[str]:
    """``java`` and the options every Hadoop JVM of the test bed starts with: a small heap,
    Spark's --add-opens, log4j at WARN to stdout (written into ``workdir``), data and tmp
    directories under ``workdir``."""
    log4j = workdir / "log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=WARN, stdout\n"
        "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.stdout.layout.ConversionPattern=%d %p %c: %m%n\n"
    )
    return [
        "java",
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        *JAVA_OPENS,
        f"-Dlog4j.configuration=file:{log4j}",
        f"-Dtest.build.data={workdir / 'data'}",
        f"-Dhadoop.tmp.dir={workdir / 'tmp'}",
    ]


class TestbedError(RuntimeError):
    """A test-bed component could not start; the message carries its log tail."""

    __test__ = False  # not a pytest test class


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


_RUNNING: list[Process] = []
_DETACHED: list[Process] = []  # kept alive: a collected Popen of a running child warns


@atexit.register
def _stop_leftovers() -> None:
    # A script that dies between start() and stop() must not leave brokers or JVMs behind
    # (the children run in their own session, so they would outlive it).
    for process in list(_RUNNING):
        process.stop(timeout=5)


class Process:
    """A child process with its log file; `stop()` ends it (and its group) by pid."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: dict | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.popen = subprocess.Popen(
            list(argv),
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        _RUNNING.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_ready(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if not self.alive():
                raise TestbedError(
                    f"{self.name} exited with code {self.popen.returncode} before it was ready "
                    f"({what}). Log {self.log}:\n{log_tail(self.log)}"
                )
            try:
                if check():
                    return
            except Exception as exc:  # the check's own errors just mean "not yet"
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.5)
        self.stop()
        raise TestbedError(
            f"{self.name} was not ready after {timeout:.0f}s ({what}; last check error: "
            f"{last_error or 'none'}). Log {self.log}:\n{log_tail(self.log)}"
        )

    def detach(self) -> None:
        """Leave the process running after this Python process ends (``testbed.shared``:
        another process stops it)."""
        self._log_handle.close()
        if self in _RUNNING:
            _RUNNING.remove(self)
        _DETACHED.append(self)

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._log_handle.close()
        if self in _RUNNING:
            _RUNNING.remove(self)
