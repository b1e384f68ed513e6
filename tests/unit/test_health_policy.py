"""Health carries its policy: severity, CLI exit code, breach, dashboard number, parsing.

One table: every verdict and everything that follows from it. Callers (CLI, operators,
sensors) derive their constants from it and must agree with it.
"""

from __future__ import annotations

import pytest

from airflow_sparklag.model.verdict import DEFAULT_FAIL_ON, EXIT_CHECK_FAILED, EXIT_USAGE, Health

# verdict: (severity, exit_code, is_breach, metric_value)
POLICY = {
    Health.OK: (0, 0, False, 0),
    Health.LAGGING: (1, 1, True, 1),
    Health.STALLED: (2, 2, True, 2),
    Health.STOPPED: (3, 2, True, 3),
    Health.REWIND: (4, 2, True, 4),
    Health.DATA_LOSS: (5, 2, True, 5),
    Health.UNKNOWN: (-1, 3, False, -1),
}


def test_the_table_covers_every_verdict() -> None:
    assert set(POLICY) == set(Health)


@pytest.mark.parametrize(("verdict", "policy"), POLICY.items(), ids=lambda v: str(v))
def test_policy_of_each_verdict(verdict: Health, policy: tuple[int, int, bool, int]) -> None:
    assert (verdict.severity, verdict.exit_code, verdict.is_breach, verdict.metric_value) == policy


def test_severity_follows_the_order_of_the_rules() -> None:
    ranked = [h for h in Health if h is not Health.UNKNOWN]
    assert [h.severity for h in ranked] == list(range(len(ranked)))
    # UNKNOWN sits below OK, outside the scale: "the worst of" never picks it over a verdict.
    assert Health.UNKNOWN.severity < Health.OK.severity
    assert max([Health.UNKNOWN, Health.OK], key=lambda h: h.severity) is Health.OK


def test_default_fail_on_is_every_breach_in_order() -> None:
    assert DEFAULT_FAIL_ON == (
        Health.LAGGING,
        Health.STALLED,
        Health.STOPPED,
        Health.REWIND,
        Health.DATA_LOSS,
    )
    assert all(isinstance(h, Health) for h in DEFAULT_FAIL_ON)


def test_exit_codes_beyond_the_verdicts() -> None:
    verdict_codes = {h.exit_code for h in Health}
    assert EXIT_CHECK_FAILED == 4 and EXIT_CHECK_FAILED not in verdict_codes
    assert EXIT_USAGE == 64  # sysexits EX_USAGE


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("OK", Health.OK),
        ("lagging", Health.LAGGING),
        ("Data_Loss", Health.DATA_LOSS),
        (" stalled ", Health.STALLED),
        (Health.REWIND, Health.REWIND),
    ],
)
def test_parse_accepts_any_case(name: object, expected: Health) -> None:
    assert Health.parse(name) is expected


@pytest.mark.parametrize("name", ["LAGGIN", "", "DATA LOSS", None, 1, ["OK"]])
def test_parse_refuses_unknown_names_listing_the_valid_ones(name: object) -> None:
    with pytest.raises(ValueError, match="unknown verdict") as caught:
        Health.parse(name)
    message = str(caught.value)
    assert repr(name) in message
    assert all(h.value in message for h in Health)
