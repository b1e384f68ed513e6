"""Operators: snapshot a checkpoint, export its offsets to a consumer group, migrate it; each a
thin adapter over the core (``snapshot``, ``consumer_group``, ``migration``) returning the JSON
document of docs/json.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import AirflowFailException, BaseOperator

from airflow_sparklag import params
from airflow_sparklag.hooks.sparklag import ConnectionIds
from airflow_sparklag.migration import MigrationOptions
from airflow_sparklag.model.result import document
from airflow_sparklag.operators.base import SparkLagHookMixin

if TYPE_CHECKING:
    from airflow.sdk import Context


class _SparkLagConnections(SparkLagHookMixin, BaseOperator):
    """Connections (one hook, one session) shared by the three operators, and the checkpoint's
    ``location``, named as every other operator names it (``checkpoint_location``, its old
    name, is read for one release with a DeprecationWarning; docs/names.md)."""

    def __init__(
        self, *, location: str | None = None, checkpoint_location: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.location = self.renamed(
            "checkpoint_location", checkpoint_location, location, params.location
        )


class CheckpointSnapshotOperator(_SparkLagConnections):
    """Write a verified snapshot of a checkpoint's committed offsets; optionally export them.

    Example::

        CheckpointSnapshotOperator(
            task_id="snapshot_orders",
            location="s3a://bucket/ck/orders",
            snapshot_root="s3a://bucket/snapshots",
            consumer_group="spark-orders",      # optional: make Burrow & co see the job
            aws_conn_id="aws_default",
        )

    Returns the JSON document of docs/json.md whose one result is ``SnapshotResult.to_dict()``
    (path, checksum, committed batch, startingOffsets).
    """

    template_fields: Sequence[str] = ("location", "snapshot_root", "consumer_group")

    def __init__(
        self, *, snapshot_root: str, consumer_group: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.snapshot_root = self.given("snapshot_root", snapshot_root, params.location)
        self.consumer_group = self.given("consumer_group", consumer_group, params.optional_text)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_sparklag.snapshot import export_to_group, snapshot_checkpoint

        location, root, group = self.read_params(
            lambda: (
                params.location("location", self.location),
                params.location("snapshot_root", self.snapshot_root),
                params.optional_text("consumer_group", self.consumer_group),
            )
        )
        hook = self.hook

        def work() -> dict[str, Any]:
            result = snapshot_checkpoint(location, root, session=hook.session)
            payload = result.to_dict()
            if group:
                payload["consumer_group"] = export_to_group(hook.session, group, result)
            return payload

        payload = self.run_core(work)
        self.record_writes(payload["path"])
        self.log.info(
            "Snapshot of %s batch %s written to %s",
            payload["checkpoint_location"],
            payload["committed_batch_id"],
            payload["path"],
        )
        return document("snapshot", [payload], {"jobs": 1, "failed_checks": 0})


class ConsumerGroupExportOperator(_SparkLagConnections):
    """Commit a checkpoint's committed offsets to an idle Kafka consumer group, on a schedule.

    Example::

        ConsumerGroupExportOperator(
            task_id="export_orders",
            location="hdfs://nn:8020/ck/orders",
            consumer_group="spark-orders",
            webhdfs_conn_id="webhdfs_default",
        )

    A group with active members is refused. Returns the JSON document of docs/json.md whose
    one result is ``{"group_id", "offsets", "lag", "total_lag", "committed_batch_id"}``.
    """

    template_fields: Sequence[str] = ("location", "consumer_group")

    def __init__(
        self, *, consumer_group: str | None = None, group_id: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.consumer_group = self.renamed("group_id", group_id, consumer_group, params.text)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_sparklag.snapshot import export_to_group, snapshot_checkpoint

        location = self.read_params(lambda: params.location("location", self.location))
        group_id = self.read_params(lambda: params.text("consumer_group", self.consumer_group))
        hook = self.hook

        def work() -> dict[str, Any]:
            result = snapshot_checkpoint(
                location, "", session=hook.session, record_timestamps=False, write=False
            )
            payload = export_to_group(hook.session, group_id, result)
            payload["committed_batch_id"] = result.snapshot.committed.batch_id
            return payload

        payload = self.run_core(work)
        self.log.info("Group %s: total lag %s", group_id, payload["total_lag"])
        return document("export", [payload], {"jobs": 1, "failed_checks": 0})


class CheckpointMigrationOperator(_SparkLagConnections):
    """Snapshot, validate and archive a checkpoint; return the new query's startingOffsets.

    Example: docs/operators/checkpoint-migration.md.

    Refusals (job alive, data loss, topic gone, file-sink log) fail the task without retries;
    a re-run after a crash resumes from the migration journal.
    """

    template_fields: Sequence[str] = ("location", "archive_root")
    flat_options: ClassVar[tuple[type, ...]] = (ConnectionIds, MigrationOptions)

    def __init__(self, *, archive_root: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.archive_root = self.given("archive_root", archive_root, params.location)

    def _read(self) -> dict[str, Any]:
        """Every parameter, read before anything is touched: a value that cannot be read
        (``dry_run="Ture"``, ``quiet_period="nan"``) fails the task and moves nothing."""
        return {
            "location": params.location("location", self.location),
            "archive_root": params.location("archive_root", self.archive_root),
            "options": self.options(MigrationOptions),
        }

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_sparklag.migration import migrate_checkpoint

        given = self.read_params(self._read)
        hook = self.hook

        def work() -> dict[str, Any]:
            location, archive_root = given.pop("location"), given.pop("archive_root")
            result = migrate_checkpoint(location, archive_root, session=hook.session, **given)
            payload = result.to_dict()
            payload["starting_offsets_json"] = (
                result.starting_offsets_json() if len(result.starting_offsets) == 1 else None
            )
            return payload

        payload = self.run_core(work)
        if payload["status"] != "planned":  # a dry run writes nothing
            self.record_writes(payload["snapshot_path"], payload["archive_location"])
        for warning in payload["warnings"]:
            self.log.warning("%s", hook.scrub(warning))
        self.log.info(
            "Migration of %s: %s (journal %s)",
            payload["checkpoint"],
            payload["status"],
            payload["journal_path"],
        )
        if payload["refusals"]:
            # Dry run: the plan is the result, but a refused plan must not look green.
            raise AirflowFailException(hook.scrub("; ".join(payload["refusals"])))
        return document("migrate", [payload], {"jobs": 1, "failed_checks": 0})
