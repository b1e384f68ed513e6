"""A first check on an estate: `sparklag status` at defaults with what the estate provides.

`status_at_defaults` runs the installed console script with the broker's address (and
`--json`, to read the answer) and nothing else, in this process's environment with every
variable that could point a client at a store, a cluster or a credential removed
(`ESTATE_VARIABLES`), then `env` added: what the estate itself provides (the `AWS_*`
variables of an instance, HADOOP_CONF_DIR, KRB5CCNAME, STORAGE_EMULATOR_HOST, ...). Each
estate's test (docs/index.md, "A first check on each estate") then asserts either the exact
answer or one message naming the single thing to add.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPARKLAG = Path(sys.executable).parent / "sparklag"
ESTATE_VARIABLES = (
    "AWS_",
    "AZURE_",
    "GOOGLE_",
    "CLOUDSDK_",
    "STORAGE_EMULATOR_HOST",
    "HADOOP_",
    "KRB5",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


@dataclass(frozen=True)
class FirstCheck:
    """What the user sees: the exit code, the job's JSON (None on a usage error) and stderr."""

    code: int
    job: dict[str, Any] | None
    stderr: str

    def lags(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> lag, of every source."""
        assert self.job is not None and self.job["error"] is None, self
        return {
            (t["topic"], p["partition"]): p["lag"]
            for s in self.job["report"]["sources"]
            for t in s["topics"]
            for p in t["partitions"]
        }

    def messages(self) -> list[str]:
        """Every sentence addressed to the user: the error (or the usage error), the notes and
        the verdict's reason."""
        if self.job is None:
            return [self.stderr.strip()]
        report = self.job["report"] or {}
        reason = (self.job.get("verdict") or {}).get("reason")
        said = list(
            dict.fromkeys(m for m in (self.job["error"], *report.get("notes", ()), reason) if m)
        )
        # A reason that is the error, or that quotes a note, says nothing new.
        return [m for m in said if not any(m != other and m in other for other in said)]

    def asks_for(self) -> set[str]:
        """The flags the user is told to add; ONE message at most names any (a note that
        cannot change the numbers asks for nothing)."""
        naming = [m for m in self.messages() if FLAG.search(m)]
        assert len(naming) <= 1, naming
        return set(FLAG.findall(naming[0])) if naming else set()


def status_at_defaults(
    location: str, bootstrap: str, *flags: str, env: dict[str, str] | None = None
) -> FirstCheck:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ESTATE_VARIABLES)}
    proc = subprocess.run(
        [str(SPARKLAG), "status", location, "-b", bootstrap, "--json", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    job = json.loads(proc.stdout)["results"][0] if proc.stdout.strip() else None
    return FirstCheck(proc.returncode, job, proc.stderr)
