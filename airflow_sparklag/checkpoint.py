"""Read a Spark Structured Streaming checkpoint: what was committed, what is in flight.

The files' parsers are in ``checkpoint_files``. :class:`CheckpointReader` lists only
``offsets/`` and ``commits/`` (never ``state/``, which can hold 100k objects) and caches the
immutable offsets files between reads.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor

from airflow_sparklag.checkpoint_files import (
    MAX_LOG_FILE_SIZE,
    MIN_COMMIT_SIZE,
    BatchOffsets,
    CheckpointState,
    parse_batch_id,
    parse_commit,
    parse_metadata,
    parse_offsets,
)
from airflow_sparklag.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    SparkLagError,
    StorageNotFound,
)
from airflow_sparklag.location import Location, join
from airflow_sparklag.storage import ObjectInfo, Storage

# A reader that polls lists the checkpoint at least this often (seconds), whatever its point
# reads say: the bound on noticing a change no point read shows (a checkpoint deleted,
# recreated or reset to fewer batches, a purge that finished after the last listing).
FULL_LISTING_SECONDS = 600.0


# -- reader ----------------------------------------------------------------------------------


# commits/ and offsets/ batches by id, and ``metadata`` as listed (None: not listed, see
# CheckpointReader._list_logs)
_Listing = tuple[dict[int, ObjectInfo], dict[int, ObjectInfo], list[ObjectInfo] | None]


class _Vanished(Exception):
    """A listed file was gone when read (purge, or the checkpoint is being replaced)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class CheckpointReader:
    """Reads a checkpoint's state, caching the offsets files it has already parsed.

    Example::

        reader = CheckpointReader(open_storage("s3a://bucket/ck/orders"), "s3a://bucket/ck/orders")
        state = reader.read(history=10)   # first call: LIST offsets/, LIST commits/, GET ...
        state = reader.read(history=10)   # later calls GET only the new offsets files
        state = reader.read(history=10)   # nothing changed: one HEAD of the next batch's file

    The committed batch C is the newest ``commits/N``, in flight is ``offsets/L`` for the
    newest L > C: the rules and the request budget are in docs/architecture.md ("Checkpoint
    state"), the point reads of a reader that polls in docs/fleet.md ("Polling at the price
    of a point read").
    """

    def __init__(
        self,
        storage: Storage,
        location: Location | str,
        *,
        query_id: bool = True,
        full_listing_seconds: float = FULL_LISTING_SECONDS,
    ) -> None:
        self.storage = storage
        self.location = Location.of(location).text  # text: a script's own reader
        self.wants_query_id = query_id
        self._offsets_cache: dict[int, tuple[ObjectInfo, BatchOffsets]] = {}
        self._metadata_read = False
        self._listed_keys: int | None = None  # keys of the last single listing (S3)
        self._query_id: str | None = None
        self._commit_checked: tuple[str, int, float] | None = None  # a small commits/C, read
        self.full_listing_seconds = full_listing_seconds  # 0: list on every read
        self._listing: _Listing | None = None  # the last listing of a read that succeeded
        self._listed_at = 0.0  # when it was taken (time.time())
        self._settled = False  # it agreed with the listing before it
        # When the last check's verdict may change with nothing written (health.changes_at):
        # the reads after one of these list again (the ``confirm_at`` of every read).
        self.confirm_at: tuple[float, ...] = ()

    def batches_read(self) -> list[BatchOffsets]:
        """The offsets files this reader holds (those of its newest read), oldest first."""
        return [batch for _, (_, batch) in sorted(self._offsets_cache.items())]

    def read(
        self,
        history: int = 10,
        *,
        lazy_history: bool = False,
        now: float | None = None,
        confirm_at: Iterable[float] = (),
    ) -> CheckpointState:
        """A fresh snapshot; ``history`` bounds how many committed batches are returned.

        ``lazy_history=True`` reads no older batch (unless the listing hints at a rewind) and
        leaves them in ``unread_history`` for :meth:`read_history`. ``confirm_at``: times (on
        the clock of ``now``) at which the caller's verdict may change with nothing written;
        the first read after one of them lists again rather than trusting a point read.
        """
        now = time.time() if now is None else now
        moments = (*confirm_at, *self.confirm_at)
        # A file we just listed vanished: the listing is stale (checkpoint deleted/replaced while
        # we read it). One fresh listing settles it; a second miss means it really is broken.
        for listing in (self._listing if self._quiet(now, moments) else None, None):
            try:
                return self._read_once(history, lazy_history, listing, now)
            except _Vanished as vanished:
                gone = vanished.path
        raise CheckpointCorrupt(
            f"{gone}: listed but gone when read, twice; the checkpoint at "
            f"{self.location} is being deleted or rewritten"
        )

    def _quiet(self, now: float, confirm_at: Iterable[float]) -> bool:
        """May this read reuse the last listing? Only when it settled and is recent, no
        ``confirm_at`` time passed since, and the file Spark writes next is still absent
        (one point request)."""
        listing = self._listing
        if listing is None or not self._settled:
            return False
        if not 0 <= now - self._listed_at < self.full_listing_seconds:
            return False
        commits, offsets, _ = listing
        following = _next_file(commits, offsets)
        if following is None:
            return False
        if any(self._listed_at < moment <= now for moment in confirm_at):
            return False
        return not self.storage.is_file(join(self.location, *following))

    def _list_again(self) -> tuple[_Listing, bool]:
        """A new listing, and whether it agrees with the last one. A listing of another
        checkpoint (:func:`_replaced`) makes the query id be read again."""
        previous, self._listing = self._listing, None  # kept again once the read succeeds
        # commits/ first: offsets/N is written before commits/N, so any commit we see has its
        # offsets file in the listing that follows (no false "commits ahead of offsets").
        listing = self._list_logs()
        if previous is not None and _replaced(previous, listing):
            self._metadata_read = False
        return listing, listing == previous

    def _read_once(
        self, history: int, lazy_history: bool, listing: _Listing | None, now: float
    ) -> CheckpointState:
        fresh, settled = listing is None, self._settled
        if listing is None:
            listing, settled = self._list_again()
        commits, offsets, metadata = listing
        metadata_listed = None if metadata is None else bool(metadata)
        query_id = self._read_query_id(metadata_listed) if self.wants_query_id else None
        commit_ids = tuple(sorted(commits))
        offsets_ids = tuple(sorted(offsets))

        if not commits and not offsets and not metadata_listed and not self._exists():
            raise CheckpointNotFound(
                f"{self.location}: no Spark checkpoint here (no offsets/, commits/ or metadata); "
                "check the path and that the query has started with this checkpointLocation"
            )

        committed_id = commit_ids[-1] if commit_ids else None
        committed: BatchOffsets | None = None
        if committed_id is not None:
            if committed_id not in offsets:
                newest = f"newest is offsets/{offsets_ids[-1]}" if offsets_ids else "it is empty"
                raise CheckpointCorrupt(
                    f"{join(self.location, 'offsets', str(committed_id))}: missing although "
                    f"commits/{committed_id} exists ({newest}); offsets/ was deleted or purged by "
                    "hand, so the committed offsets are unknown: restore offsets/ or restart the "
                    "query on a new checkpoint"
                )
            committed = self._offsets(committed_id, offsets[committed_id])

        latest_id = offsets_ids[-1] if offsets_ids else None
        in_flight: BatchOffsets | None = None
        if latest_id is not None and (committed_id is None or latest_id > committed_id):
            in_flight = self._offsets(latest_id, offsets[latest_id])
        if committed_id is not None:
            watermarks = {b.watermark_ms for b in (committed, in_flight) if b is not None}
            self._check_commit(commits[committed_id], watermarks)

        window = _window(commit_ids, offsets, committed_id, history)
        unread: tuple[ObjectInfo, ...] = ()
        if lazy_history and self._may_defer(window, offsets, committed_id):
            past: tuple[BatchOffsets, ...] = ()
            unread = tuple(offsets[batch_id] for batch_id in window)
        else:
            past = self._read_batches(window, offsets)
        current = committed or in_flight
        preceding = self._preceding(committed, in_flight, offsets, commits)
        # Keep only what the next read can ask for again: a reader that polls for days (sensors,
        # FleetChecker) must not grow with every batch the job ever ran. The whole window is
        # kept, read or not: a lazy read must not drop what read_history would ask for again.
        keep = set(window)
        keep.update(b.batch_id for b in (committed, in_flight) if b is not None)
        for stale in [i for i in self._offsets_cache if i not in keep]:
            del self._offsets_cache[stale]
        if fresh:
            self._listing, self._listed_at, self._settled = listing, now, settled
        return CheckpointState(
            location=self.location,
            query_id=query_id,
            committed_batch_id=committed_id,
            committed=committed,
            commit_modified=commits[committed_id].modified if committed_id is not None else None,
            in_flight=in_flight,
            history=past + ((committed,) if committed is not None and history > 0 else ()),
            offsets_ids=offsets_ids,
            commit_ids=commit_ids,
            continuous=current is not None and _is_continuous(current),
            unread_history=unread,
            written_before=self._written_before(in_flight or committed, offsets, metadata),
            preceding=preceding[0],
            preceding_commit_modified=preceding[1],
            listed_times=_listed_times(keep, offsets, commits),
        )

    def _written_before(
        self,
        newest: BatchOffsets | None,
        offsets: Mapping[int, ObjectInfo],
        metadata: list[ObjectInfo] | None,
    ) -> float | None:
        """``CheckpointState.written_before`` for ``newest``: only when it has real-time's
        span (one listing of the checkpoint's root more, without S3's combined listing, when
        it is the first batch)."""
        if newest is None or _span(newest) is None:
            return None
        earlier = [i for i in offsets if i < newest.batch_id]
        if earlier:
            return offsets[max(earlier)].modified
        if metadata is None:
            try:
                metadata = [e for e in self.storage.list_dir(self.location) if e.name == "metadata"]
            except SparkLagError:
                return None
        return metadata[0].modified if metadata else None

    def _preceding(
        self,
        committed: BatchOffsets | None,
        in_flight: BatchOffsets | None,
        offsets: Mapping[int, ObjectInfo],
        commits: Mapping[int, ObjectInfo],
    ) -> tuple[BatchOffsets | None, float | None]:
        """``CheckpointState.preceding`` and its commit time: only when offsets/C is the newest
        and C has real-time's shape with a span under ``REAL_TIME_SURE_INTERVAL`` (one GET
        more, unless the history read it)."""
        if committed is None or in_flight is not None:
            return None, None
        commit = commits.get(committed.batch_id)
        span = _shape(committed, None if commit is None else commit.modified)
        earlier = [i for i in offsets if i < committed.batch_id]
        if span is None or span >= REAL_TIME_SURE_INTERVAL or not earlier:
            return None, None
        batch_id = max(earlier)
        try:
            batch = self._offsets(batch_id, offsets[batch_id])
        except _Vanished:
            return None, None  # purged since the listing: not corroborated
        before = commits.get(batch_id)
        return batch, None if before is None else before.modified

    def read_history(
        self, state: CheckpointState, newest: int | None = None, *, pool: Executor | None = None
    ) -> CheckpointState:
        """``state`` with the older batches a lazy :meth:`read` left unread, as an eager read of
        the same listing returns them; ``newest=N`` reads only the N newest of them. One GET
        per batch not cached yet, all at once in ``pool`` if given."""
        if not state.unread_history:
            return state
        listed = _batches(state.unread_history)
        ids = list(listed)
        take = ids if newest is None else ids[len(ids) - max(0, newest) :]
        left = tuple(listed[i] for i in ids[: len(ids) - len(take)])
        past = self._read_batches(take, listed, pool)
        return dataclasses.replace(state, history=past + state.history, unread_history=left)

    def _read_batches(
        self, wanted: list[int], offsets: Mapping[int, ObjectInfo], pool: Executor | None = None
    ) -> tuple[BatchOffsets, ...]:
        """The offsets files of ``wanted`` (older committed batches), oldest first; read in
        ``pool`` when given."""

        def read(batch_id: int) -> BatchOffsets | None:
            try:
                return self._offsets(batch_id, offsets[batch_id])
            except _Vanished:
                return None  # purged by Spark (minBatchesToRetain) since the listing: expected

        found = (
            pool.map(read, wanted) if pool is not None and len(wanted) > 1 else map(read, wanted)
        )
        return tuple(batch for batch in found if batch is not None)

    def _list_logs(self) -> _Listing:
        """commits/ and offsets/ batches, and ``metadata`` as listed (None: not asked); in one
        request on a backend with ``list_checkpoint`` (S3), where commits/ sorts first too."""
        list_checkpoint = getattr(self.storage, "list_checkpoint", None)
        if callable(list_checkpoint):
            # Size the first page from the last listing (room for new batches), so a page does
            # not run deep into state/: every listed key costs client CPU.
            keys = self._listed_keys
            sized = {} if keys is None else {"first_page": min(1000, 2 * keys + 64)}
            listing = list_checkpoint(self.location, **sized)
            self._listed_keys = sum(len(entries) for entries in listing.values())
            return (
                _batches(listing["commits"]),
                _batches(listing["offsets"]),
                list(listing.get("metadata") or ()),
            )
        commits = _batches(self.storage.list_dir(join(self.location, "commits")))
        offsets = _batches(self.storage.list_dir(join(self.location, "offsets")))
        return commits, offsets, None

    def _may_defer(
        self, window: list[int], offsets: Mapping[int, ObjectInfo], committed_id: int | None
    ) -> bool:
        """May a lazy read leave the window's older batches unread? Not when one is listed
        larger than offsets/C, a rewind hint (offsets only grow, and with them their digits:
        only the older batches show it), nor when this reader holds them all (no cost)."""
        if committed_id is None:
            return False
        size = offsets[committed_id].size
        if any(offsets[i].size > size for i in window):
            return False
        return not all(self._cached(i, offsets[i]) for i in window)

    def _cached(self, batch_id: int, info: ObjectInfo) -> bool:
        known = self._offsets_cache.get(batch_id)
        # Offsets files are immutable; a different size/time means the checkpoint was replaced.
        if known is None:
            return False
        return known[0].size == info.size and known[0].modified == info.modified

    def _offsets(self, batch_id: int, info: ObjectInfo) -> BatchOffsets:
        if self._cached(batch_id, info):
            return self._offsets_cache[batch_id][1]
        path = join(self.location, "offsets", info.name)
        if info.size > MAX_LOG_FILE_SIZE:
            raise CheckpointCorrupt(
                f"{path}: {info.size:,} bytes, far larger than any offsets file Spark writes "
                f"(a query over 100,000 partitions writes ~2 MB); not read"
            )
        data = self._read_listed(path)
        batch = parse_offsets(data, path, batch_id=batch_id, modified=info.modified)
        self._offsets_cache[batch_id] = (info, batch)
        return batch

    def _check_commit(self, info: ObjectInfo, watermarks: set[int | None]) -> None:
        """Is ``commits/C`` a commit log entry? Checked once per new committed batch: not read
        when the listing's content hash (S3 ETag, GCS md5Hash) is the MD5 of a text Spark
        writes (``v1`` + ``{"nextBatchWatermarkMs":W}``, W 0 or a listed batch's watermark)."""
        key = (info.name, info.size, info.modified)
        if key == self._commit_checked:
            return
        spark_wrote = {_v1_commit_md5(watermark or 0) for watermark in (0, *watermarks)}
        if info.size < MIN_COMMIT_SIZE or info.content_md5 not in spark_wrote:
            path = join(self.location, "commits", info.name)
            parse_commit(self._read_listed(path), path)
        self._commit_checked = key

    def _read_listed(self, path: str) -> bytes:
        """A listed file's content; :class:`_Vanished` when it is gone."""
        try:
            return self.storage.read(path)
        except StorageNotFound:
            raise _Vanished(path) from None

    def _read_query_id(self, listed: bool | None = None) -> str | None:
        if listed is False and self._query_id is None:
            # The listing shows no metadata: no GET (asked again once it appears).
            return None
        if not self._metadata_read:
            path = join(self.location, "metadata")
            try:
                self._query_id = parse_metadata(self.storage.read(path), path)
            except StorageNotFound:
                self._query_id = None  # Spark < 4.2 runs without it (ckm4.3.0 sample lacks it too)
            self._metadata_read = True
        return self._query_id

    def _exists(self) -> bool:
        """Is there a checkpoint with no batch yet? Only asked when both listings are empty."""
        if self._query_id is not None:
            return True
        # Local and HDFS keep empty directories; object stores have none, but metadata is
        # written before the first batch there.
        names = ["offsets", "commits"]
        if not self.wants_query_id:
            names.append("metadata")  # not read by this reader, but proof of a checkpoint
        return any(self.storage.exists(join(self.location, name)) for name in names)


def _next_file(
    commits: Mapping[int, ObjectInfo], offsets: Mapping[int, ObjectInfo]
) -> tuple[str, str] | None:
    """The file Spark writes next in a regular log: ``offsets/C+1`` when no batch is in flight,
    ``commits/L`` while L = C+1 is. None when unsure: fewer than two commits, a gap in the ids
    (async progress tracking skips batches and may write offsets several batches ahead), or
    more than one batch in flight."""
    if len(commits) < 2 or not offsets:
        return None
    committed, latest = max(commits), max(offsets)
    if any(max(ids) - min(ids) + 1 != len(ids) for ids in (commits, offsets)):
        return None
    if latest == committed:
        return "offsets", str(committed + 1)
    return ("commits", str(latest)) if latest == committed + 1 else None


def _replaced(before: _Listing, after: _Listing) -> bool:
    """Is ``after`` the listing of another checkpoint than ``before`` (deleted and recreated
    under the same path)? Spark never rewrites a batch file nor lowers its newest commit."""
    (commits, offsets, metadata), (new_commits, new_offsets, new_metadata) = before, after
    if (commits or offsets) and not (new_commits or new_offsets):
        return True  # gone (or emptied): only a fresh look at metadata tells which
    if commits and new_commits and max(new_commits) < max(commits):
        return True
    if metadata and new_metadata and metadata != new_metadata:
        return True
    return any(new_offsets[i] != info for i, info in offsets.items() if i in new_offsets)


def _listed_times(
    batch_ids: Iterable[int], offsets: Mapping[int, ObjectInfo], commits: Mapping[int, ObjectInfo]
) -> tuple[tuple[int, float, float | None], ...]:
    """``CheckpointState.listed_times`` of ``batch_ids``, from the listing alone."""
    return tuple(
        (i, offsets[i].modified, commits[i].modified if i in commits else None)
        for i in sorted(batch_ids)
        if i in offsets
    )


def _window(
    commit_ids: tuple[int, ...],
    offsets: Mapping[int, ObjectInfo],
    committed_id: int | None,
    history: int,
) -> list[int]:
    """The older committed batches (not C itself) a ``history`` of that many asks for, oldest
    first: those whose offsets file is listed."""
    if committed_id is None or history <= 1:
        return []
    older = [bid for bid in commit_ids if bid < committed_id and bid in offsets]
    return older[-(history - 1) :]


@functools.lru_cache(maxsize=256)
def _v1_commit_md5(watermark_ms: int) -> str:
    """MD5 of the v1 commit text Spark writes for this next-batch watermark."""
    text = f'v1\n{{"nextBatchWatermarkMs":{watermark_ms}}}'
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _batches(entries: Iterable[ObjectInfo]) -> dict[int, ObjectInfo]:
    """Batch id -> entry, for the entries whose name :func:`parse_batch_id` accepts."""
    return {
        batch_id: info for info in entries if (batch_id := parse_batch_id(info.name)) is not None
    }


def _is_continuous(batch: BatchOffsets) -> bool:
    # Continuous mode writes an empty metadata line; micro-batch always writes the JSON.
    return batch.batch_timestamp_ms is None and batch.watermark_ms is None and not batch.conf


# Real-time mode (Spark >= 4.1) writes offsets/N at the END of interval N, just before
# commits/N, while batchTimestampMs is the interval's start; a micro-batch writes offsets/N when
# it plans batch N. The bounds below were measured on pyspark 4.2 (docs/lag-and-health.md, "The
# real-time trigger").
# Seconds from batchTimestampMs to offsets/C, at least: over the longest micro-batch plan seen.
REAL_TIME_MIN_INTERVAL = 1.0
# From this span on the newest checkpoint alone decides (no plan comes near it, and it leaves
# room for S3's 1 s times and some clock skew); a shorter one needs the batch before it to have
# the shape too: two plans in a row as long, each with a run under half of it.
REAL_TIME_SURE_INTERVAL = 4.0
# offsets/C to commits/C, at most this share of that span: 0.02-0.27 s on a quiet machine, 1.5 s
# of a 5.3 s span seen at load 11 on 2 cores, 0.44 s of a 2.1 s one at load 14.
REAL_TIME_MAX_WRITE_SHARE = 0.5
# An interval begins when the previous checkpoint is written (0.02-0.8 s later in real queries):
# what Spark wrote before it is at most this long after its batch time (S3 has 1 s times and
# the store's clock), and at most half the span (a copy written at once has every file within
# moments of offsets/C, a span after the batch time).
REAL_TIME_START_SLACK = 2.0


def real_time_interval(state: CheckpointState) -> float | None:
    """The newest checkpoint's interval (seconds from its ``batchTimestampMs`` to the time
    ``offsets/C`` was written) when the files have real-time mode's shape, else None. The
    checkpoint records no trigger, so the shape decides (docs/lag-and-health.md, "The real-time
    trigger"); a copied checkpoint, every file written at copy time, fails it.
    """
    newest = state.in_flight or state.committed
    span = _span(newest)
    if newest is None or span is None:
        return None
    assert newest.batch_timestamp_ms is not None  # _span has it
    slack = min(REAL_TIME_START_SLACK, span / 2)
    if state.written_before is None or state.written_before > (
        newest.batch_timestamp_ms / 1000.0 + slack
    ):
        return None
    if state.committed is None:  # real-time's first checkpoint, caught between its writes
        return span if span >= REAL_TIME_SURE_INTERVAL else None
    interval = _shape(state.committed, state.commit_modified)
    if interval is None or state.in_flight is not None or interval >= REAL_TIME_SURE_INTERVAL:
        return interval
    corroborated = _shape(state.preceding, state.preceding_commit_modified) is not None
    return interval if corroborated else None


def _shape(batch: BatchOffsets | None, commit_modified: float | None) -> float | None:
    """A committed batch's span when it has real-time's shape: offsets written at least
    ``REAL_TIME_MIN_INTERVAL`` after its batch time, its commit within
    ``REAL_TIME_MAX_WRITE_SHARE`` of that span after them."""
    span = _span(batch)
    if span is None or batch is None or batch.modified is None or commit_modified is None:
        return None
    wrote = commit_modified - batch.modified
    return span if 0 <= wrote <= REAL_TIME_MAX_WRITE_SHARE * span else None


def _span(batch: BatchOffsets | None) -> float | None:
    """Seconds from a batch's time to its offsets file's, when at least
    ``REAL_TIME_MIN_INTERVAL`` (real-time's); else None."""
    if batch is None or batch.batch_timestamp_ms is None or batch.modified is None:
        return None
    span = batch.modified - batch.batch_timestamp_ms / 1000.0
    return span if span >= REAL_TIME_MIN_INTERVAL else None
