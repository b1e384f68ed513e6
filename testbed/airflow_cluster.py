"""A real Airflow 3 deployment on one machine: api-server, scheduler, dag-processor, triggerer.

LocalExecutor on SQLite (Airflow 3 runs tasks through the API server, so SQLite serves the
LocalExecutor: ``airflow standalone`` does the same). Everything lives in ``workdir``:
AIRFLOW_HOME, the database, one log file per component and the task logs. Ports are free
ones picked at start (API, worker and triggerer log servers), so two test sessions on one
machine do not collide. Every wait is bounded; a component that does not come up raises
``TestbedError`` with the tail of every component's log.

    >>> cluster = AirflowCluster(Path("/tmp/af"), dags_folder=REPO / "dags").start()
    >>> cluster.unpause("sparklag_sla_check")
    >>> run_id = cluster.trigger("sparklag_gated_deploy", conf={...})
    >>> cluster.wait_run("sparklag_gated_deploy", run_id, timeout=300)
    'success'
    >>> cluster.stop()
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed.process import Process, TestbedError, free_port, log_tail

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
FINISHED = ("success", "failed")
USER = "admin"


class AirflowCluster:
    """The four Airflow 3 components as child processes; a small REST client for the tests.

    ``env`` is added to every component's environment (connections as ``AIRFLOW_CONN_*``,
    ``PATH``, ...): LocalExecutor task processes inherit the scheduler's, triggers the
    triggerer's.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        dags_folder: Path,
        env: Mapping[str, str] | None = None,
        parallelism: int = 4,
    ) -> None:
        self.workdir = workdir
        self.home = workdir / "home"
        self.logs = workdir / "logs"
        self.dags_folder = dags_folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(12)
        self.extra_env = dict(env or {})
        self.parallelism = parallelism
        self.processes: dict[str, Process] = {}
        self._token: str | None = None

    # -- processes ---------------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """What every ``airflow`` command of this deployment runs with."""
        passwords = self.home / "passwords.json"
        return {
            **os.environ,
            **self.extra_env,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("jwt_secret"),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "task-logs"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # A 2-core machine: parse the DAG folder with one process, poll often.
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            # Under a load of ~30 on those 2 cores importing a DAG file took over the default
            # 30 s (the remediation DAG, 2026-12-07): wait longer rather than fail the parse.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__TRIGGERER__CAPACITY": "50",
            "PYTHONUNBUFFERED": "1",
        }

    def _secret(self, name: str) -> str:
        path = self.home / f".{name}"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text()

    def _airflow(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def start(self, timeout: float = 240.0) -> AirflowCluster:
        """Migrate the database, start the four components, wait until all report healthy."""
        started = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({USER: self.password}))
        env = self.environment()
        migrate_log = self.logs / "db-migrate.log"
        migrate_log.parent.mkdir(parents=True, exist_ok=True)
        with open(migrate_log, "wb") as out:
            try:
                done = subprocess.run(
                    [self._airflow(), "db", "migrate"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise TestbedError(
                    f"airflow db migrate did not finish in {timeout:.0f}s. "
                    f"Log {migrate_log}:\n{log_tail(migrate_log)}"
                ) from None
        if done.returncode != 0:
            raise TestbedError(
                f"airflow db migrate failed ({done.returncode}). "
                f"Log {migrate_log}:\n{log_tail(migrate_log)}"
            )
        commands = {
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(self.port)],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer"],
        }
        for name in COMPONENTS:
            self.processes[name] = Process(
                f"airflow {name}",
                [self._airflow(), *commands[name]],
                self.logs / f"{name}.log",
                env=env,
                cwd=self.workdir,
            )
        remaining = max(30.0, timeout - (time.monotonic() - started))
        try:
            self.wait_for(self._healthy, remaining, "every component reports healthy")
        except TestbedError:
            self.stop()
            raise
        return self

    def _healthy(self) -> bool:
        health = self._request("GET", "/api/v2/monitor/health", auth=False)
        return all(
            (health.get(part) or {}).get("status") == "healthy"
            for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        )

    def restart(self, name: str, timeout: float = 120.0) -> None:
        """Stop one component (SIGTERM, as a deployment's restart does) and start it again,
        logging to a new file; returns once every component reports healthy."""
        old = self.processes[name]
        old.stop(timeout=30)
        self.processes[name] = Process(
            f"airflow {name}",
            [self._airflow(), *old.popen.args[1:]],
            self.logs / f"{name}-{time.monotonic_ns()}.log",
            env=self.environment(),
            cwd=self.workdir,
        )
        self.wait_for(self._healthy, timeout, f"{name} healthy again after a restart")

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            process.stop(timeout=20)

    def diagnostics(self, lines: int = 30) -> str:
        """The tail of every component's log (and whether it still runs), for failures."""
        parts = []
        for name, process in self.processes.items():
            state = "running" if process.alive() else f"exited {process.popen.returncode}"
            parts.append(f"--- {name} ({state}), {process.log}:\n{log_tail(process.log, lines)}")
        return "\n".join(parts)

    def task_logs(self, dag_id: str, run_id: str, lines: int = 40) -> str:
        """The last lines of each task log of one run, one ``time level message`` per line."""
        root = self.home / "task-logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        parts = []
        for path in sorted(root.rglob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.relative_to(root)}:\n" + "\n".join(map(_log_line, text)))
        return "\n".join(parts) or f"(no task logs under {root})"

    def wait_for(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``check`` until it returns something truthy; fail with every log tail after
        ``timeout`` s or as soon as a component exits."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            for process in self.processes.values():
                if not process.alive():
                    raise TestbedError(
                        f"{process.name} exited with code {process.popen.returncode} while "
                        f"waiting for: {what}\n{self.diagnostics()}"
                    )
            try:
                value = check()
                if value:
                    return value
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(1.0)
        raise TestbedError(
            f"Airflow: not done after {timeout:.0f}s: {what} (last error: {last_error or 'none'})"
            f"\n{self.diagnostics()}"
        )

    # -- REST API ----------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: Any = None, *, auth: bool = True, timeout: float = 30
    ) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        # A GET answered 5xx is asked again (twice, 2 s apart): on a loaded machine the API
        # server's SQLite can be busy for a moment (seen once: HTTP 500 on upstreamAssetEvents
        # in a fresh-clone run that passed alone); a 4xx, or a write, is never repeated.
        for attempt in range(3 if method == "GET" else 1):
            request = urllib.request.Request(self.url + path, data, headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    text = response.read().decode()
                return json.loads(text) if text else None
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:2000]
                error = ValueError(f"{method} {path}: HTTP {exc.code}: {detail}")
                if exc.code < 500 or attempt == 2 or method != "GET":
                    raise error from None
            time.sleep(2)
        raise AssertionError("unreachable")

    def token(self) -> str:
        """A JWT of the admin user (the simple auth manager's POST /auth/token)."""
        if self._token is None:
            response = self._request(
                "POST", "/auth/token", {"username": USER, "password": self.password}, auth=False
            )
            self._token = response["access_token"]
        return self._token

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the public REST API, ``path`` below ``/api/v2``."""
        return self._request(method, f"/api/v2{path}", body)

    def ui(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the routes the web UI uses, ``path`` below ``/ui`` (e.g.
        ``/connections/hook_meta``, the connection form's types and fields)."""
        return self._request(method, f"/ui{path}", body)

    def wait_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """The DAG as the API shows it, once the dag-processor has parsed it."""

        def parsed() -> dict[str, Any] | None:
            try:
                return dict(self.api("GET", f"/dags/{_quote(dag_id)}"))
            except ValueError as exc:
                if "HTTP 404" in str(exc):
                    errors = self.api("GET", "/importErrors")
                    if errors.get("import_errors"):
                        raise TestbedError(
                            f"DAG import errors: {errors['import_errors']}"
                        ) from None
                    return None
                raise

        dag: dict[str, Any] = self.wait_for(parsed, timeout, f"DAG {dag_id} parsed")
        return dag

    def unpause(self, dag_id: str) -> None:
        self.api("PATCH", f"/dags/{_quote(dag_id)}", {"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.api("PATCH", f"/dags/{_quote(dag_id)}", {"is_paused": True})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """A manual run; returns its run id."""
        run = self.api(
            "POST", f"/dags/{_quote(dag_id)}/dagRuns", {"logical_date": None, "conf": conf or {}}
        )
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        response = self.api("GET", f"/dags/{_quote(dag_id)}/dagRuns?order_by=-run_after")
        return list(response["dag_runs"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        run = self.api("GET", f"/dags/{_quote(dag_id)}/dagRuns/{_quote(run_id)}")
        return str(run["state"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """task id (``task_id[map_index]`` for mapped ones) -> state."""
        response = self.api(
            "GET", f"/dags/{_quote(dag_id)}/dagRuns/{_quote(run_id)}/taskInstances?limit=100"
        )
        states: dict[str, str | None] = {}
        for ti in response["task_instances"]:
            key = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"
            states[key] = ti["state"]
        return states

    def wait_task_state(
        self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...], timeout: float
    ) -> str:
        """Poll until ``task_id`` is in one of ``states``; fails early if the run finishes."""

        def reached() -> str | None:
            state = self.task_states(dag_id, run_id).get(task_id)
            if state in states:
                return state
            if self.run_state(dag_id, run_id) in FINISHED:
                raise TestbedError(
                    f"run {run_id} finished while {task_id} was {state}, never {states}: "
                    f"{self.task_states(dag_id, run_id)}\n{self.task_logs(dag_id, run_id)}"
                )
            return None

        found: str = self.wait_for(reached, timeout, f"{dag_id}.{task_id} in {states}")
        return found

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Poll until the run is success or failed; returns that state."""

        def finished() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in FINISHED else None

        state: str = self.wait_for(finished, timeout, f"run {dag_id}/{run_id} finished")
        return state


def _log_line(line: str) -> str:
    """A task log line (JSON) as ``time level message [error]``; other lines unchanged."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    if not isinstance(entry, dict):
        return line
    text = f"{entry.get('timestamp', '')} {entry.get('level', '')} {entry.get('event', '')}"
    for detail in entry.get("error_detail") or []:
        text += f" [{detail.get('exc_type')}: {detail.get('exc_value')}]"
    return text


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")
