"""A real GCS JSON API on 127.0.0.1: fake-gcs-server, in memory, as its own process.

The binary is built from the Go module proxy into the cache's ``bin/`` (``scripts/setup.sh``
does it; :func:`install` does it on first use when set-up did not)::

    gcs = GcsServer(Path("/tmp/gcs")).start()
    gcs.create_bucket("checkpoints")
    fs = gcsfs.GCSFileSystem(**gcs.options)      # endpoint_url + token="anon"
    gcs.stop()

gcsfs >= 2026 first asks a bucket's type over gRPC, which the emulator does not serve (a 60 s
stall per bucket): :data:`CLIENT_ENV` turns that probe off; tests set it (real GCS is fine).
"""

from __future__ import annotations

from pathlib import Path

from testbed.paths import CACHE
from testbed.process import Process, TestbedError, free_port, log_tail
from testbed.tools import go_install

VERSION = "v1.56.1"  # newest the Go module proxy serves (2026-11)
MODULE = "github.com/fsouza/fake-gcs-server"
BIN = CACHE / "bin"
BINARY = BIN / "fake-gcs-server"
STAMP = BIN / ".fake-gcs-server.version"
# What a gcsfs client in the tests needs in its environment (see the module docstring).
CLIENT_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def install() -> Path:
    """The fake-gcs-server binary, installed with ``go install`` unless already there."""
    return go_install(MODULE, VERSION, BINARY, STAMP, built_as="fake-gcs-server")


class GcsServer:
    """fake-gcs-server on an ephemeral port; ``endpoint`` is its URL."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    def start(self, timeout: float = 30.0) -> GcsServer:
        binary = install()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process(
            "fake-gcs-server",
            [
                str(binary),
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-backend",
                "memory",
                "-external-url",
                self.endpoint,
                "-log-level",
                "warn",
            ],
            self.workdir / "fake-gcs-server.log",
        )
        self.process.wait_ready(self._answers, timeout, f"GET {self.endpoint}/storage/v1/b")
        return self

    def _answers(self) -> bool:
        import requests

        return requests.get(f"{self.endpoint}/storage/v1/b", timeout=2).status_code == 200

    def create_bucket(self, name: str) -> None:
        import requests

        response = requests.post(f"{self.endpoint}/storage/v1/b", json={"name": name}, timeout=10)
        if response.status_code not in (200, 409):
            raise TestbedError(f"create bucket {name}: {response.status_code} {response.text}")

    @property
    def options(self) -> dict:
        """The gcsfs options (``fsspec_options``) that reach this server."""
        return {"endpoint_url": self.endpoint, "token": "anon"}

    def log_tail(self) -> str:
        return log_tail(self.workdir / "fake-gcs-server.log")

    def stop(self) -> None:
        if self.process:
            self.process.stop()
