"""A real Prometheus server (Debian package `prometheus`) scraping targets on 127.0.0.1.

    server = PrometheusServer(workdir, targets=["127.0.0.1:9109"]).start()
    server.query('sum(sparklag_partition_lag_records)')   # -> [{"metric": {...}, "value": [...]}]
    server.stop()

Scrapes every second as scrape job ``sparklag`` with Prometheus's defaults (no
``honor_labels``: the exporter's labels must not collide with ``job`` or ``instance``), keeps
its TSDB in ``workdir``, listens on a free port.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from testbed.process import Process, TestbedError, free_port

BINARY = "/usr/bin/prometheus"


class PrometheusServer:
    def __init__(
        self, workdir: Path, targets: Sequence[str], *, scrape_interval: str = "1s"
    ) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    def _write_config(self) -> Path:
        config = self.workdir / "prometheus.yml"
        targets = ", ".join(f"'{t}'" for t in self.targets)
        config.write_text(
            "global:\n"
            f"  scrape_interval: {self.scrape_interval}\n"
            f"  scrape_timeout: {self.scrape_interval}\n"
            f"  evaluation_interval: {self.scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: sparklag\n"
            "    static_configs:\n"
            f"      - targets: [{targets}]\n"
        )
        return config

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        binary = shutil.which("prometheus") or BINARY
        if not Path(binary).exists():
            raise TestbedError(
                "prometheus is not installed: run scripts/setup.sh (apt-get install -y prometheus)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            f"--config.file={self._write_config()}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        self.process = Process("prometheus", argv, self.workdir / "prometheus.log")
        self.process.wait_ready(self._ready, timeout, f"{self.url}/-/ready")
        return self

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    # -- the HTTP API ------------------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a successful /api/v1 call; raises with Prometheus' error otherwise."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                payload = json.load(response)
        except urllib.error.HTTPError as exc:
            payload = json.load(exc)
        if payload.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params}: {payload}")
        return payload["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant vector of ``expr`` now: [{"metric": {...}, "value": [t, "12"]}, ...]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def wait_for(
        self,
        expr: str,
        accept: Callable[[list[dict[str, Any]]], bool],
        timeout: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Query ``expr`` until ``accept(result)``; the last result in the error otherwise."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if accept(result):
                return result
            time.sleep(0.5)
        raise TimeoutError(f"{expr!r} not as expected within {timeout}s; last result {result}")

    def targets_health(self) -> list[str]:
        return [t["health"] for t in self.api("targets")["activeTargets"]]
