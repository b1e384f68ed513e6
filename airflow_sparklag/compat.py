"""Airflow 2.11 to 3.3 from one place: the names the provider and its example DAGs use.

Each name comes from the Task SDK (``airflow.sdk``) where the running Airflow has it there, else
from where Airflow 3.0 or 2.11 keeps it::

    from airflow_sparklag.compat import BaseOperator, Context, AirflowFailException

Names are imported on first use (PEP 562), so a DAG file that asks for ``DAG`` and ``task``
imports nothing else. Nothing here imports a heavy client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what static tools see: the names of Airflow 3.3
    pass

_SDK = "airflow.sdk"
_SDK_EXCEPTIONS = "airflow.sdk.exceptions"
# name -> the modules that may define it, newest Airflow first
_WHERE: dict[str, tuple[str, ...]] = {
    "BaseOperator": (_SDK, "airflow.models.baseoperator"),
    "BaseSensorOperator": (_SDK, "airflow.sensors.base"),
    "PokeReturnValue": (_SDK, "airflow.sensors.base"),
    # 3.1+: the SDK; 3.0: the standard provider; 2.11: core
    "BaseBranchOperator": (
        _SDK,
        "airflow.providers.standard.operators.branch",
        "airflow.operators.branch",
    ),
    "BaseHook": (_SDK, "airflow.hooks.base"),
    "Connection": (_SDK, "airflow.models.connection"),
    "Variable": (_SDK, "airflow.models.variable"),
    "Context": (_SDK, "airflow.utils.context"),
    "DAG": (_SDK, "airflow.models.dag"),
    "Param": (_SDK, "airflow.models.param"),
    "task": (_SDK, "airflow.decorators"),
    "dag": (_SDK, "airflow.decorators"),
    "conf": ("airflow.sdk.configuration", "airflow.configuration"),
    "Stats": ("airflow.sdk.observability.stats", "airflow.stats"),
    "AirflowException": (_SDK_EXCEPTIONS, "airflow.exceptions"),
    "AirflowFailException": (_SDK_EXCEPTIONS, "airflow.exceptions"),
    "AirflowSkipException": (_SDK_EXCEPTIONS, "airflow.exceptions"),
    "AirflowSensorTimeout": (_SDK_EXCEPTIONS, "airflow.exceptions"),
    "TaskDeferred": (_SDK_EXCEPTIONS, "airflow.exceptions"),
    # triggers are still core on 3.x
    "BaseTrigger": ("airflow.triggers.base",),
    "TriggerEvent": ("airflow.triggers.base",),
}

__all__ = sorted([*_WHERE, "aget_connection", "airflow_version"])


def _module(name: str) -> Any:
    """The module ``name``, or None when this Airflow has no such module."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if name == missing or name.startswith(missing + "."):
            return None
        raise  # the module exists but something it needs is missing: a real error


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module_name in _WHERE[name]:
        module = _module(module_name)
        if module is not None and hasattr(module, name):
            value = getattr(module, name)
            globals()[name] = value  # the next lookup does not come here
            return value
    raise ImportError(f"{name} is in none of {', '.join(_WHERE[name])}: Airflow 2.11+ needed")


def airflow_version() -> tuple[int, int]:
    """(major, minor) of the running Airflow."""
    from airflow import __version__

    major, minor = __version__.split(".")[:2]
    return int(major), int(minor)


async def aget_connection(hook: Any, conn_id: str) -> Any:
    """``hook``'s connection ``conn_id`` read from an event loop: Airflow 3.1+'s async API,
    else the synchronous read in a worker thread (Airflow 2.11, 3.0)."""
    if hasattr(hook, "aget_connection"):
        return await hook.aget_connection(conn_id)
    from asgiref.sync import sync_to_async

    return await sync_to_async(hook.get_connection)(conn_id)
