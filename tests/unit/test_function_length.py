"""Functions stay under ~80 lines: every function and method of the package, nested ones too.

A function is measured from its ``def`` line to its last line (docstring and comments included,
decorators not). The failure names every function over the limit, not just the first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 80
PACKAGE = Path(__file__).resolve().parents[2] / "airflow_sparklag"

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, _Function]]:
    """(qualified name, node) of every function under ``node``, methods as ``Class.method``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _functions(child, f"{name}.<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _length(function: _Function) -> int:
    assert function.end_lineno is not None
    return function.end_lineno - function.lineno + 1


def too_long(root: Path = PACKAGE, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (N lines)`` of every function longer than ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, function in _functions(tree):
            lines = _length(function)
            if lines > limit:
                where = path.relative_to(root.parent)
                found.append(f"{where}:{function.lineno} {name} ({lines} lines)")
    return found


def test_the_check_measures_defs_methods_and_nested_functions(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    (tmp_path / "sample.py").write_text(
        f"def short():\n    pass\n\n\ndef long():\n{body}\n\n\n"
        f"class C:\n    async def method(self):\n{body.replace('    ', '        ')}\n\n\n"
        f"def outer():\n    def inner():\n{body.replace('    ', '        ')}\n    return inner\n"
    )
    assert [entry.split(" ", 1)[1] for entry in too_long(tmp_path, limit=5)] == [
        "long (6 lines)",
        "C.method (6 lines)",
        "outer (8 lines)",
        "outer.<locals>.inner (6 lines)",
    ]


def test_no_function_is_longer_than_the_limit() -> None:
    found = too_long()
    assert not found, (
        f"{len(found)} function(s) longer than {MAX_LINES} lines; split them into named "
        "helpers:\n  " + "\n  ".join(found)
    )
