"""An event trigger for Airflow 3 asset watchers: fires when a job's health changes sides
(docs/events.md). The side each job was last on is kept in an Airflow Variable, written BEFORE
an event is yielded, so a restarted triggerer never fires twice for one transition."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow import __version__ as _airflow_release
from airflow.providers.common.compat.sdk import Variable
from airflow.triggers.base import TriggerEvent

from airflow_sparklag.compact import compact
from airflow_sparklag.errors import InvalidParameter, UsageError
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.redact import redact_url
from airflow_sparklag.render import breach_message
from airflow_sparklag.triggers.sparklag import SparkLagTrigger

if TYPE_CHECKING:
    from airflow.triggers.base import BaseEventTrigger

    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from airflow_sparklag.model.result import CheckResult
else:  # Airflow 2 has no event triggers: the class exists, constructing it says why not
    BaseEventTrigger = getattr(
        importlib.import_module("airflow.triggers.base"), "BaseEventTrigger", object
    )


DEFAULT_UNHEALTHY = ("LAGGING", "STALLED", "STOPPED", "REWIND", "DATA_LOSS")
# Settings that do not change what a job's health is: a new value keeps the recorded state.
_NOT_IDENTITY = ("poll_interval", "state_variable")


def airflow_version() -> tuple[int, ...]:
    """(major, minor) of the running Airflow."""
    return tuple(int(part) for part in _airflow_release.split(".")[:2])


class SparkLagEventTrigger(SparkLagTrigger, BaseEventTrigger):
    """Yields an event per job whose health crosses into ``unhealthy`` (or, with
    ``fire_on_recovery``, out of it); for ``Asset(..., watchers=[AssetWatcher(...)])``.

    ``location`` (one job) and/or ``locations`` and ``prefix`` (checkpoints discovered below
    it, listed again every ``rediscover_seconds``) say what to watch; ``thresholds``,
    ``history``, ``exact_time_lag``, ``read_committed``, ``runs_every``, ``run_grace`` and the
    connection ids are those of :class:`SparkLagTrigger` and the operators.

    >>> SparkLagEventTrigger("/ck/orders", unhealthy=["stalled", "stopped"],
    ...                      fire_on_recovery=True).serialize()[1]["unhealthy"]
    ['STALLED', 'STOPPED']
    """

    def __init__(
        self,
        location: str | None = None,
        *,
        locations: Sequence[str] = (),
        prefix: str | Sequence[str] | None = None,
        unhealthy: Sequence[str] = DEFAULT_UNHEALTHY,
        fire_on_recovery: bool = False,
        max_depth: int = 4,
        rediscover_seconds: float | None = 600.0,
        state_variable: str | None = None,
        poll_interval: float = 60.0,
        **kwargs: Any,
    ) -> None:
        if BaseEventTrigger is object:
            raise UsageError(
                "SparkLagEventTrigger needs Airflow 3.0 or later (event-driven scheduling with "
                f"AssetWatcher); this is Airflow {'.'.join(map(str, airflow_version()))}. On "
                "Airflow 2 poll instead: SparkLagSensor or SparkLagCheckOperator on a schedule."
            )
        kwargs.pop("deadline", None)  # an asset watcher runs until its DAG goes away
        super().__init__(location or "", poll_interval=poll_interval, **kwargs)
        self.locations = [location] if location else []
        self.locations += [loc for loc in locations if loc not in self.locations]
        self.prefix = prefix or None
        if not self.locations and not self.prefix:
            raise InvalidParameter("location: give a checkpoint location, locations or a prefix")
        self.unhealthy = _verdicts(unhealthy)
        self.fire_on_recovery = bool(fire_on_recovery)
        self.max_depth = int(max_depth)
        self.rediscover_seconds = rediscover_seconds
        self.state_variable = state_variable or self._default_state_variable()
        self.polls = 0  # polls of this run (logged with each)
        self.fleet: FleetChecker | None = None  # the run's

    def serialize(self) -> tuple[str, dict[str, Any]]:
        classpath, kwargs = super().serialize()
        # ``locations`` holds the location; never a deadline; ``unhealthy``, not the sensor's
        # accept / fail_fast
        for unused in ("location", "deadline", "accept", "fail_fast"):
            kwargs.pop(unused)
        kwargs.update(
            locations=self.locations,
            prefix=self.prefix,
            unhealthy=[h.value for h in self.unhealthy],
            fire_on_recovery=self.fire_on_recovery,
            max_depth=self.max_depth,
            rediscover_seconds=self.rediscover_seconds,
            state_variable=getattr(self, "state_variable", None),
        )
        return classpath, kwargs

    def _default_state_variable(self) -> str:
        _, kwargs = self.serialize()
        identity = {k: v for k, v in kwargs.items() if k not in _NOT_IDENTITY}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
        return f"sparklag_events_{digest.hexdigest()[:16]}"

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        recorded = await self._load_state()
        self.fleet = fleet = None  # one checker, on one session, for every poll
        try:
            while True:
                self.polls += 1
                try:
                    if fleet is None:
                        await hook.aget_conn()
                        self.fleet = fleet = hook.fleet_checker(
                            self.locations,
                            prefix=self.prefix,
                            options=self.condition.options,  # a HealthCondition
                            max_depth=self.max_depth,
                            rediscover_seconds=self.rediscover_seconds,
                        )
                    results = await asyncio.to_thread(fleet.check)
                except Exception as exc:  # Kafka down, a bad connection: no job changed side
                    failure = f"{type(exc).__name__}: {exc}"
                    self.log.error("poll %d: the check failed: %s", self.polls, hook.scrub(failure))
                else:
                    events, state = self._transitions(recorded, results, hook)
                    changed, recorded = state != recorded, state
                    self.log.info("poll %d: %s", self.polls, _summary(results))
                    if changed:
                        await self._save_state(recorded)
                    for event in events:
                        self.log.info("firing %s for %s", event["status"], event["job"])
                        yield TriggerEvent(event)
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(hook.close)

    def _transitions(
        self, recorded: Mapping[str, str], results: Sequence[CheckResult], hook: SparkLagHook
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The events of one poll, and the state to record: per job, its verdict when it was
        first seen or last changed side (jobs no longer found are forgotten)."""
        events: list[dict[str, Any]] = []
        state: dict[str, str] = {}
        for result in results:
            job = redact_url(result.location)
            health = result.verdict.health
            previous = recorded.get(job)
            state[job] = previous or health.value
            if health is Health.UNKNOWN and health not in self.unhealthy:
                continue  # cannot tell: the job stays on the side it was
            inside = health in self.unhealthy
            if previous is not None and (Health(previous) in self.unhealthy) == inside:
                continue  # the state persists: nothing to say
            state[job] = health.value
            if inside or (previous is not None and self.fire_on_recovery):
                status = "unhealthy" if inside else "recovered"
                events.append(self._payload(status, result, previous, hook))
        return events, state

    def _payload(
        self, status: str, result: CheckResult, previous: str | None, hook: SparkLagHook
    ) -> dict[str, Any]:
        payload = {
            "status": status,
            "job": result.location,
            "health": result.verdict.health.value,
            "previous": previous,
            "message": breach_message(result) if status == "unhealthy" else result.verdict.reason,
            "result": compact(result.to_dict()),
        }
        # Cut credentials from every location (s3a://KEY:SECRET@...) and any secret of the
        # connections from every text, wherever in the payload they appear.
        text = json.dumps(payload, default=str)
        for location in {result.location, *self.locations}:
            redacted = redact_url(location)
            if redacted != location:
                text = text.replace(json.dumps(location)[1:-1], json.dumps(redacted)[1:-1])
        scrubbed: dict[str, Any] = json.loads(hook.scrub(text))
        return scrubbed

    # -- recorded state (an Airflow Variable, read through the Task SDK) ---------------------

    async def _load_state(self) -> dict[str, str]:
        try:
            text = await asyncio.to_thread(Variable.get, self.state_variable, None)
            jobs = json.loads(text)["jobs"] if text else {}
            return {str(job): Health(str(health)).value for job, health in jobs.items()}
        except Exception as exc:
            self.log.warning(
                "Variable %s unreadable (%s: %s): every job starts unrecorded",
                self.state_variable,
                type(exc).__name__,
                exc,
            )
            return {}

    async def _save_state(self, recorded: Mapping[str, str]) -> None:
        text = json.dumps({"jobs": dict(recorded)}, sort_keys=True)
        description = "last recorded health per job of a SparkLagEventTrigger (docs/events.md)"
        try:
            await asyncio.to_thread(Variable.set, self.state_variable, text, description)
        except Exception as exc:  # still fires; a restart may then fire this transition again
            self.log.warning(
                "could not record the state in Variable %s (%s: %s)",
                self.state_variable,
                type(exc).__name__,
                exc,
            )


def _verdicts(names: Sequence[str] | str) -> tuple[Health, ...]:
    """``unhealthy`` as verdicts, or an error naming the parameter."""
    if isinstance(names, str):
        names = [part for part in names.replace(",", " ").split() if part]
    try:
        verdicts = tuple(dict.fromkeys(Health(str(name).strip().upper()) for name in names))
    except ValueError:
        known = ", ".join(h.value for h in Health if h is not Health.OK)
        raise InvalidParameter(f"unhealthy: {list(names)!r}: known verdicts are {known}") from None
    if not verdicts or Health.OK in verdicts:
        raise InvalidParameter(
            f"unhealthy: name the verdicts to be told about, without OK, e.g. "
            f"{list(DEFAULT_UNHEALTHY)}; got {list(names)!r}"
        )
    return verdicts


def _summary(results: Sequence[CheckResult]) -> str:
    shown = ", ".join(f"{redact_url(r.location)} {r.verdict.health.value}" for r in results[:10])
    more = f" and {len(results) - 10} more" if len(results) > 10 else ""
    return f"{len(results)} job(s): {shown}{more}" if results else "no job found"
