"""Toxiproxy: a TCP proxy that puts real faults (latency, hangs, resets, answers cut short)
between a client and a test-bed server.

The server is Shopify's toxiproxy, built from the Go module proxy into the cache's ``bin/``
(``scripts/setup.sh`` does it; :func:`install` does it on first use when setup did not)::

    toxiproxy = Toxiproxy(Path("/tmp/toxi")).start()
    proxy = toxiproxy.proxy("s3", upstream="127.0.0.1:9000")
    with proxy.toxic("timeout", timeout=0):        # every answer hangs until removed
        ...                                          # talk to proxy.address instead
    toxiproxy.stop()

Toxics (see toxiproxy's README): ``latency`` (``latency``, ``jitter`` ms), ``timeout``
(``timeout`` ms, 0 = hang for ever), ``reset_peer`` (``timeout`` ms, then a TCP RST),
``limit_data`` (``bytes``, then the connection closes). ``stream`` is ``downstream`` (server
to client, the default) or ``upstream``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.paths import CACHE
from testbed.process import Process, TestbedError, free_port, log_tail
from testbed.tools import go_install

VERSION = "v2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
BIN = CACHE / "bin"
BINARY = BIN / "toxiproxy-server"
STAMP = BIN / ".toxiproxy-server.version"


def install() -> Path:
    """The toxiproxy server binary, installed with ``go install`` unless already there."""
    # `go install` names the binary after the package directory: "server".
    return go_install(MODULE, VERSION, BINARY, STAMP, built_as="server")


class Toxiproxy:
    """The toxiproxy server on an ephemeral port; ``api`` is its HTTP API's URL."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    def start(self, timeout: float = 30.0) -> Toxiproxy:
        binary = install()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process(
            "toxiproxy",
            [str(binary), "-host", "127.0.0.1", "-port", str(self.port)],
            self.workdir / "toxiproxy.log",
        )
        self.process.wait_ready(self._answers, timeout, f"GET {self.api}/version")
        return self

    def _answers(self) -> bool:
        return bool(self._request("GET", "/version"))

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        import requests

        response = requests.request(method, self.api + path, json=body, timeout=5)
        if response.status_code >= 400:
            raise TestbedError(
                f"toxiproxy {method} {path} answered {response.status_code}: {response.text}"
            )
        return response.json() if response.content else None

    def proxy(self, name: str, upstream: str) -> Proxy:
        """A new proxy on an ephemeral port forwarding to ``upstream`` ("host:port")."""
        created = self._request(
            "POST",
            "/proxies",
            {"name": name, "listen": "127.0.0.1:0", "upstream": upstream, "enabled": True},
        )
        return Proxy(self, name, created["listen"], upstream)

    def log_tail(self) -> str:
        return log_tail(self.workdir / "toxiproxy.log")

    def stop(self) -> None:
        if self.process:
            self.process.stop()


class Proxy:
    """One proxy: clients connect to ``address``; toxics are added and removed at run time
    and apply to open connections too."""

    def __init__(self, server: Toxiproxy, name: str, address: str, upstream: str) -> None:
        self.server = server
        self.name = name
        self.address = address  # "127.0.0.1:<port>"
        self.port = int(address.rsplit(":", 1)[1])
        self.upstream = upstream
        self._count = 0

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def add(self, kind: str, stream: str = "downstream", **attributes: Any) -> str:
        """Add a toxic of type ``kind``; returns its name (for :meth:`remove`)."""
        self._count += 1
        name = f"{kind}_{stream}_{self._count}"
        self.server._request(
            "POST",
            f"/proxies/{self.name}/toxics",
            {
                "name": name,
                "type": kind,
                "stream": stream,
                "toxicity": 1.0,
                "attributes": attributes,
            },
        )
        return name

    def remove(self, toxic: str) -> None:
        self.server._request("DELETE", f"/proxies/{self.name}/toxics/{toxic}")

    def clear(self) -> None:
        """Remove every toxic (a test that failed half-way must not poison the next)."""
        for toxic in self.server._request("GET", f"/proxies/{self.name}/toxics") or []:
            self.remove(toxic["name"])

    @contextlib.contextmanager
    def toxic(self, kind: str, stream: str = "downstream", **attributes: Any) -> Iterator[str]:
        name = self.add(kind, stream, **attributes)
        try:
            yield name
        finally:
            self.remove(name)

    def set_enabled(self, enabled: bool) -> None:
        """Disabled, the proxy refuses connections and drops the open ones."""
        self.server._request("POST", f"/proxies/{self.name}", {"enabled": enabled})
