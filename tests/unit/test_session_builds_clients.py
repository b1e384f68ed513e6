"""session.py is the only place that builds storage backends, checkpoint readers and Kafka
clients (docs/architecture.md, "One session"): every other module asks a Session, or the
builders session.py itself uses (``StorageOptions.open``, ``build_kafka_client``), for them.
Read from the source with ``ast``, so docstring examples do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_sparklag

PACKAGE = Path(airflow_sparklag.__file__).parent
# What only session.py builds; the modules defining them build their own (classmethods, ...).
BUILT_BY_THE_SESSION = {
    "open_storage",
    "LocalStorage",
    "S3Storage",
    "WebHDFSStorage",
    "FsspecStorage",
    "CheckpointReader",
    "KafkaOffsetsClient",
}


def _may_build(module: Path) -> bool:
    relative = module.relative_to(PACKAGE)
    return (
        relative.parts[0] == "storage"
        or relative.name == "session.py"
        or relative.name == "kafka.py"
        or relative.name.startswith("kafka_")
    )


def _built(call: ast.Call) -> str | None:
    """The name of what ``call`` builds, if it is one of BUILT_BY_THE_SESSION: ``S3Storage(...)``,
    ``s3.S3Storage(...)`` or ``WebHDFSStorage.for_url(...)``."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in BUILT_BY_THE_SESSION:
        return func.id
    if isinstance(func, ast.Attribute):
        if func.attr in BUILT_BY_THE_SESSION:
            return func.attr
        if isinstance(func.value, ast.Name) and func.value.id in BUILT_BY_THE_SESSION:
            return f"{func.value.id}.{func.attr}"
    return None


def _throwaway_session(node: ast.AST) -> bool:
    """``Session(...).kafka``: a session built only to take one of its clients (never closed)."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "Session"
    )


def test_only_the_session_builds_backends_readers_and_kafka_clients():
    found = []
    for module in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(module.read_text(), str(module))
        where = module.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            built = _built(node) if isinstance(node, ast.Call) else None
            if built is not None and not _may_build(module):
                found.append(f"{where}:{node.lineno} builds {built}(...)")
            if _throwaway_session(node):
                found.append(f"{where}:{node.lineno} builds a Session only to take a client")
    assert not found, (
        "ask a Session (session.storage / session.reader / session.kafka) or session.py's "
        "builders (StorageOptions.open, build_kafka_client) instead:\n" + "\n".join(found)
    )
