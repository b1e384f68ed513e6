"""Offset -> time interpolation for one partition from the checkpoint's own history
(docs/lag-and-health.md#lag-in-seconds): each `offsets/N` says the log end was its offset at
`batchTimestampMs` (without maxOffsetsPerTrigger Spark plans up to the log end). Never
extrapolated: a record older than the oldest point, or produced in too wide a gap, is UNKNOWN.
"""

from __future__ import annotations

import functools
import itertools
from bisect import bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import BatchOffsets

# An age is reported only when the record's production time is known to within the larger of
# these (else it is unknown): the estimate is then within 2 s or 10 % of the record's own age.
MAX_UNCERTAINTY_SECONDS = 2.0
MAX_UNCERTAINTY_RATIO = 0.1

# Why an age is unknown.
NO_POINTS = "no batch with a time in the history"
OLDER_THAN_HISTORY = "the record is older than the oldest batch read"
NOT_PRODUCED = "no record at this offset yet"
IN_A_GAP = "produced at an unknown moment of a {gap:.0f} s gap between two observations"

# The rising levels of a partition's log end: offsets, first and last time seen there (ms).
Stairs = tuple[list[int], list[float], list[float]]


def staircase(points: Sequence[tuple[int, float]]) -> Stairs:
    """The rising levels of ``(offset, time_ms)`` points given in any order; each level keeps
    the EARLIEST time its offset was seen and the LAST.

    >>> staircase([(100, 1_000), (100, 3_000), (200, 4_000), (150, 5_000)])
    ([100, 200], [1000, 4000], [3000, 4000])
    """
    # Sort by time; at equal times the higher offset first, so the lower one is dominated.
    # Points usually come in time order (batches, then the live point): no sort then.
    in_order = all(a[1] < b[1] for a, b in itertools.pairwise(points))
    ordered = points if in_order else sorted(points, key=lambda point: (point[1], -point[0]))
    offsets: list[int] = []
    first: list[float] = []
    last: list[float] = []
    for offset, time_ms in ordered:
        if not offsets or offset > offsets[-1]:
            offsets.append(offset)
            first.append(time_ms)
            last.append(time_ms)
        elif offset == offsets[-1]:
            last[-1] = time_ms
        # offset below the current top: the log end never shrinks, so this point says
        # nothing new (a rewound consumer position, not a younger log).
    return offsets, first, last


@functools.lru_cache(maxsize=1024)
def _in_a_gap(gap: float) -> str:
    """``IN_A_GAP`` formatted once: a job's lagging partitions usually share their last two
    observations (its newest batch and the Kafka snapshot)."""
    return IN_A_GAP.format(gap=gap)


class RecordAge(NamedTuple):
    """Age (s) of a record at some time: the estimate, the youngest and oldest it can be (the
    bracket; ``maximum`` None below the oldest point), and why ``seconds`` is None, when it is."""

    seconds: float | None
    minimum: float | None
    maximum: float | None
    unknown: str | None = None


def record_age(stairs: Stairs, offset: int, now_ms: float) -> RecordAge:
    """The age at ``now_ms`` of the record AT ``offset``: produced after the log end was last
    seen at or below it and by the first time above it, interpolated linearly between the two.

    >>> record_age(staircase([(0, 0), (10, 1_000), (20, 2_000)]), 15, 3_000)
    RecordAge(seconds=1.4, minimum=1.0, maximum=2.0, unknown=None)
    """
    offsets, first, last = stairs
    if not offsets:
        return RecordAge(None, None, None, NO_POINTS)
    i = bisect_right(offsets, offset)  # offsets[i - 1] <= offset < offsets[i]
    if i == 0:
        return RecordAge(None, max(0.0, (now_ms - first[0]) / 1000.0), None, OLDER_THAN_HISTORY)
    if i == len(offsets):
        return RecordAge(None, None, None, NOT_PRODUCED)
    low = offsets[i - 1]
    start = last[i - 1]
    end = max(first[i], start)  # an end before the start only after a rewind: clamp
    produced = start + (offset + 1 - low) * (end - start) / (offsets[i] - low)
    youngest = max(0.0, (now_ms - end) / 1000.0)
    oldest = max(0.0, (now_ms - start) / 1000.0)
    gap = (end - start) / 1000.0
    if gap > max(MAX_UNCERTAINTY_SECONDS, MAX_UNCERTAINTY_RATIO * youngest):
        return RecordAge(None, youngest, oldest, _in_a_gap(gap))
    return RecordAge(max(0.0, (now_ms - produced) / 1000.0), youngest, oldest)


def estimate_age(
    points: Sequence[tuple[int, float]],
    live: int | None,
    fetched_at_ms: float,
    offset: int,
    now_ms: float,
) -> tuple[float | None, str | None]:
    """``(seconds, unknown)``: the age at ``now_ms`` of the record at ``offset`` over
    ``points`` (from ``history_points``) plus the live point ``(live, fetched_at_ms)``.

    >>> estimate_age([(100, 1_000.0)], 200, 2_000.0, 149, 3_000.0)
    (1.5, None)
    """
    hist: Sequence[tuple[int, float]] = points
    if live is not None:
        now_point = (int(live), float(fetched_at_ms))
        # History above the live log end: a recreated or truncated topic, the live point alone.
        recreated = any(point_offset > live for point_offset, _ in points)
        hist = [now_point] if recreated else [*points, now_point]
    age = record_age(staircase(hist), offset, now_ms)
    return age.seconds, age.unknown


def history_points(
    history: Sequence[BatchOffsets],
) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """(topic, partition) -> [(offset, batch time ms), ...] over the timed batches, in order."""
    points: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for batch in history:
        if batch.batch_timestamp_ms is None:
            continue  # continuous mode: no time for this batch
        time_ms = float(batch.batch_timestamp_ms)
        for source in batch.sources:
            if source.kafka is None:
                continue
            for topic, parts in source.kafka.items():
                for partition, offset in parts.items():
                    points.setdefault((topic, int(partition)), []).append((int(offset), time_ms))
    return points
