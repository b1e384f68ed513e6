"""The time of the record at an offset: one short-lived consumer assigned to every partition
asked, reading one record of each, within the client's timeout. ``confluent_kafka`` is
imported inside the function only.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from airflow_sparklag.kafka_errors import AUTH_CODES, MISSING_TOPIC_CODES, KafkaErrors

log = logging.getLogger("airflow_sparklag.kafka")  # the Kafka side's one logger

# What the consumer changes in the client's config: it reads, one record per partition.
_CONSUMER_SETTINGS = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",  # out of range -> an error event, not a jump
    # Uncommitted records have a time too, and read_committed would block on an open
    # transaction until the deadline.
    "isolation.level": "read_uncommitted",
    # We read one record per partition: keep the fetches small.
    "max.partition.fetch.bytes": 65536,
    "fetch.max.bytes": 1048576,
}


def read_record_timestamps(
    config: Mapping[str, Any], errors: KafkaErrors, offsets: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int | None]:
    """:meth:`~airflow_sparklag.kafka.KafkaOffsetsClient.record_timestamps` with a consumer of
    the client's ``config``; ``errors`` is the client's (its timeout, its refusals)."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

    result: dict[tuple[str, int], int | None] = dict.fromkeys(offsets)
    pending = {key for key, off in offsets.items() if off >= 0}
    if not pending:
        return result
    conf = {k: v for k, v in config.items() if k != "allow.auto.create.topics"}
    # assign() never joins the group; the id only satisfies the client.
    conf["group.id"] = f"airflow-sparklag-peek-{uuid.uuid4().hex[:12]}"
    conf.update(_CONSUMER_SETTINGS)
    try:
        consumer = Consumer(conf)
    except Exception as exc:  # the same refusal as the admin client's, said the same way
        raise errors.unbuildable(exc) from exc
    deadline = time.monotonic() + errors.timeout
    try:
        consumer.assign([TopicPartition(t, p, offsets[(t, p)]) for t, p in sorted(pending)])
        while pending:
            remaining = deadline - time.monotonic()
            refused = errors.refused_recently()  # consume() serves the error callback
            if refused is not None:
                raise refused
            if remaining <= 0:
                break
            # consume() returns at num_messages or at its timeout: a short timeout, or a
            # partition's first fetch (fewer records than asked) costs a whole second.
            for msg in consumer.consume(num_messages=500, timeout=min(remaining, 0.05)):
                key = (msg.topic(), msg.partition())
                if key not in pending:
                    continue
                err = msg.error()
                if err is not None:
                    code = str(err.name())
                    if code in ("_PARTITION_EOF", "_AUTO_OFFSET_RESET", "OFFSET_OUT_OF_RANGE"):
                        pending.discard(key)  # past the end or gone: no record to time
                    elif code in AUTH_CODES or code in MISSING_TOPIC_CODES:
                        raise errors.translate(Exception(err), "a fetch", key[0])
                    continue
                offset = msg.offset()
                if offset is None or offset < offsets[key]:
                    continue
                ts_type, ts = msg.timestamp()
                result[key] = None if ts_type == TIMESTAMP_NOT_AVAILABLE else int(ts)
                pending.discard(key)
        if pending:
            log.info(
                "No record read within %.1f s for %d partition(s) from %s; time unknown",
                errors.timeout,
                len(pending),
                errors.servers,
            )
    finally:
        consumer.close()
    return result
