"""Every error this package raises on purpose, in one place.

Every message names the path, topic, partition or parameter concerned and says what to do.
Catch :class:`SparkLagError` for all of them, or a group's base (``StorageError``: retrying
may help) for one kind. The hierarchy::

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


class UsageError(SparkLagError):
    """A command was called wrongly (missing or conflicting arguments, unreadable config)."""


# -- storage -----------------------------------------------------------------------------------


class HadoopConfigInvalid(UsageError):
    """A ``HADOOP_CONF_DIR`` site file is unreadable, malformed, refused or lacks a key."""


class UnsupportedStorageURL(SparkLagError):
    """The checkpoint URL has a scheme no storage backend handles."""


class StorageError(SparkLagError):
    """The storage answered with an error (or not at all) for a path."""


class StorageAccessDenied(StorageError):
    """The storage refused access to a path (credentials, policy)."""


class TokenFileInvalid(StorageAccessDenied):
    """``HADOOP_TOKEN_FILE_LOCATION`` is damaged or holds no token for the NameNode."""


class DelegationTokenRejected(StorageAccessDenied):
    """The NameNode refused a delegation token (``InvalidToken``): expired or cancelled."""


class StorageNotFound(StorageError):
    """An object that was expected at a path is not there."""


class BucketNotFound(StorageNotFound):
    """The S3 bucket itself does not exist: unlike a missing key, ``exists()`` raises it."""


class StorageAlreadyExists(StorageError):
    """A write with ``overwrite=False`` found an object already at the path."""


class UnsupportedOperation(StorageError):
    """A storage backend cannot do an operation (walk, copy, rename, ...) on a path."""


class ConditionalWriteUnsupported(UnsupportedOperation):
    """The S3 server rejected ``If-None-Match``; the writer checked existence itself before."""


# -- checkpoints -------------------------------------------------------------------------------


class CheckpointNotFound(SparkLagError):
    """No Spark checkpoint at the location (no offsets/ and no commits/)."""


class CheckpointCorrupt(SparkLagError):
    """A checkpoint file is empty, truncated or not in Spark's format."""


class UnsupportedCheckpointVersion(CheckpointCorrupt):
    """A checkpoint file has a log version this reader does not know."""


# -- Kafka -------------------------------------------------------------------------------------


class KafkaUnavailable(SparkLagError):
    """The Kafka cluster did not answer in time."""


class KafkaError(SparkLagError):
    """Kafka answered with an error (unknown topic, authorization, ...)."""


class KafkaConfigInvalid(KafkaError, UsageError):
    """librdkafka refused the config before any request (a bad key or value, a SASL mechanism
    its build lacks)."""


class ConsumerGroupActive(SparkLagError):
    """The consumer group has active members; its offsets must not be changed under them."""


# -- snapshots ---------------------------------------------------------------------------------


class SnapshotError(SparkLagError):
    """A snapshot could not be taken, written or read."""


class NothingCommitted(SnapshotError):
    """The checkpoint has no committed batch, so there are no offsets to carry over."""


class SnapshotCorrupt(SnapshotError):
    """A snapshot document is not valid JSON, has an unknown format or a wrong checksum."""


class SnapshotVerificationFailed(SnapshotError):
    """A written snapshot, read back, differs from what was written."""


# -- archives ----------------------------------------------------------------------------------


class ArchiveError(SparkLagError):
    """An archived copy does not match the original, or the original changed meanwhile."""


# -- migrations --------------------------------------------------------------------------------


class MigrationRefused(SparkLagError):
    """The migration would lose data or disturb a running job; nothing was changed."""


class JobStillRunning(MigrationRefused):
    """The query committed or planned a batch recently: it may still be running."""


class DataLossRefused(MigrationRefused):
    """Committed offsets are below the log start: records were deleted before being read."""


class TopicGone(MigrationRefused):
    """A topic of the checkpoint no longer exists (or was deleted and re-created)."""


class SinkLogConflict(MigrationRefused):
    """A file sink's ``_spark_metadata`` would make the new query skip its first batches."""


class SnapshotMismatch(MigrationRefused):
    """The given snapshot is not of this checkpoint, or the job ran on after it was taken."""
