"""What every operator and sensor shares: flat templated options, the hook, and how rendered
parameters and core errors become task outcomes. A parameter that cannot be read fails the task
before anything is read or changed; one not templated fails the DAG's import already."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import os
from collections.abc import Callable, Collection, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_sparklag.check_options import CheckOptions
from airflow_sparklag.hooks.sparklag import ConnectionIds, SparkLagHook
from airflow_sparklag.operators.lineage import LineageMixin

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
Options = TypeVar("Options", bound="DataclassInstance")  # ConnectionIds, CheckOptions, ...


# Old argument -> its name now: read for one release, with a DeprecationWarning (docs/names.md).
RENAMED = {"checkpoint_location": "location", "group_id": "consumer_group"}
# Values a DAG file gives as they are (a template renders text; Airflow resolves the rest).
_PLAIN = (str, int, float, type(None), datetime.date, datetime.timedelta, os.PathLike)


def is_templated(value: Any) -> bool:
    """Known only when the task runs: Jinja text (``{{ ... }}``, ``{% ... %}``) or an object
    Airflow resolves (an XComArg, a Param, ...), itself or inside a list or mapping."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(is_templated(key) or is_templated(item) for key, item in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(is_templated(item) for item in value)
    return not isinstance(value, _PLAIN)


def _flat_default(f: dataclasses.Field) -> Any:
    """A field's default as a keyword argument: a factory-made one (a dict, Thresholds) is None."""
    return None if f.default is dataclasses.MISSING else f.default


class FlatOptions:
    """Flat keyword arguments made from the fields of the options dataclasses a task declares
    in ``flat_options`` (``ConnectionIds``, ``CheckOptions``, ``MigrationOptions``): each
    field is an attribute of the task as given (templated, rendered later), and
    :meth:`options` reads them into ONE object through ``params.options``.

    The fields are templated (put before the ``template_fields`` a class declares) and added
    to the signature of each subclass's ``__init__``, so Airflow's ``default_args``,
    ``partial()`` and ``expand()`` know them as they know any argument.
    """

    flat_options: ClassVar[tuple[type, ...]] = ()
    template_fields: Collection[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("template_fields")
        if declared is not None:
            flat = (f.name for kind in cls.flat_options for f in dataclasses.fields(kind))
            cls.template_fields = tuple(dict.fromkeys((*flat, *declared)))
        init = cls.__dict__.get("__init__")
        if init is None or not cls.flat_options:
            return
        given = list(inspect.signature(init).parameters.values())
        # The parameters of the base's __init__ (``location``, ...: already merged with its
        # own bases'), then the option fields: help() and IDEs show every argument.
        base = next(
            k for k in cls.__mro__[1:] if "__init__" in k.__dict__ and issubclass(k, FlatOptions)
        )
        inherited = list(inspect.signature(base.__init__).parameters.values())[1:]
        fields = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_flat_default(f))
            for kind in cls.flat_options
            for f in dataclasses.fields(kind)
        ]
        merged: dict[str, inspect.Parameter] = {}
        for parameter in (*given, *inherited, *fields):
            if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                merged.setdefault(parameter.name, parameter)
        rest = [p for p in given if p.kind is inspect.Parameter.VAR_KEYWORD]
        init.__signature__ = inspect.signature(init).replace(parameters=[*merged.values(), *rest])

    def __init__(self, **kwargs: Any) -> None:
        given = {
            f.name: kwargs.pop(f.name, _flat_default(f))
            for kind in type(self).flat_options
            for f in dataclasses.fields(kind)
        }
        super().__init__(**kwargs)
        for name, value in given.items():
            setattr(self, name, value)
        for kind in type(self).flat_options:
            self._check_options(kind)

    def _check_options(self, kind: type) -> None:
        """Read the ``kind`` fields given as they are (not templated) now, at DAG parse time:
        all of them together when none is templated (``run_grace`` needs ``runs_every``)."""
        fields = dataclasses.fields(kind)
        plain = [f for f in fields if not is_templated(getattr(self, f.name))]
        if len(plain) == len(fields):
            self.given(kind.__name__, None, lambda _name, _value: self.options(kind))
            return
        for f in plain:
            self.given(f.name, getattr(self, f.name), f.metadata["read"])

    def given(self, name: str, value: T, read: Callable[[str, Any], Any]) -> T:
        """``value`` as given (templated fields are rendered later), read now by ``read``
        unless it is templated (the same reader reads the rendered value when the task runs):
        a value it cannot read fails the DAG's import, naming the task and the parameter."""
        from airflow_sparklag.errors import InvalidParameter

        # A mapped task's copy is made when it runs (its values resolved): execute() reads
        # them, so a failure is recorded as a check's (CHECK_FAILED) and not lost in __init__.
        if not is_templated(value) and not getattr(self, "_BaseOperator__from_mapped", False):
            try:
                read(name, value)
            except InvalidParameter as exc:
                raise _in_task(getattr(self, "task_id", "?"), exc) from None
        return value

    def renamed(self, old: str, old_value: Any, value: Any, read: Callable[[str, Any], Any]) -> Any:
        """:meth:`given` of the argument once named ``old`` (:data:`RENAMED`), given by either
        name: the old one is read for one release, with a DeprecationWarning. Neither, or
        both: an error naming them."""
        from airflow_sparklag import params

        task, new = getattr(self, "task_id", "?"), RENAMED[old]
        if old_value is not None:
            if value is not None:
                raise TypeError(f"{task}: give {new!r}, not both {new!r} and its old name {old!r}")
            params.renamed(old, RENAMED, f"(task {task})")
            value = old_value
        elif value is None:
            raise TypeError(f"{task}: {type(self).__name__} needs the argument {new!r}")
        return self.given(new, value, read)

    def options(self, kind: type[Options]) -> Options:
        """The ``kind`` object of the task's rendered arguments (errors name the argument)."""
        from airflow_sparklag import params

        names = (f.name for f in dataclasses.fields(kind))
        return params.options(kind, {name: getattr(self, name) for name in names})


def _in_task(task_id: str, exc: Exception) -> Any:
    """``exc`` (an ``InvalidParameter``) with the task named, as the task's error says it."""
    from airflow_sparklag.errors import InvalidParameter

    error = InvalidParameter(f"{task_id}: invalid parameter {exc}")
    error.parameter = getattr(exc, "parameter", None)
    return error


class SparkLagHookMixin(LineageMixin, FlatOptions):
    """Connection ids, the hook, the two error boundaries of a task, and its lineage (what
    its session read, recorded when the hook is closed: operators/lineage.py)."""

    flat_options: ClassVar[tuple[type, ...]] = (ConnectionIds,)  # attributes as given
    task_id: str

    def connection_ids(self) -> ConnectionIds:
        """The task's rendered connection ids, read (a value it cannot read fails)."""
        return self.read_params(lambda: self.options(ConnectionIds))

    @cached_property
    def hook(self) -> SparkLagHook:
        return self.connection_ids().hook()

    def read_params(self, read: Callable[[], T]) -> T:
        """Run ``read`` (params.* calls); a value it cannot read fails the task for good."""
        from airflow_sparklag.errors import InvalidParameter

        try:
            return read()
        except InvalidParameter as exc:
            raise AirflowFailException(str(_in_task(self.task_id, exc))) from None

    def run_core(self, work: Callable[[], T], *, close: bool = True) -> T:
        """Run core work; its typed errors become task errors with every secret scrubbed.
        ``close``: close the hook after it (a poking sensor keeps its session).

        Refusals (a migration that would lose data) and invalid parameters are final: no
        retry can change them. Storage and Kafka errors may pass: the task may retry.
        """
        from airflow_sparklag.errors import InvalidParameter, MigrationRefused, SparkLagError
        from airflow_sparklag.hooks.connections import in_airflow_words

        hook = self.hook
        try:
            return work()
        except SparkLagError as exc:
            message = hook.scrub(in_airflow_words(f"{type(exc).__name__}: {exc}"))
            if isinstance(exc, (MigrationRefused, InvalidParameter)):
                raise AirflowFailException(message) from None
            raise AirflowException(message) from None
        except Exception as exc:
            scrubbed = hook.scrub(str(exc))
            if scrubbed != str(exc):  # drop the original: its text holds a secret
                raise AirflowException(f"{type(exc).__name__}: {scrubbed}") from None
            raise
        finally:
            if close:
                self.close_hook()

    def close_hook(self) -> None:
        if "hook" in self.__dict__:
            self.record_reads()
            self.hook.close()
            del self.__dict__["hook"]


class CheckOptionsMixin(SparkLagHookMixin):
    """A task that judges a check: the connection ids and ``CheckOptions``' fields as flat,
    templated keyword arguments (``thresholds=``, ``history=``, ...), read into ONE
    ``CheckOptions`` by :meth:`check_options`."""

    flat_options: ClassVar[tuple[type, ...]] = (ConnectionIds, CheckOptions)
    template_fields_renderers: ClassVar[dict[str, str]] = {"thresholds": "json"}
    ui_color = "#f4e3c1"

    def check_options(self) -> CheckOptions:
        return self.options(CheckOptions)
