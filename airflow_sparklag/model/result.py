"""The result of a check: its report, its verdict and the evidence it was judged on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_sparklag.model.report import LagReport
from airflow_sparklag.model.verdict import Health, HealthVerdict

# The id of the JSON documents of `sparklag --json` and the XCom of the operators and sensors
# (docs/schema/sparklag-1.json); a change a reader could trip on gets a new one.
SCHEMA = "sparklag/1"
# The state of a check that failed itself (no checkpoint, storage or Kafka unreachable): beside
# the verdicts in every summary, JSON document, XCom and CLI table; exit code 4.
CHECK_FAILED = "CHECK_FAILED"


@dataclass(frozen=True)
class Read:
    """One tier of a job's evidence: what was read, and the rules that asked for it."""

    what: str
    asked_by: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.what if not self.asked_by else f"{self.what} ({', '.join(self.asked_by)})"

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.what, "asked_by": list(self.asked_by)}


@dataclass(frozen=True)
class CheckResult:
    """Lag report and verdict of one checkpoint; `error` set (and `report` None) when the
    checkpoint could not be read in a multi-checkpoint check. ``evidence``: what it was judged
    on, and which rule asked for each part.

    >>> result = check(session, "s3a://bucket/ck/orders")       # doctest: +SKIP
    >>> result.verdict.health.value, result.report.total_lag    # doctest: +SKIP
    ('OK', 0)
    >>> json.dumps(result.to_dict())                            # doctest: +SKIP
    """

    report: LagReport | None
    verdict: HealthVerdict
    location: str = ""
    error: str | None = None  # "<ErrorClass>: message"
    evidence: tuple[Read, ...] = ()

    @classmethod
    def failed(cls, location: str, error: str) -> CheckResult:
        """A check that failed itself: CHECK_FAILED in its JSON, its verdict UNKNOWN."""
        return cls(None, HealthVerdict(Health.UNKNOWN, error, "check_failed"), location, error)

    def explain(self) -> str:
        """The evidence in one line: ``offsets/C; offsets/C-1 (lagging); ...``."""
        return "; ".join(map(str, self.evidence)) or "nothing read"

    def to_dict(self) -> dict[str, Any]:
        verdict = self.verdict.to_dict()
        if self.error is not None:  # one name for a check that failed, everywhere
            verdict.update(health=CHECK_FAILED, rule="check_failed")
        return {
            "location": self.location,
            "error": self.error,
            "verdict": verdict,
            "report": None if self.report is None else self.report.to_dict(),
            "evidence": [read.to_dict() for read in self.evidence],
        }


def summary_of(results: Iterable[CheckResult]) -> dict[str, Any]:
    """Counts per verdict (``CHECK_FAILED`` for a failed check) and totals over the jobs."""
    results = list(results)
    counts = Counter(
        CHECK_FAILED if r.error is not None else r.verdict.health.value for r in results
    )
    reports = [r.report for r in results if r.report is not None]
    seconds = [r.max_lag_seconds for r in reports if r.max_lag_seconds is not None]
    return {
        "jobs": len(results),
        "health": dict(sorted(counts.items())),
        "total_lag": sum(r.total_lag for r in reports),
        "max_lag_seconds": max(seconds, default=None),
        "failed_checks": counts.get(CHECK_FAILED, 0),
    }


def document(
    command: str, results: Iterable[Mapping[str, Any]], summary: Mapping[str, Any]
) -> dict[str, Any]:
    """The one JSON document of every ``--json`` and XCom (docs/json.md)."""
    return {
        "schema": SCHEMA,
        "command": command,
        "summary": dict(summary),
        "results": list(results),
    }


def check_document(command: str, results: Iterable[CheckResult]) -> dict[str, Any]:
    """The document of checks (``status``, a health wait, a check task's XCom)."""
    results = list(results)
    return document(command, (r.to_dict() for r in results), summary_of(results))
