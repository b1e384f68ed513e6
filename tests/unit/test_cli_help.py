"""`sparklag <command> --help` a newcomer can walk, checked without a snapshot of the text:
flags in groups, a default (or "none"/"off") on every flag's line, durations named as such,
the exit codes in the epilog; a mistyped flag gets a suggestion and a bad value its reason
first, in one line, then one usage line."""

from __future__ import annotations

import re

import pytest

from airflow_sparklag import cli

COMMON = ["what to check", "Kafka", "storage", "Kerberos", "output"]
GROUPS = {
    "status": [*COMMON, cli.THRESHOLDS],
    "wait": ["what to wait for", *COMMON, cli.THRESHOLDS],
    "history": COMMON,
    "snapshot": COMMON,
    "migrate": [*COMMON, "migration"],
    "serve": [*COMMON, "exporter", cli.THRESHOLDS],
}
DURATIONS = {
    "status": ["--timeout", "--max-lag-seconds", "--max-commit-age-seconds", "--runs-every"],
    "wait": ["--poll-interval", "--max-wait", "--min-time-to-loss-seconds"],
    "migrate": ["--quiet-period"],
    "serve": ["--interval", "--rediscover", "--max-in-flight-seconds"],
}


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def sections(text: str) -> dict[str, str]:
    """Group title -> its lines, from the help text."""
    found: dict[str, str] = {}
    for block in text.split("\n\n"):
        head, _, body = block.partition(":\n")
        if body and "\n" not in head:
            found[head] = body
    return found


def flag_entries(body: str) -> list[str]:
    """Each flag's whole entry (its help wraps over several lines) in a group's body."""
    return [" ".join(e.split()) for e in re.split(r"\n(?=  -)", body) if e.strip().startswith("-")]


@pytest.mark.parametrize("command", list(GROUPS))
def test_flags_are_grouped_in_the_order_a_newcomer_reads(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    found = [title for title in sections(help_of(command, capsys)) if title != "options"]
    assert sorted(found) == sorted(GROUPS[command]), found
    assert found.index("Kafka") < found.index("storage") < found.index("Kerberos")
    assert found[-1] == "output", found


@pytest.mark.parametrize("command", list(GROUPS))
def test_every_flag_says_its_default_or_none(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of(command, capsys)
    entries = [e for body in sections(text).values() for e in flag_entries(body)]
    assert len(entries) > 10
    for entry in entries:
        if entry.startswith("-h, --help"):
            continue
        assert "default" in entry, entry


@pytest.mark.parametrize("command", list(DURATIONS))
def test_durations_are_named_so_and_their_defaults_have_units(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = " ".join(help_of(command, capsys).split())
    for flag in DURATIONS[command]:
        assert f"{flag} DURATION" in text, flag
    assert "durations take a unit: 500ms, 90s, 5m, 1h, 1d" in text
    assert "(default: 10.0)" not in text and "(default: 600.0)" not in text


@pytest.mark.parametrize("command", list(GROUPS))
def test_the_epilog_lists_every_exit_code(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    epilog = " ".join(help_of(command, capsys).split("exit codes:", 1)[1].split())
    for code, meaning in [
        (0, "healthy"),
        (1, "lagging"),
        (2, "stalled/stopped/rewound/data lost"),
        (3, "unknown"),
        (4, "the check failed"),
        (5, "migrate refused"),
        (64, "usage or configuration error"),
        (75, "wait gave up"),
    ]:
        assert f"{code} {meaning}" in epilog, code


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["status", "/x", "-b", "b:1", "--max-lag-secs", "5m"], "did you mean --max-lag-seconds?"),
        (["status", "/x", "-b", "b:1", "--jsn"], "did you mean --json?"),
        (["wait", "helth", "/x"], "did you mean health?"),
        (["stauts", "/x"], "did you mean status?"),
    ],
)
def test_a_mistyped_flag_or_choice_gets_a_suggestion(
    args: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(args) == 64
    first, *rest = capsys.readouterr().err.splitlines()
    assert first.startswith("sparklag: ") and first.endswith(hint), first
    assert len(rest) == 1 and rest[0].startswith("usage: sparklag"), rest


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ["status", "/x", "-b", "b:1", "--max-lag-seconds", "5x"],
            "argument --max-lag-seconds: must be a duration such as 60, 90s, 5m or 1h, got '5x'",
        ),
        (
            ["status", "/x", "-b", "b:1", "--max-lag-records-per-partition", "-5"],
            "argument --max-lag-records-per-partition: must be 0 or",
        ),
        (["migrate", "/x", "-b", "b:1"], "the following arguments are required: --archive-root"),
    ],
)
def test_a_bad_value_says_its_reason_first_then_one_usage_line(
    args: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(args) == 64
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"sparklag: {reason}"), lines
    assert len(lines) == 2 and lines[1].startswith(f"usage: sparklag {args[0]} "), lines
