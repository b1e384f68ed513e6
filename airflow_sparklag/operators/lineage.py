"""OpenLineage for every operator and sensor: the checkpoints and Kafka topics a task's session
read, and what a snapshot or migration wrote, as datasets without credentials (docs/lineage.md).
Nothing imports the OpenLineage provider before it asks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow_sparklag.session import Session

# Schemes whose dataset namespace is the scheme and bucket/container (OpenLineage naming).
S3_SCHEMES = ("s3", "s3a", "s3n")
AZURE_SCHEMES = ("abfs", "abfss", "wasb", "wasbs", "az")

Dataset = tuple[str, str]  # (namespace, name)


def storage_dataset(location: str) -> Dataset:
    """``location`` as an OpenLineage dataset (namespace, name), without credentials."""
    if "://" not in location:
        return "file", location.removeprefix("file:")
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    authority = f"{host}:{parts.port}" if parts.port else host
    if scheme == "file":
        return "file", parts.path
    if scheme in S3_SCHEMES:
        return f"s3://{authority}", parts.path.lstrip("/")
    if scheme in ("gs", "gcs"):
        return f"gs://{authority}", parts.path.lstrip("/")
    if scheme in AZURE_SCHEMES:
        container = parts.username  # abfss://<container>@<account>.dfs.core.windows.net
        where = f"{container}@{authority}" if container else authority
        return f"{scheme}://{where}", parts.path.lstrip("/")
    return f"{scheme}://{authority}", parts.path or "/"  # hdfs://nn:8020 + /ck, webhdfs


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://host:port`` of the first bootstrap server (``SASL_SSL://h:9093`` -> h:9093)."""
    first = bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first.rsplit('://', 1)[-1]}"


def datasets_read(sources: dict[str, dict[str, set[str]]]) -> list[Dataset]:
    """Checkpoints then topics (sorted, each once) of ``Session.sources_read()``."""
    checkpoints = {storage_dataset(location) for location in sources}
    topics = {
        (kafka_namespace(servers), topic)
        for clusters in sources.values()
        for servers, names in clusters.items()
        if servers and servers != "-"
        for topic in names
    }
    return sorted(checkpoints) + sorted(topics)


class LineageMixin:
    """Records a task's inputs and outputs; reports them to OpenLineage when it is installed.

    The hook's session is read before the hook is closed (:meth:`record_reads`) and once more
    when OpenLineage asks (a sensor in poke mode keeps its hook open); operators that write add
    their outputs with :meth:`record_writes`. A sensor resumed after deferring read nothing in
    its own process (the triggerer did): it reports its ``location``, without the topics.
    """

    def record_reads(self) -> None:
        """Add what the open hook's session read (before the hook is closed)."""
        session: Session | None = getattr(self.__dict__.get("hook"), "_session", None)
        if session is None:
            return
        read = self.__dict__.setdefault("_lineage_inputs", {})
        for dataset in datasets_read(session.sources_read()):
            read[dataset] = None

    def record_writes(self, *locations: str | None) -> None:
        written = self.__dict__.setdefault("_lineage_outputs", {})
        for location in locations:
            if location:
                written[storage_dataset(location)] = None

    def lineage(self) -> tuple[list[Dataset], list[Dataset]]:
        """(inputs, outputs) as (namespace, name) pairs, in the order first seen."""
        self.record_reads()  # a sensor poking in this process keeps its hook open
        inputs = list(self.__dict__.get("_lineage_inputs", {}))
        location = getattr(self, "location", None)
        if not inputs and isinstance(location, str) and location:
            inputs = [storage_dataset(location)]
        return inputs, list(self.__dict__.get("_lineage_outputs", {}))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow.providers.common.compat.openlineage.facet import Dataset as OLDataset
        from airflow.providers.openlineage.extractors import OperatorLineage

        inputs, outputs = self.lineage()
        return OperatorLineage(
            inputs=[OLDataset(namespace=ns, name=name) for ns, name in inputs],
            outputs=[OLDataset(namespace=ns, name=name) for ns, name in outputs],
        )
