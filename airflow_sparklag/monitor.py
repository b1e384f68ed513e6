"""Checks: from a checkpoint location to a lag report and a health verdict, through a session.

    session.read -> the plan's tiers (``judge``) -> compute_lag -> evaluate, once per job

Nothing heavy is imported at module level: DAG files may import this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.check_options import OPTION_NAMES, CheckOptions
from airflow_sparklag.errors import SparkLagError, UnsupportedStorageURL
from airflow_sparklag.judge import (
    MAX_READERS,
    CheckResult,
    failed_result,
    judge_one,
    judge_states,
)
from airflow_sparklag.location import Location
from airflow_sparklag.redact import redact_url
from airflow_sparklag.session import Session

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState

Progress = Callable[[int, int], None]  # (checkpoints read so far, total)


def read_states(
    session: Session,
    locations: Iterable[Location | str],
    *,
    history: int,
    query_id: bool = True,
    max_workers: int = MAX_READERS,
    progress: Progress | None = None,
    lazy_history: bool = False,
) -> tuple[dict[str, CheckpointState], dict[str, CheckResult]]:
    """Read every checkpoint (in parallel, each as soon as ``locations`` yields it): states,
    and a failed result per unreadable one. ``lazy_history``: offsets/C only, the older
    batches left for ``judge_states`` to read when a rule needs them."""
    states: dict[str, CheckpointState] = {}
    failures: dict[str, CheckResult] = {}
    unique: dict[Location | str, None] = {}

    def each() -> Iterator[Location | str]:  # once each, as ``locations`` yields them
        for location in locations:
            if location not in unique:
                unique[location] = None
                yield location

    def read(location: Location | str) -> tuple[str, CheckpointState | SparkLagError]:
        try:
            reader = session.reader(location, query_id=query_id)
            return str(location), reader.read(history, lazy_history=lazy_history)
        except SparkLagError as exc:
            return str(location), exc

    # Executor.map submits every location (each read starts as it is yielded) before the first
    # result comes back, so ``unique`` is complete when progress is reported.
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        for done, (location, outcome) in enumerate(pool.map(read, each()), start=1):
            if isinstance(outcome, SparkLagError):
                failures[location] = failed_result(location, outcome)
            else:
                states[location] = outcome
            if progress is not None:
                progress(done, len(unique))
    return states, failures


def check(
    session: Session,
    location: Location | str,
    options: CheckOptions | None = None,
    *,
    now: float | None = None,
) -> CheckResult:
    """Lag and health of the Spark query whose checkpoint is at ``location``.

    Raises the typed errors (`CheckpointNotFound`, `CheckpointCorrupt`, `StorageError`,
    `KafkaUnavailable`, `KafkaError`).

    >>> with Session(kafka_config={"bootstrap.servers": "127.0.0.1:9092"}) as session:
    ...     result = check(session, "/data/ck/orders",
    ...                    CheckOptions(Thresholds(max_lag_seconds=600)))    # doctest: +SKIP
    >>> result.verdict.health                                               # doctest: +SKIP
    <Health.OK: 'OK'>
    """
    options = options or CheckOptions()
    where = Location.of(location)
    state = session.reader(where).read(options.history_to_read, lazy_history=True)
    return judge_one(session, where.text, state, options, now)


def check_many(
    session: Session,
    locations: Sequence[Location | str],
    options: CheckOptions | None = None,
    *,
    now: float | None = None,
    query_id: bool = True,
    max_workers: int = MAX_READERS,
    progress: Progress | None = None,
) -> list[CheckResult]:
    """`check` for many queries: checkpoints read in parallel (at most `max_workers` at once),
    ONE Kafka snapshot for all their topics; results in the order of `locations`. An
    unreadable checkpoint gives a result with `error` and an UNKNOWN verdict instead of failing
    the others; Kafka errors concern every query and are raised.
    """
    options = options or CheckOptions()
    wanted, refused = parse_each(locations, "locations")
    states, failures = read_states(
        session,
        [loc for i, loc in enumerate(wanted) if i not in refused],
        history=options.history_to_read,
        query_id=query_id,
        max_workers=max_workers,
        progress=progress,
        lazy_history=True,
    )
    # No state: no Kafka request either (no topic to ask for).
    judged = judge_states(session, states, options, now=now, query_id=query_id)
    return [
        refused[i] if i in refused else judged.get(loc.text) or failures[loc.text]
        for i, loc in enumerate(wanted)
    ]


def parse_each(
    locations: Iterable[Location | str], name: str
) -> tuple[list[Location], dict[int, CheckResult]]:
    """The locations of a list of jobs, each parsed once; one that holds credentials
    (``s3a://KEY:SECRET@b/ck``) is refused at once, never read, and gives that job a failed
    result (by its index; named without the credentials) instead of failing the others."""
    wanted: list[Location] = []
    refused: dict[int, CheckResult] = {}
    for i, each in enumerate(locations):
        try:
            wanted.append(Location.of(each, name, bucket=False))
        except UnsupportedStorageURL as exc:
            shown = redact_url(str(each))
            refused[i] = failed_result(shown, exc)
            wanted.append(Location.of(shown, name, bucket=False))  # a stand-in, never read
    return wanted, refused


# -- for scripts: one call, its own session ------------------------------------------------------


def check_checkpoint(
    location: str,
    *,
    options: CheckOptions | None = None,
    now: float | None = None,
    **options_and_session: Any,
) -> CheckResult:
    """:func:`check` in a session of its own (a script's one-off check). The keyword
    arguments are ``CheckOptions`` fields (``thresholds``, ``history``, ...; or ``options``)
    and :class:`~airflow_sparklag.session.Session`'s (``kafka_config``, ``s3_options``, ...).

    >>> check_checkpoint("/data/ck/orders", kafka_config={"bootstrap.servers": "k:9092"},
    ...                  thresholds={"max_lag_seconds": 600})      # doctest: +SKIP
    """
    chosen = params.take(OPTION_NAMES, CheckOptions.build, options_and_session, options)
    with Session(**options_and_session) as session:
        return check(session, location, chosen, now=now)


def check_checkpoints(
    locations: Sequence[str],
    *,
    options: CheckOptions | None = None,
    now: float | None = None,
    max_workers: int = MAX_READERS,
    **options_and_session: Any,
) -> list[CheckResult]:
    """:func:`check_many` in a session of its own; keyword arguments as :func:`check_checkpoint`.

    >>> results = check_checkpoints(["s3a://b/ck/a", "s3a://b/ck/b"],
    ...                             kafka_config={"bootstrap.servers": "k:9092"})  # doctest: +SKIP
    >>> [r.verdict.health.value for r in results]                                   # doctest: +SKIP
    ['OK', 'LAGGING']
    """
    chosen = params.take(OPTION_NAMES, CheckOptions.build, options_and_session, options)
    with Session(**options_and_session) as session:
        return check_many(session, locations, chosen, now=now, max_workers=max_workers)
