"""An S3 HTTP API on 127.0.0.1 from the npm package s3rver (Node.js), FOR BENCHMARKS ONLY.

Why: moto's server is one Python process and its LIST scans every key of the bucket; with
~5,000 keys per bucket it needs ~1.7 ms of CPU per GET and ~6 ms per small LIST (~35 ms at
50,000 keys), which caps the fleet benchmark on this 2-core machine. s3rver answers the same
requests with about half the CPU (a small LIST does not depend on the bucket's size), see
``benchmarks/s3_server_cost.py``. It keeps objects as plain files: ``/`` in a key is a
directory, and each object is three files (``<name>._S3rver_object``, ``.md5``,
``<name>._S3rver_metadata.json``): ~3 inodes and ~12 KB of disk per small object.

Not a general S3 stand-in: the tests keep moto. Checked against moto with the same objects:
``S3Storage.list_checkpoint`` / ``read`` / ``exists`` / ``write_atomic`` give the same results
(and the same request counts), GETs are byte-equal, ETags (MD5) equal, LastModified whole
seconds as on moto. Where s3rver differs from S3:

* Delimiter listings miss the CommonPrefixes of directories that hold only deeper objects
  (``team-1/`` above ``team-1/ck2/...``, ``sources/`` above ``sources/0/0``), so
  ``fleet.discover_checkpoints`` does not find nested checkpoints;
* listings walk the file system in name order, which is not key order when a name is a prefix
  of a sibling's followed by a byte below ``/`` (``ck1/`` is walked before ``ck1-old/``,
  ``offsets/5`` after ``offsets/5-x``); a listing that pages across such siblings (a prefix
  without the trailing ``/``, or the whole bucket) LOSES keys: the continuation token skips
  them. Checkpoint-root prefixes (``<ck>/``) with numeric log names are not affected;
* PutObject ignores If-None-Match (``write_atomic`` still refuses through its HEAD first);
* continuation tokens use DES, which OpenSSL 3 (Node >= 17) disables: without
  ``--openssl-legacy-provider`` (passed here) every truncated listing answers 500;
* SigV4 signatures are not checked, but the access key id must be ``S3RVER``; tokens are only
  valid for region us-east-1.

Installed on first use with npm into ``~/.cache/sparklag/npm`` (never into the repository).

>>> s3 = S3rverServer(Path("/tmp/s3rver")).start()
>>> s3.client().create_bucket(Bucket="checkpoints")
>>> s3.stop()
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from testbed.paths import CACHE
from testbed.process import Process, TestbedError, log_tail
from testbed.s3_server import S3Server

VERSION = "3.7.1"
NPM_PREFIX = CACHE / "npm"
# s3rver knows one key pair (S3RVER/S3RVER); SigV4 requests are accepted with any secret.
ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"
REGION = "us-east-1"  # s3rver's continuation tokens are only valid for us-east-1


def s3rver_script(prefix: Path = NPM_PREFIX) -> Path:
    """Path of s3rver's CLI, installing s3rver@VERSION with npm into `prefix` if needed."""
    package = prefix / "node_modules" / "s3rver"
    script = package / "bin" / "s3rver.js"
    if _installed_version(package) == VERSION and script.exists():
        return script
    npm = shutil.which("npm")
    if not shutil.which("node") or not npm:
        raise TestbedError(
            "s3rver needs Node.js and npm on PATH (node >= 8; tested with Node 20): "
            "install them (e.g. apt-get install nodejs npm) or use testbed.s3_server (moto)"
        )
    prefix.mkdir(parents=True, exist_ok=True)
    log = prefix / "npm-install.log"
    with open(log, "wb") as out:
        done = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                f"s3rver@{VERSION}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=600,
            check=False,
        )
    if done.returncode != 0 or _installed_version(package) != VERSION:
        raise TestbedError(
            f"npm install s3rver@{VERSION} into {prefix} failed (exit {done.returncode}). "
            f"Log {log}:\n{log_tail(log)}"
        )
    return script


def _legacy_openssl(node: str) -> list[str]:
    """s3rver encrypts ListObjectsV2 continuation tokens with DES, which OpenSSL 3 (Node >= 17)
    disables: without this flag every truncated listing answers 500 InternalError."""
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.strip()
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        raise TestbedError(f"{node} --version answered {version!r}") from None
    return ["--openssl-legacy-provider"] if major >= 17 else []


def _installed_version(package: Path) -> str | None:
    try:
        return str(json.loads((package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


class S3rverServer(S3Server):
    """s3rver on an ephemeral port, data in `workdir`/data (kept across restarts, so a fleet
    uploaded once can be served again); `endpoint` is its URL, `client()` a boto3 client.

    testbed.s3_server.S3Server's interface (`endpoint`, `options`, `client()`, `start()`,
    `stop()`), without `spark_conf`: s3a was not tried against s3rver.
    """

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.data = workdir / "data"

    def start(self, timeout: float = 60.0) -> S3rverServer:
        script = s3rver_script()
        node = shutil.which("node")
        if not node:
            raise TestbedError("s3rver needs Node.js: `node` is not on PATH")
        self.data.mkdir(parents=True, exist_ok=True)
        self.process = Process(
            "s3rver",
            # --silent: otherwise it logs every request (here, into the log file)
            [
                node,
                *_legacy_openssl(node),
                str(script),
                "-d",
                str(self.data),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "--silent",
            ],
            self.workdir / "s3rver.log",
        )
        self.process.wait_ready(self._answers, timeout, f"S3 ListBuckets on {self.endpoint}")
        return self

    @property
    def options(self) -> dict:
        """The `s3_options` our storage layer takes (an IP endpoint: botocore addresses it
        path-style)."""
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "region_name": REGION,
        }

    def spark_conf(self) -> dict[str, str]:
        raise NotImplementedError("s3rver is for the storage benchmarks; Spark uses moto")
