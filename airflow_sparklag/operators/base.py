"""What every operator and sensor of the provider shares: its connections, its hook, and how
rendered parameters and core errors become task outcomes.

Operators declare the connection ids once through :class:`SparkLagHookMixin` (like the
amazon provider's ``AwsBaseHookMixin``), with ``source_kafka_conn_ids`` for a query whose
sources read different Kafka clusters (docs/multi-cluster.md), or ``sparklag_conn_id`` for
one ``sparklag`` connection bundling them (ids given to the task win); the hook is built on first
use, after templates are rendered, and closed with the task. Parameters are read with
:mod:`airflow_sparklag.params` inside :meth:`SparkLagHookMixin.read_params`: a value that
cannot be read fails the task at once, naming the parameter, before anything is read or
changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, ClassVar, TypeVar

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_sparklag.hooks.sparklag import SparkLagHook

T = TypeVar("T")

# Connection ids are templated too, so that one DAG can serve several clusters via params.
CONN_FIELDS: tuple[str, ...] = (
    "kafka_config_id",
    "aws_conn_id",
    "webhdfs_conn_id",
    "source_kafka_conn_ids",
    "gcp_conn_id",
    "wasb_conn_id",
    "sparklag_conn_id",
)


class SparkLagHookMixin:
    """Connection ids, the hook, and the two error boundaries of a task."""

    kafka_config_id: str | None  # None: the sparklag connection's, else kafka_default
    aws_conn_id: str | None
    webhdfs_conn_id: str | None
    gcp_conn_id: str | None  # gs:// checkpoints: a google_cloud_platform connection
    wasb_conn_id: str | None  # abfs:// / abfss:// / az:// checkpoints: a wasb or adls connection
    source_kafka_conn_ids: Mapping[str, str] | str | None
    sparklag_conn_id: str | None  # a `sparklag` connection bundling the ids (hooks/bundle.py)
    task_id: str
    # Snapshots and migrations read one cluster: they refuse a source mapping, not ignore it.
    one_cluster_only: ClassVar[bool] = False

    def __init__(
        self,
        *,
        kafka_config_id: str | None = None,
        aws_conn_id: str | None = None,
        webhdfs_conn_id: str | None = None,
        source_kafka_conn_ids: Mapping[str, str] | str | None = None,
        gcp_conn_id: str | None = None,
        wasb_conn_id: str | None = None,
        sparklag_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sparklag_conn_id = sparklag_conn_id
        self.gcp_conn_id = gcp_conn_id
        self.wasb_conn_id = wasb_conn_id
        self.kafka_config_id = kafka_config_id
        self.aws_conn_id = aws_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        # source (index or name) -> `kafka` connection id of the cluster it reads
        self.source_kafka_conn_ids = source_kafka_conn_ids

    def source_kafka_map(self) -> dict[str, str]:
        """The rendered ``source_kafka_conn_ids``, read (a value it cannot read fails)."""
        from airflow_sparklag import params

        def read() -> dict[str, str]:
            mapped = params.source_map("source_kafka_conn_ids", self.source_kafka_conn_ids)
            if mapped and self.one_cluster_only:
                raise params.invalid(
                    "source_kafka_conn_ids",
                    f"{type(self).__name__} reads one Kafka cluster (kafka_config_id); "
                    "measuring sources per cluster applies to checks and sensors",
                )
            return mapped

        return self.read_params(read)

    @cached_property
    def hook(self) -> SparkLagHook:
        hook = SparkLagHook(
            kafka_config_id=self.kafka_config_id,
            aws_conn_id=self.aws_conn_id,
            webhdfs_conn_id=self.webhdfs_conn_id,
            source_kafka_conn_ids=self.source_kafka_map(),
            gcp_conn_id=self.gcp_conn_id,
            wasb_conn_id=self.wasb_conn_id,
            sparklag_conn_id=self.sparklag_conn_id,
        )
        if self.one_cluster_only and self.sparklag_conn_id:
            self.read_params(lambda: self._one_cluster_bundle(hook))
        return hook

    def _one_cluster_bundle(self, hook: SparkLagHook) -> None:
        """Refuse a sparklag connection that maps sources to other clusters (read now)."""
        from airflow_sparklag import params

        hook.get_conn()
        if hook.source_kafka_conn_ids:
            raise params.invalid(
                "sparklag_conn_id",
                f"connection {self.sparklag_conn_id!r} maps sources to other Kafka clusters "
                f"(source_kafka_conn_ids); {type(self).__name__} reads one Kafka cluster",
            )

    def get_hook(self) -> SparkLagHook:
        return self.hook

    def read_params(self, read: Callable[[], T]) -> T:
        """Run ``read`` (params.* calls); a value it cannot read fails the task for good."""
        from airflow_sparklag.errors import InvalidParameter

        try:
            return read()
        except InvalidParameter as exc:
            raise AirflowFailException(f"{self.task_id}: invalid parameter {exc}") from None

    def run_core(self, work: Callable[[], T]) -> T:
        """Run core work; its typed errors become task errors with every secret scrubbed.

        Refusals (a migration that would lose data) and invalid parameters are final: no
        retry can change them. Storage and Kafka errors may pass: the task may retry.
        """
        from airflow_sparklag.errors import InvalidParameter, MigrationRefused, SparkLagError

        hook = self.hook
        try:
            return work()
        except (MigrationRefused, InvalidParameter) as exc:
            raise AirflowFailException(hook.scrub(f"{type(exc).__name__}: {exc}")) from None
        except SparkLagError as exc:
            raise AirflowException(hook.scrub(f"{type(exc).__name__}: {exc}")) from None
        except Exception as exc:
            scrubbed = hook.scrub(str(exc))
            if scrubbed != str(exc):  # drop the original: its text holds a secret
                raise AirflowException(f"{type(exc).__name__}: {scrubbed}") from None
            raise

    def close_hook(self) -> None:
        if "hook" in self.__dict__:
            self.hook.close()
            del self.__dict__["hook"]


# How a task's check is judged: its attributes of these names, read by params.check_options.
CHECK_PARAMS = ("history", "exact_time_lag", "read_committed", "runs_every", "run_grace")


def check_options_of(task: Any) -> Any:
    """``CheckOptions`` from a task's rendered ``thresholds`` and :data:`CHECK_PARAMS`."""
    from airflow_sparklag import params

    given = {name: getattr(task, name) for name in CHECK_PARAMS}
    return params.check_options(thresholds_value=task.thresholds, **given)
