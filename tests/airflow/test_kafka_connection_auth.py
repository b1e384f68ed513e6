"""``kafka`` connections with SASL against a real broker: SASL/PLAIN and SASL/OAUTHBEARER
(unsecured JWT, from librdkafka's built-in token and from an ``oauth_cb`` that the
apache-kafka provider resolves from the connection's extra through its callback allowlist).

The connections are ``AIRFLOW_CONN_<ID>`` environment variables, as a deployment sets them;
every check goes through ``SparkLagHook.test_connection()``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_sparklag.hooks.sparklag import SparkLagHook
from airflow_sparklag.redact import redact_kafka_config
from testbed.kafka_broker import KafkaBroker
from tests.airflow.conftest import conn_env, kafka_connection

USER = "alice"
PASSWORD = "alice-plain-pw-7f3"
ALLOWLIST_ENV = "AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST"
TOKEN_CALLBACK = f"{__name__}.unsecured_token"


def unsecured_token(config_str: str) -> tuple[str, float]:
    """An ``oauth_cb``: an unsecured JWS (``alg: none``) for USER, valid for 5 minutes."""
    now = time.time()

    def part(claims: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()

    claims = {"sub": USER, "iat": int(now), "exp": int(now) + 300}
    return f"{part({'alg': 'none'})}.{part(claims)}.", now + 300


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker with a SASL_PLAINTEXT listener taking PLAIN (one user) and OAUTHBEARER."""
    broker = KafkaBroker(
        Path(tmp_path_factory.mktemp("kafka-auth")),
        heap="384m",
        sasl_users={USER: PASSWORD},
        oauthbearer=True,
    ).start()
    yield broker
    broker.stop()


def _connect(monkeypatch: pytest.MonkeyPatch, conn_id: str, broker: KafkaBroker, **extra) -> str:
    assert broker.sasl_bootstrap is not None
    extra = {"security.protocol": "SASL_PLAINTEXT", **extra}
    monkeypatch.setenv(conn_env(conn_id), kafka_connection(broker.sasl_bootstrap, **extra))
    return conn_id


def test_sasl_plain(sasl_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = _connect(
        monkeypatch,
        "kafka_plain",
        sasl_broker,
        **{"sasl.mechanism": "PLAIN", "sasl.username": USER, "sasl.password": PASSWORD},
    )
    ok, message = SparkLagHook(conn_id, kafka_timeout=15).test_connection()
    assert ok, message
    assert f"Kafka {sasl_broker.sasl_bootstrap} answered" in message


def test_sasl_plain_wrong_password_fails_without_printing_it(
    sasl_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-pw-canary-91c"
    conn_id = _connect(
        monkeypatch,
        "kafka_plain_wrong",
        sasl_broker,
        **{"sasl.mechanism": "PLAIN", "sasl.username": USER, "sasl.password": wrong},
    )
    ok, message = SparkLagHook(conn_id, kafka_timeout=10).test_connection()
    assert not ok
    assert wrong not in message


def test_sasl_oauthbearer_unsecured_jwt(
    sasl_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn_id = _connect(
        monkeypatch,
        "kafka_oauth_jwt",
        sasl_broker,
        **{
            "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": f"principal={USER}",
        },
    )
    ok, message = SparkLagHook(conn_id, kafka_timeout=15).test_connection()
    assert ok, message


def test_sasl_oauthbearer_callback_resolved_by_the_kafka_provider(
    sasl_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The extra names the callback by its import path; the apache-kafka provider resolves it
    # because [apache_kafka] callback_allowlist lists it.
    monkeypatch.setenv(ALLOWLIST_ENV, TOKEN_CALLBACK)
    conn_id = _connect(
        monkeypatch,
        "kafka_oauth_cb",
        sasl_broker,
        **{"sasl.mechanism": "OAUTHBEARER", "oauth_cb": TOKEN_CALLBACK},
    )
    hook = SparkLagHook(conn_id, kafka_timeout=15)
    ok, message = hook.test_connection()
    assert ok, message

    conns = hook.get_conn()
    assert conns.kafka_config["oauth_cb"] is unsecured_token
    # A callable in the config is masked, not printed, and the secrets list still builds.
    assert redact_kafka_config(conns.kafka_config)["oauth_cb"] == "***"
    assert all(isinstance(secret, str) for secret in conns.secrets)
    # Hooks on the same connection share a client: the fingerprint does not see the callable.
    again = SparkLagHook(conn_id, kafka_timeout=15).get_conn()
    assert again.kafka_fingerprint == conns.kafka_fingerprint != ""


def test_callback_not_in_the_allowlist_is_refused(
    sasl_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOWLIST_ENV, "")
    conn_id = _connect(
        monkeypatch,
        "kafka_oauth_refused",
        sasl_broker,
        **{"sasl.mechanism": "OAUTHBEARER", "oauth_cb": TOKEN_CALLBACK},
    )
    ok, message = SparkLagHook(conn_id, kafka_timeout=10).test_connection()
    assert not ok
    assert "callback_allowlist" in message
