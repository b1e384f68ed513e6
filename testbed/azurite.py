"""A real Azure Blob API on 127.0.0.1: Azurite (npm ``azurite``), as its own process.

Installed with ``npm install --prefix`` into the cache's ``node/`` (``scripts/setup.sh`` does
it; :func:`install` does it on first use when set-up did not)::

    azurite = Azurite(Path("/tmp/azurite")).start()
    azurite.create_container("checkpoints")
    fs = adlfs.AzureBlobFileSystem(**azurite.options)   # the development connection string
    azurite.stop()
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

from testbed.paths import CACHE
from testbed.process import Process, TestbedError, free_port, log_tail, port_open
from testbed.tools import is_installed, mark_installed

VERSION = "3.37.0"
NODE = CACHE / "node"
BINARY = NODE / "node_modules" / ".bin" / "azurite-blob"
STAMP = NODE / ".azurite.version"
# Azurite's well-known development account (public, the same in every Azurite).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def install() -> Path:
    """The ``azurite-blob`` launcher, installed with npm unless already there."""
    if is_installed(BINARY, STAMP, VERSION):
        return BINARY
    npm = shutil.which("npm")
    if npm is None:
        raise TestbedError("Azurite needs Node.js and npm: apt-get install -y nodejs npm")
    NODE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [npm, "install", "--prefix", str(NODE), "--no-audit", "--no-fund", f"azurite@{VERSION}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0 or not BINARY.exists():
        raise TestbedError(f"npm install azurite@{VERSION} failed:\n{result.stderr[-3000:]}")
    mark_installed(STAMP, VERSION)
    return BINARY


class Azurite:
    """Azurite's blob service on an ephemeral port, storing under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{ACCOUNT}"
        self.process: Process | None = None

    def start(self, timeout: float = 60.0) -> Azurite:
        binary = install()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = Process(
            "azurite",
            [
                str(binary),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.workdir / "data"),
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
            ],
            self.workdir / "azurite.log",
        )
        self.process.wait_ready(self._answers, timeout, f"list containers on {self.endpoint}")
        return self

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def _service(self):  # type: ignore[no-untyped-def]
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def _answers(self) -> bool:
        # The Azure SDK retries a refused connection with back-off (~20 s): ask only once the
        # port is open.
        if not port_open(self.port):
            return False
        list(self._service().list_containers())
        return True

    def create_container(self, name: str) -> None:
        from azure.core.exceptions import ResourceExistsError

        with contextlib.suppress(ResourceExistsError):
            self._service().create_container(name)

    @property
    def options(self) -> dict:
        """The adlfs options (``fsspec_options``) that reach this server."""
        return {"connection_string": self.connection_string}

    def log_tail(self) -> str:
        return log_tail(self.workdir / "azurite.log")

    def stop(self) -> None:
        if self.process:
            self.process.stop()
