"""The ``sparklag`` connection: the connections a check needs, bundled by id in its extra
(``{"kafka_config_id": "kafka_prod", "aws_conn_id": "aws_lake", "location": "s3a://lake/ck/x"}``,
docs/connections.md). Read strictly: an unknown key or a wrong type is an ``InvalidParameter``
naming the key and the connection."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.errors import InvalidParameter

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_sparklag.location import Location

CONN_TYPE = "sparklag"
DEFAULT_KAFKA_CONN_ID = "kafka_default"
# The prefix Airflow's older forms put before a connection type's extra fields.
_OLD_PREFIX = f"extra__{CONN_TYPE}__"

# key -> (label, description, JSON schema of the value): the form's fields, in form order; the
# UI shows the descriptions as plain text.
FIELDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "kafka_config_id": (
        "Kafka connection id",
        "The kafka connection of the cluster the jobs read (its extra is librdkafka config).",
        {"type": ["string", "null"], "default": DEFAULT_KAFKA_CONN_ID},
    ),
    "aws_conn_id": (
        "AWS connection id",
        "An aws connection, for checkpoints on S3 (s3://, s3a://).",
        {"type": ["string", "null"]},
    ),
    "webhdfs_conn_id": (
        "WebHDFS connection id",
        "A webhdfs connection, for checkpoints on HDFS (webhdfs://, hdfs://).",
        {"type": ["string", "null"]},
    ),
    "gcp_conn_id": (
        "Google Cloud connection id",
        "A google_cloud_platform connection, for checkpoints on GCS (gs://).",
        {"type": ["string", "null"]},
    ),
    "wasb_conn_id": (
        "Azure Blob connection id",
        "A wasb or adls connection, for checkpoints on Azure (abfs://, abfss://, az://).",
        {"type": ["string", "null"]},
    ),
    "source_kafka_conn_ids": (
        "Kafka connection per source",
        "Sources that read another cluster: source index or name -> kafka connection id, "
        'e.g. {"1": "kafka_cluster_b"}.',
        {"type": ["object", "null"]},
    ),
    "location": (
        "Checkpoint to test",
        "A checkpoint location that the Test button reads (committed batch, partitions).",
        {"type": ["string", "null"]},
    ),
}
# Old key -> its name now (accepted with a DeprecationWarning for one release).
RENAMED = {"kafka_conn_id": "kafka_config_id"}
ID_KEYS = ("kafka_config_id", "aws_conn_id", "webhdfs_conn_id", "gcp_conn_id", "wasb_conn_id")
# The standard fields of a connection form that a bundle does not use.
HIDDEN_FIELDS = ("host", "schema", "login", "password", "port")


@dataclass(frozen=True)
class ConnectionBundle:
    """The ids a ``sparklag`` connection bundles (None: not configured)."""

    conn_id: str
    kafka_config_id: str = DEFAULT_KAFKA_CONN_ID
    aws_conn_id: str | None = None
    webhdfs_conn_id: str | None = None
    gcp_conn_id: str | None = None
    wasb_conn_id: str | None = None
    source_kafka_conn_ids: dict[str, str] = field(default_factory=dict)
    location: Location | None = None


def read_bundle(conn: Connection) -> ConnectionBundle:
    """The bundle of a ``sparklag`` connection; InvalidParameter for anything it cannot read."""
    where = f"(sparklag connection {conn.conn_id!r})"
    if conn.conn_type and conn.conn_type != CONN_TYPE:
        raise params.invalid(
            "sparklag_conn_id",
            f"connection {conn.conn_id!r} is a {conn.conn_type!r} connection, not a "
            f"{CONN_TYPE!r} one; give its id as the matching *_conn_id instead",
        )
    extra = _extra_of(conn, where)
    values: dict[str, Any] = {}
    try:
        for key, value in extra.items():
            if params.is_none(value):
                continue  # a form leaves unused fields empty
            if key in ID_KEYS:
                values[key] = params.text(f"extra.{key}", value)
            elif key == "source_kafka_conn_ids":
                values[key] = params.source_map(f"extra.{key}", value)
            else:
                values[key] = params.location(f"extra.{key}", value)
    except InvalidParameter as exc:
        raise InvalidParameter(f"{exc} {where}", parameter=exc.parameter) from None
    return ConnectionBundle(str(conn.conn_id), **values)


def _extra_of(conn: Connection, where: str) -> dict[str, Any]:
    """The extra as a dict of known keys (old ``extra__sparklag__`` prefixes removed)."""
    raw = conn.extra
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        extra = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise params.invalid("extra", f"is not JSON {where}") from None
    if not isinstance(extra, Mapping):
        raise params.invalid("extra", f"must be a JSON object of connection ids {where}")
    known: dict[str, Any] = {}
    for key, value in extra.items():
        name = key[len(_OLD_PREFIX) :] if str(key).startswith(_OLD_PREFIX) else str(key)
        name = params.renamed(name, RENAMED, where)
        if name not in FIELDS:
            close = difflib.get_close_matches(name, list(FIELDS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise params.invalid(
                f"extra.{name}",
                f"unknown key {where}; {hint}the keys are {', '.join(FIELDS)}",
            )
        if name in known:
            raise params.invalid(f"extra.{name}", f"is given twice (an old and a new key) {where}")
        known[name] = value
    return known


def conn_fields() -> dict[str, Any]:
    """:data:`FIELDS` as the provider info's ``conn-fields`` (Airflow 3.2+ connection form)."""
    return {
        key: {"label": label, "description": description, "schema": dict(schema)}
        for key, (label, description, schema) in FIELDS.items()
    }
