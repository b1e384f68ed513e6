"""The provider's Airflow-only glue: its registration (``provider_info``) and its UI plugin.

The core (everything outside this package and ``hooks/``, ``operators/``, ``sensors/``,
``triggers/``) never imports Airflow: the ``airflow_sparklag`` import-linter contracts in
pyproject.toml check it. Task SDK names come from ``airflow.providers.common.compat.sdk``.
"""
