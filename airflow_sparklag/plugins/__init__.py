"""Airflow UI plugins of the provider: the "Streaming lag" page (``lag_page.py``)."""
