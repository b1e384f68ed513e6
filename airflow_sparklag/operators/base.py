"""What every operator and sensor of the provider shares: its connections, its hook, and how
rendered parameters and core errors become task outcomes.

Connection ids (``ConnectionIds``) and options (``CheckOptions``, ``MigrationOptions``) are
flat, templated keyword arguments made from the dataclass fields (:class:`FlatOptions`), read
into ONE object each. The hook is built on first use, after templates are rendered, and closed
with the task. A parameter that cannot be read fails the task at once, naming it, before
anything is read or changed.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_sparklag.hooks.sparklag import CONN_FIELDS, ConnectionIds, SparkLagHook
from airflow_sparklag.monitor import OPTION_NAMES as CHECK_FIELDS  # templated check options
from airflow_sparklag.monitor import CheckOptions
from airflow_sparklag.operators.lineage import LineageMixin

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
Options = TypeVar("Options", bound="DataclassInstance")  # ConnectionIds, CheckOptions, ...

__all__ = ["CHECK_FIELDS", "CONN_FIELDS", "FlatOptions", "SparkLagHookMixin"]


def _flat_default(f: dataclasses.Field) -> Any:
    """A field's default as a keyword argument: a factory-made one (a dict, Thresholds) is None."""
    return None if f.default is dataclasses.MISSING else f.default


class FlatOptions:
    """Flat keyword arguments made from the fields of the options dataclasses a task declares
    in ``flat_options`` (``ConnectionIds``, ``CheckOptions``, ``MigrationOptions``): each
    field is an attribute of the task as given (templated, rendered later), and
    :meth:`options` reads them into ONE object through ``params.options``.

    The fields are added to the signature of each subclass's ``__init__``, so Airflow's
    ``default_args``, ``partial()`` and ``expand()`` know them as they know any argument.
    """

    flat_options: ClassVar[tuple[type, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or not cls.flat_options:
            return
        signature = inspect.signature(init)
        given = list(signature.parameters.values())
        names = {p.name for p in given}
        extra = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_flat_default(f))
            for kind in cls.flat_options
            for f in dataclasses.fields(kind)
            if f.name not in names
        ]
        rest = [p for p in given if p.kind is inspect.Parameter.VAR_KEYWORD]
        head = [p for p in given if p.kind is not inspect.Parameter.VAR_KEYWORD]
        init.__signature__ = signature.replace(parameters=[*head, *extra, *rest])

    def __init__(self, **kwargs: Any) -> None:
        given = {
            f.name: kwargs.pop(f.name, _flat_default(f))
            for kind in type(self).flat_options
            for f in dataclasses.fields(kind)
        }
        super().__init__(**kwargs)
        for name, value in given.items():
            setattr(self, name, value)

    def options(self, kind: type[Options]) -> Options:
        """The ``kind`` object of the task's rendered arguments (errors name the argument)."""
        from airflow_sparklag import params

        names = (f.name for f in dataclasses.fields(kind))
        return params.options(kind, {name: getattr(self, name) for name in names})


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
            raise AirflowFailException(f"{self.task_id}: invalid parameter {exc}") from None

    def run_core(self, work: Callable[[], T], *, close: bool = True) -> T:
        """Run core work; its typed errors become task errors with every secret scrubbed.
        ``close``: close the hook after it (a poking sensor keeps its session).

        Refusals (a migration that would lose data) and invalid parameters are final: no
        retry can change them. Storage and Kafka errors may pass: the task may retry.
        """
        from airflow_sparklag.errors import InvalidParameter, MigrationRefused, SparkLagError

        hook = self.hook
        try:
            return work()
        except (MigrationRefused, InvalidParameter) as exc:
            raise AirflowFailException(hook.scrub(f"{type(exc).__name__}: {exc}")) from None
        except SparkLagError as exc:
            raise AirflowException(hook.scrub(f"{type(exc).__name__}: {exc}")) from None
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

    def check_options(self) -> CheckOptions:
        return self.options(CheckOptions)
