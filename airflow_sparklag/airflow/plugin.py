"""The ``airflow.plugins`` entry point of the distribution.

Airflow 3.1+ (plugins mount FastAPI apps and external views): the "Streaming lag" page of
:mod:`airflow_sparklag.airflow.lag_page`. Older Airflow (2.11, 3.0): a plugin without the page,
so that loading the entry point is no import error there.
"""

from __future__ import annotations

from airflow import __version__

# The one version test of the provider, so it is made here rather than through common.compat's
# version_compat, which that provider asks others not to import (it copies it into each one).
if tuple(int(part) for part in __version__.split(".")[:2]) >= (3, 1):
    from airflow_sparklag.airflow.lag_page import SparkLagPlugin
else:
    # The class lag_page's plugin derives from too (common.compat's AirflowPlugin is the Task
    # SDK's on 3.3, another class).
    from airflow.plugins_manager import AirflowPlugin

    class SparkLagPlugin(AirflowPlugin):  # type: ignore[no-redef]  # lag_page.py's on 3.1+
        """No page: it needs Airflow 3.1+."""

        name = "sparklag"
