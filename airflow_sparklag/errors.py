"""Every error this package raises on purpose, in one place.

Every message names the path, topic, partition or parameter concerned and says what to do.
Catch :class:`SparkLagError` for all of them, or a group's base (``StorageError``: retrying
may help) for one kind. The hierarchy, and when each is raised::

    SparkLagError
    │   (parameters and usage)
    ├── InvalidParameter (also a ValueError)   a parameter could not be read; .parameter
    ├── UsageError                             a command was called wrongly (CLI exit 64)
    │   └── HadoopConfigInvalid                a Hadoop site file is malformed or refused
    │   (storage)
    ├── UnsupportedStorageURL                  no storage backend for the URL's scheme
    ├── StorageError                           the store answered with an error, or not at all
    │   ├── StorageAccessDenied                credentials or policy refused the path
    │   │   ├── TokenFileInvalid               a Hadoop token file is damaged / has no token
    │   │   └── DelegationTokenRejected        the NameNode refused a delegation token
    │   ├── StorageNotFound                    no object at the path
    │   │   └── BucketNotFound                 the S3 bucket itself is missing
    │   ├── StorageAlreadyExists               a write that must not overwrite found an object
    │   └── UnsupportedOperation               the store cannot walk / copy / rename / ...
    │       └── ConditionalWriteUnsupported    the S3 server ignores If-None-Match
    │   (checkpoints)
    ├── CheckpointNotFound                     no offsets/ and no commits/ at the location
    ├── CheckpointCorrupt                      a checkpoint file is empty, truncated, not Spark's
    │   └── UnsupportedCheckpointVersion       a log version this reader does not know
    │   (Kafka)
    ├── KafkaUnavailable                       the cluster did not answer in time
    ├── KafkaError                             the cluster answered with an error
    │   └── KafkaConfigInvalid (also UsageError)  librdkafka refused the config (CLI exit 64)
    ├── ConsumerGroupActive                    a group with live members: offsets not touched
    │   (snapshots, archives, migrations)
    ├── SnapshotError                          a snapshot could not be taken, written or read
    │   ├── NothingCommitted                   no committed batch: no offsets to carry over
    │   ├── SnapshotCorrupt                    not JSON, unknown format or wrong checksum
    │   └── SnapshotVerificationFailed         read back, it differs from what was written
    ├── ArchiveError                           an archived copy differs from its original
    └── MigrationRefused                       refused to lose data or disturb a job; no change
        ├── JobStillRunning                    the query committed or planned a batch recently
        ├── DataLossRefused                    committed offsets below the log start
        ├── TopicGone                          a topic was deleted (or deleted and re-created)
        ├── SinkLogConflict                    a sink's _spark_metadata would skip batches
        └── SnapshotMismatch                   the snapshot is of another query or is stale

Modules that raise these re-export them (``from airflow_sparklag.migration import
MigrationRefused`` works), but this module is where they live.
"""

from __future__ import annotations

import re


class SparkLagError(Exception):
    """Base class of every error this package raises on purpose."""


# -- parameters and usage ----------------------------------------------------------------------

# "thresholds.max_lag_seconds: must be a number" names the parameter before the first ": ".
_PARAMETER_PREFIX = re.compile(r"^([A-Za-z_][\w.\[\]-]*): ")


class InvalidParameter(SparkLagError, ValueError):
    """A parameter could not be read; nothing ran on it. ``parameter`` names it, and the
    message starts with it (``"dry_run: must be true or false, got 'Ture'"``)."""

    parameter: str | None

    def __init__(self, message: str, parameter: str | None = None) -> None:
        if parameter is None:
            match = _PARAMETER_PREFIX.match(message)
            parameter = match.group(1) if match else None
        elif not message.startswith(f"{parameter}: "):
            message = f"{parameter}: {message}"
        super().__init__(message)
        self.parameter = parameter


class UsageError(SparkLagError): ...


# -- storage -----------------------------------------------------------------------------------


class HadoopConfigInvalid(UsageError): ...


class UnsupportedStorageURL(SparkLagError): ...


class StorageError(SparkLagError): ...


class StorageAccessDenied(StorageError): ...


class TokenFileInvalid(StorageAccessDenied): ...


class DelegationTokenRejected(StorageAccessDenied):
    """The NameNode refused a delegation token (``InvalidToken``): expired or cancelled."""


class StorageNotFound(StorageError): ...


class BucketNotFound(StorageNotFound):
    """The S3 bucket itself does not exist: unlike a missing key, ``exists()`` raises it."""


class StorageAlreadyExists(StorageError): ...


class UnsupportedOperation(StorageError): ...


class ConditionalWriteUnsupported(UnsupportedOperation):
    """The S3 server rejected ``If-None-Match``; the writer checked existence itself before."""


# -- checkpoints -------------------------------------------------------------------------------


class CheckpointNotFound(SparkLagError): ...


class CheckpointCorrupt(SparkLagError): ...


class UnsupportedCheckpointVersion(CheckpointCorrupt): ...


# -- Kafka -------------------------------------------------------------------------------------


class KafkaUnavailable(SparkLagError): ...


class KafkaError(SparkLagError): ...


class KafkaConfigInvalid(KafkaError, UsageError): ...


class ConsumerGroupActive(SparkLagError): ...


# -- snapshots ---------------------------------------------------------------------------------


class SnapshotError(SparkLagError): ...


class NothingCommitted(SnapshotError): ...


class SnapshotCorrupt(SnapshotError): ...


class SnapshotVerificationFailed(SnapshotError): ...


# -- archives ----------------------------------------------------------------------------------


class ArchiveError(SparkLagError):
    """An archived copy does not match the original, or the original changed meanwhile."""


# -- migrations --------------------------------------------------------------------------------


class MigrationRefused(SparkLagError): ...


class JobStillRunning(MigrationRefused): ...


class DataLossRefused(MigrationRefused): ...


class TopicGone(MigrationRefused): ...


class SinkLogConflict(MigrationRefused): ...


class SnapshotMismatch(MigrationRefused): ...
