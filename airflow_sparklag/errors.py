"""Typed errors. Every message names the path, topic or partition and says what to do."""

from __future__ import annotations


class SparkLagError(Exception):
    """Base class of every error this package raises on purpose."""


class UnsupportedStorageURL(SparkLagError):
    """The checkpoint URL has a scheme no storage backend handles."""


class StorageError(SparkLagError):
    """The storage answered with an error (or not at all) for a path."""


class StorageAccessDenied(StorageError):
    """The storage refused access to a path (credentials, policy)."""


class StorageNotFound(StorageError):
    """An object that was expected at a path is not there."""


class StorageAlreadyExists(StorageError):
    """A write with ``overwrite=False`` found an object already at the path."""


class CheckpointNotFound(SparkLagError):
    """No Spark checkpoint at the location (no offsets/ and no commits/)."""


class CheckpointCorrupt(SparkLagError):
    """A checkpoint file is empty, truncated or not in Spark's format."""


class UnsupportedCheckpointVersion(CheckpointCorrupt):
    """A checkpoint file has a log version this reader does not know."""


class KafkaUnavailable(SparkLagError):
    """The Kafka cluster did not answer in time."""


class KafkaError(SparkLagError):
    """Kafka answered with an error (unknown topic, authorization, ...)."""
