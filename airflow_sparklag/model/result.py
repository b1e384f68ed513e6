"""The result of a check: its report, its verdict and the evidence it was judged on. The
bottom of the package: imports nothing of ours but the other model types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_sparklag.model.report import LagReport
from airflow_sparklag.model.verdict import HealthVerdict


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

    def explain(self) -> str:
        """The evidence in one line: ``offsets/C; offsets/C-1 (lagging); ...``."""
        return "; ".join(map(str, self.evidence)) or "nothing read"

    def to_dict(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "error": self.error,
            "verdict": self.verdict.to_dict(),
            "report": None if self.report is None else self.report.to_dict(),
            "evidence": [read.to_dict() for read in self.evidence],
        }
