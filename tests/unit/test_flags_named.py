"""Every flag a message of the package names is a flag the user can give today: a renamed or
misspelled flag in a message sends the user to a name the CLI no longer has (found when
`--max-commit-age` became `--max-commit-age-seconds` and the short-history reason kept it)."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from airflow_sparklag import cli, params, spark_scan

PACKAGE = Path(cli.__file__).resolve().parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
# spark-submit's own flags, named where the Spark scan's submission is explained
SPARK_SUBMIT = {"--keytab", "--principal", "--py-files"}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def _named() -> dict[str, set[str]]:
    """flag -> the modules whose strings name it (docstrings and the old names' table aside)."""
    named: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if id(node) in docstrings or getattr(node, "value", None) in params.RENAMED_FLAGS:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for flag in FLAG.findall(node.value):
                    named.setdefault(flag, set()).add(str(path.relative_to(PACKAGE)))
    return named


def test_every_flag_a_message_names_exists_and_is_current() -> None:
    known = _options(cli.build_parser()) | _options(spark_scan.build_parser()) | SPARK_SUBMIT
    named = _named()
    assert "--max-lag-records-per-partition" in named  # the scan sees the messages
    unknown = {flag: sorted(where) for flag, where in named.items() if flag not in known}
    assert not unknown, f"messages name flags the CLI does not have: {unknown}"
    old = {flag: sorted(where) for flag, where in named.items() if flag in params.RENAMED_FLAGS}
    assert not old, f"messages name deprecated flags: {old}"
