"""Offset -> time interpolation for one partition, built from the checkpoint's own history.

Each committed `offsets/N` says: at `batchTimestampMs` the partition's log end was at least the
stored offset (Spark planned up to there, so those records existed). The live Kafka snapshot adds
one exact point: (log end, fetched_at). Between two points the time at which an offset became the
log end is interpolated linearly. Unlike kafka-lag-exporter's table we never extrapolate: an
offset older than the oldest point has an UNKNOWN time (None), not an "astronomical" one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import BatchOffsets


@dataclass(frozen=True)
class _Level:
    """One distinct offset of the table and the first/last time it was seen as the log end."""

    offset: int
    first_ms: float
    last_ms: float


class OffsetTimeTable:
    """When did a partition's log end reach a given offset?

    Points are (offset, time_ms) pairs in any order. They are normalised into a staircase that
    only rises: a point whose offset is not above an earlier point's adds nothing (a rewind in the
    input, or a repeated offset) except that a repeated offset extends how long the log end stayed
    there. `lookup(offset)` then answers:

    - exactly a known offset: the EARLIEST time it was seen (the log end reached it by then);
    - between two known offsets: linear interpolation from the LAST time the lower offset was seen
      to the first time the higher one was seen (the log end left the lower level in between);
    - below the oldest point or above the newest: None (unknown, no extrapolation).

    >>> table = OffsetTimeTable([(100, 1_000), (200, 2_000)])
    >>> table.lookup(150)
    1500.0
    >>> table.lookup(50) is None
    True
    """

    def __init__(self, points: Iterable[tuple[int, float]] = ()) -> None:
        self._points: list[tuple[int, float]] = []
        self._levels: list[_Level] | None = None
        for offset, time_ms in points:
            self.add(offset, time_ms)

    def add(self, offset: int, time_ms: float) -> None:
        """Record that the log end was at least `offset` at `time_ms`."""
        self._points.append((int(offset), float(time_ms)))
        self._levels = None

    def __len__(self) -> int:
        return len(self.levels)

    @property
    def levels(self) -> list[_Level]:
        if self._levels is None:
            self._levels = self._build(self._points)
        return self._levels

    @staticmethod
    def _build(points: Sequence[tuple[int, float]]) -> list[_Level]:
        # Sort by time; at equal times the higher offset first, so the lower one is dominated.
        ordered = sorted(points, key=lambda pt: (pt[1], -pt[0]))
        levels: list[_Level] = []
        for offset, time_ms in ordered:
            if not levels or offset > levels[-1].offset:
                levels.append(_Level(offset, time_ms, time_ms))
            elif offset == levels[-1].offset:
                top = levels[-1]
                levels[-1] = _Level(top.offset, top.first_ms, time_ms)
            # offset below the current top: the log end never shrinks, so this point says
            # nothing new (a rewound consumer position, not a younger log).
        return levels

    @property
    def oldest_offset(self) -> int | None:
        return self.levels[0].offset if self.levels else None

    @property
    def newest_offset(self) -> int | None:
        return self.levels[-1].offset if self.levels else None

    def lookup(self, offset: int) -> float | None:
        """Time (ms) at which `offset` became the log end, or None when the table cannot tell."""
        levels = self.levels
        if not levels:
            return None
        offsets = [lv.offset for lv in levels]
        i = bisect_left(offsets, offset)
        if i == len(levels):
            return None  # beyond the newest point: not reached yet as far as we know
        hit = levels[i]
        if hit.offset == offset:
            return hit.first_ms
        if i == 0:
            return None  # older than the oldest point: no extrapolation
        low = levels[i - 1]
        span = hit.offset - low.offset
        # The later end can precede low.last_ms only if the input had a rewind; clamp.
        start = low.last_ms
        end = max(hit.first_ms, start)
        return start + (offset - low.offset) * (end - start) / span

    def lag_seconds(self, offset: int, now_ms: float) -> float | None:
        """Seconds since `offset` was the log end (>= 0), or None when unknown."""
        reached = self.lookup(offset)
        if reached is None:
            return None
        return max(0.0, (now_ms - reached) / 1000.0)


def tables_from_history(
    history: Sequence[BatchOffsets],
    log_ends: Mapping[str, Mapping[int, int]],
    fetched_at_ms: float,
) -> dict[str, dict[int, OffsetTimeTable]]:
    """One table per (topic, partition) from retained offsets files plus the live log ends.

    `log_ends` is topic -> partition -> current log end (the reference offset: high watermark or
    last stable offset). A partition whose history holds an offset above today's log end belongs to
    a recreated or truncated topic: its history is dropped and only the live point is kept.

    >>> tables = tables_from_history([], {"t": {0: 10}}, 5_000.0)
    >>> tables["t"][0].lookup(10)
    5000.0
    """
    points = history_points(history)
    keys = set(points) | {(t, p) for t, parts in log_ends.items() for p in parts}
    tables: dict[str, dict[int, OffsetTimeTable]] = {}
    for topic, partition in keys:
        live = log_ends.get(topic, {}).get(partition)
        table = table_for(points.get((topic, partition), ()), live, fetched_at_ms)
        tables.setdefault(topic, {})[partition] = table
    return tables


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
                    key = (topic, int(partition))
                    found = points.get(key)
                    if found is None:
                        points[key] = [(int(offset), time_ms)]
                    else:
                        found.append((int(offset), time_ms))
    return points


def table_for(
    points: Sequence[tuple[int, float]], live: int | None, fetched_at_ms: float
) -> OffsetTimeTable:
    """The table of one partition: its history points plus the live (log end, fetch time).

    History above the live log end (recreated or truncated topic) is dropped.
    """
    hist = list(points)
    if live is not None:
        if any(off > live for off, _ in hist):
            hist = []
        hist.append((live, fetched_at_ms))
    return OffsetTimeTable(hist)
