"""Many checkpoints at once: find them under a prefix (``discover_checkpoints``), and check
them again and again cheaply (``FleetChecker``): docs/fleet.md. Discovery never lists inside a
checkpoint: ``state/`` can hold tens of thousands of objects. Nothing heavy is imported at
module level.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.errors import StorageAccessDenied
from airflow_sparklag.location import Location
from airflow_sparklag.monitor import (
    MAX_READERS,
    OPTION_NAMES,
    CheckOptions,
    CheckResult,
    Progress,
    judge_states,
    parse_each,
    read_states,
)
from airflow_sparklag.session import Session
from airflow_sparklag.storage import Children

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState
    from airflow_sparklag.storage import Storage

log = logging.getLogger(__name__)


def discover_checkpoints(
    prefix: Location | str | Sequence[Location | str],
    *,
    session: Session | None = None,
    storage: Storage | None = None,
    max_depth: int = 4,
    max_workers: int = MAX_READERS,
) -> list[str]:
    """Checkpoint roots at or under ``prefix`` (one or several; sorted), at most ``max_depth``
    levels down, ``max_workers`` listings at once; names starting with ``.`` or ``_``
    (``_spark_metadata``, ``_temporary``) are skipped. The listings go through ``storage``,
    else ``session``'s backend for each prefix, else a local session's.

    >>> discover_checkpoints("s3a://bucket/checkpoints", session=session)   # doctest: +SKIP
    ['s3a://bucket/checkpoints/team-a/orders', 's3a://bucket/checkpoints/team-b/clicks']
    """
    prefixes = _prefixes(prefix)
    if storage is None:
        own = session or Session()
        level = [(own.storage(each), each) for each in prefixes]
    else:
        level = [(storage, each) for each in prefixes]
    return sorted(each.text for each in _walk(level, max_depth, max_workers))


def _walk(
    level: list[tuple[Storage, Location]], max_depth: int, max_workers: int
) -> Iterator[Location]:
    """The checkpoint roots at or under each (backend, prefix) of ``level`` as they are found
    (a level's in listing order, each once), so a fleet check reads each checkpoint while
    discovery lists on."""
    found: set[Location] = set()
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        for depth in range(max_depth + 1):
            if not level:
                break
            next_level: list[tuple[Storage, Location]] = []
            below = depth > 0
            listed = pool.map(lambda entry, below=below: _children(*entry, below=below), level)
            for (backend, directory), children in zip(level, listed, strict=True):
                if children.is_checkpoint:
                    if directory not in found:
                        found.add(directory)
                        yield directory
                elif depth < max_depth:
                    next_level.extend(
                        (backend, directory.child(name))
                        for name in sorted(children.directories)
                        if not name.startswith((".", "_"))
                    )
            level = next_level


def _prefixes(prefix: Location | str | Sequence[Location | str]) -> list[Location]:
    given = [prefix] if isinstance(prefix, (str, Location)) else list(prefix)
    return [Location.of(each, "prefix") for each in given]


def _children(storage: Storage, path: Location, *, below: bool) -> Children:
    """``storage.list_children``; a directory below the prefix that may not be listed (another
    team's, ``lost+found``) is skipped with a warning, not the end of the whole scan."""
    try:
        return storage.list_children(path.text)
    except StorageAccessDenied as exc:
        if not below:
            raise
        log.warning("skipped while looking for checkpoints: %s", exc)
        return Children(frozenset(), frozenset())


class FleetChecker:
    """Checks a fixed (or discovered) set of checkpoints repeatedly, through one
    :class:`~airflow_sparklag.session.Session` (its readers kept across polls: a poll reads
    the listing and one GET per new batch), with one Kafka snapshot per poll.

    >>> with Session(kafka_config={"bootstrap.servers": "broker:9092"}) as session:
    ...     fleet = FleetChecker(session=session, prefix="s3a://bucket/checkpoints")
    ...     for result in fleet.check():                                   # doctest: +SKIP
    ...         print(result.location, result.verdict.health.value)

    Without ``session`` the checker opens one of its own from the ``Session`` keyword
    arguments and closes it on :meth:`close`. ``options`` (a ``CheckOptions``) or its fields
    say how to judge. ``rediscover_seconds`` (with ``prefix``) lists the prefix again that long
    after the last discovery. ``query_ids=True`` also reads each checkpoint's ``metadata``.
    """

    def __init__(
        self,
        locations: Sequence[Location | str] = (),
        *,
        session: Session | None = None,
        prefix: Location | str | Sequence[Location | str] | None = None,
        options: CheckOptions | None = None,
        max_workers: int = MAX_READERS,
        max_depth: int = 4,
        rediscover_seconds: float | None = None,
        query_ids: bool = False,
        **options_and_session: Any,
    ) -> None:
        if not locations and not prefix:
            raise ValueError("FleetChecker needs checkpoint locations or a prefix to discover")
        self.options = params.take(OPTION_NAMES, CheckOptions.build, options_and_session, options)
        if session is not None and options_and_session:
            given = ", ".join(sorted(options_and_session))
            raise TypeError(f"give either session or {given}, not both")
        self._owns_session = session is None
        self.session = session or Session(**options_and_session)
        self.prefixes = _prefixes(prefix or ())
        self.max_workers = max_workers
        self.max_depth = max_depth
        self.rediscover_seconds = rediscover_seconds
        self.query_ids = query_ids
        # a bad one fails its own check, not the fleet's (read_states)
        parsed, refused = parse_each(locations, "locations")
        self._refused = list(refused.values())  # never read: their results come last
        self._given = list(dict.fromkeys(g for i, g in enumerate(parsed) if i not in refused))
        self._locations: list[Location] = list(self._given)
        self._discovered_at: float | None = None
        self.polls = 0

    # -- locations ------------------------------------------------------------------------------

    @property
    def locations(self) -> list[str]:
        """The checkpoints the next poll checks (discovering them first if needed)."""
        if self._discovery_due():
            self.discover()
        return [each.text for each in self._locations]

    def discover(self) -> list[str]:
        """List the prefixes again; readers of vanished checkpoints are dropped."""
        return self._discovered(self._found())

    def _discovered(self, found: Iterable[Location]) -> list[str]:
        self._locations = list(dict.fromkeys([*self._given, *sorted(found, key=str)]))
        self._discovered_at = time.monotonic()
        self.session.forget(self._locations)
        return [each.text for each in self._locations]

    def _discovery_due(self) -> bool:
        return bool(self.prefixes) and (
            self._discovered_at is None
            or (
                self.rediscover_seconds is not None
                and time.monotonic() - self._discovered_at >= self.rediscover_seconds
            )
        )

    def _found(self) -> Iterator[Location]:
        """The prefixes' checkpoints as discovery finds them."""
        level = [(self.session.storage(each), each) for each in self.prefixes]
        return _walk(level, self.max_depth, self.max_workers)

    def _discovering(self, found: list[Location]) -> Iterator[Location]:
        """The given locations, then each discovered checkpoint as it is found (kept in
        ``found``): a poll that discovers reads them while discovery lists on."""
        yield from self._given
        for location in self._found():
            found.append(location)
            yield location

    # -- polling --------------------------------------------------------------------------------

    @property
    def storage_requests(self) -> int:
        """Storage requests sent so far (discovery included), over every backend."""
        return self.session.storage_requests

    def read_states(
        self, progress: Progress | None = None
    ) -> tuple[dict[str, CheckpointState], dict[str, CheckResult]]:
        """Read every checkpoint (in parallel, lazily: ``monitor.read_states``), each as
        discovery finds it: states, and a failed result per unreadable one."""
        found: list[Location] = []
        discovering = self._discovery_due()
        states, failures = read_states(
            self.session,
            self._discovering(found) if discovering else self._locations,
            history=self.options.history_to_read,
            query_id=self.query_ids,
            max_workers=self.max_workers,
            progress=progress,
            lazy_history=True,
        )
        if discovering:
            self._discovered(found)
        return states, failures

    def check(
        self, *, now: float | None = None, progress: Progress | None = None
    ) -> list[CheckResult]:
        """One poll: read every checkpoint, one Kafka snapshot, a result per location in order
        (as :func:`~airflow_sparklag.monitor.check_many`). ``progress(done, total)`` is called
        as checkpoints are read."""
        states, failures = self.read_states(progress)
        judged = judge_states(self.session, states, self.options, now=now, query_id=self.query_ids)
        self.polls += 1
        found = [judged.get(loc.text) or failures[loc.text] for loc in self._locations]
        return found + self._refused

    def close(self) -> None:
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> FleetChecker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_fleet(
    locations: Iterable[Location | str] = (),
    *,
    prefix: Location | str | Sequence[Location | str] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> list[CheckResult]:
    """One check of many checkpoints (and/or those found under ``prefix``); see FleetChecker."""
    with FleetChecker(list(locations), prefix=prefix, **options) as fleet:
        return fleet.check(progress=progress)
