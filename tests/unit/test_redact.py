"""redact.py: what may be printed. An allowlist for Kafka settings, one list of secret markers,
URLs without their credentials, and messages scrubbed of known secrets."""

from __future__ import annotations

import pytest

from airflow_sparklag.errors import KafkaError
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.redact import (
    MASK,
    SAFE_KAFKA_KEYS,
    SECRET_MARKERS,
    is_secret_key,
    kafka_secrets,
    redact_kafka_config,
    redact_url,
    scrub,
    secret_parts,
)

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="lag-monitor" password="jaas-pw-7f3e";'
)
# Secrets under every name librdkafka (or a typo) lets them hide under.
SECRET_CONFIG = {
    "sasl.password": "sasl-pw-1a2b",
    "sasl.passwd": "typo-pw-3c4d",
    "sasl.jaas.config": JAAS,
    "sasl.oauthbearer.config": "principal=admin clientSecret=oauth-sec-5e6f",
    "sasl.oauthbearer.client.secret": "oidc-sec-7a8b",
    "ssl.key.password": "key-pw-9c0d",
    "ssl.keystore.password": "keystore-pw-1e2f",
    "sasl.username": "api-key-3a4b",
}
SECRETS = [
    "sasl-pw-1a2b",
    "typo-pw-3c4d",
    "jaas-pw-7f3e",
    "oauth-sec-5e6f",
    "oidc-sec-7a8b",
    "key-pw-9c0d",
    "keystore-pw-1e2f",
    "api-key-3a4b",
]


def test_markers_are_one_lower_case_list() -> None:
    assert isinstance(SECRET_MARKERS, tuple)
    assert all(m == m.lower() for m in SECRET_MARKERS)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("aws_secret_access_key", True),
        ("aws_session_token", True),
        ("aws_access_key_id", True),
        ("Password", True),
        ("sasl.passwd", True),
        ("sasl.jaas.config", True),
        ("sasl.oauthbearer.config", True),
        ("region_name", False),
        ("endpoint_url", False),
        ("user", False),
    ],
)
def test_is_secret_key(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_safe_kafka_keys_hold_no_secret_looking_key() -> None:
    assert {"bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms"} <= (
        SAFE_KAFKA_KEYS
    )
    assert {"client.id", "group.id", "request.timeout.ms", "socket.timeout.ms"} <= SAFE_KAFKA_KEYS
    assert "ssl.endpoint.identification.algorithm" in SAFE_KAFKA_KEYS
    assert [k for k in SAFE_KAFKA_KEYS if is_secret_key(k)] == []
    assert not set(SECRET_CONFIG) & SAFE_KAFKA_KEYS


def test_redact_kafka_config_shows_only_allowlisted_values() -> None:
    config = {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "socket.timeout.ms": 5000,
        "some.future.setting": "who-knows",
        **SECRET_CONFIG,
    }
    redacted = redact_kafka_config(config)
    assert redacted["bootstrap.servers"] == "b1:9092,b2:9092"
    assert redacted["security.protocol"] == "SASL_SSL"
    assert redacted["socket.timeout.ms"] == 5000
    assert redacted["some.future.setting"] == MASK  # unknown keys are masked too
    assert all(redacted[key] == MASK for key in SECRET_CONFIG)
    assert list(redacted) == list(config)
    assert all(secret not in str(redacted) for secret in SECRETS)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3a://KEY:SECRET@bucket/x", "s3a://bucket/x"),
        ("s3a://AKIA:abc/def+ghi@bucket/ck/orders", "s3a://bucket/ck/orders"),
        ("s3a://KEY:SE@CRET@bucket/x", "s3a://bucket/x"),
        ("hdfs://user:pw@nn:8020/ck", "hdfs://nn:8020/ck"),
        ("hdfs://nn:8020/users/me@example/ck", "hdfs://nn:8020/users/me@example/ck"),
        ("hdfs://[::1]:8020/a@b", "hdfs://[::1]:8020/a@b"),
        ("s3a://bucket/path@v2/x", "s3a://bucket/path@v2/x"),
        ("/local/path", "/local/path"),
        ("relative/a@b", "relative/a@b"),
        ("file:///tmp/ck", "file:///tmp/ck"),
        # Azure names the container before "@": kept; a user:password there is not.
        ("abfs://ck@acct.dfs.core.windows.net/x", "abfs://ck@acct.dfs.core.windows.net/x"),
        ("abfss://ck:KEY@acct.dfs.core.windows.net/x", "abfss://acct.dfs.core.windows.net/x"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_secret_parts_finds_quoted_and_assigned_values() -> None:
    parts = secret_parts(JAAS)
    assert "jaas-pw-7f3e" in parts and "lag-monitor" in parts
    assert "oauth-sec-5e6f" in secret_parts("principal=admin clientSecret=oauth-sec-5e6f")
    # Too short or switch words: scrubbing them would wreck every message.
    assert secret_parts("abc") == []
    assert secret_parts("true") == []


def test_kafka_secrets_are_the_values_outside_the_allowlist() -> None:
    found = kafka_secrets({"bootstrap.servers": "broker-host:9092", **SECRET_CONFIG})
    assert "broker-host:9092" not in found
    assert all(secret in found for secret in SECRETS)


def test_scrub_removes_secrets_longest_first_and_url_credentials() -> None:
    message = (
        "auth failed for pw-secret-long (pw-secret) at s3a://K:S/x@bucket/ck and hdfs://nn:8020/p"
    )
    assert scrub(message, ["pw-secret", "pw-secret-long", ""]) == (
        "auth failed for *** (***) at s3a://bucket/ck and hdfs://nn:8020/p"
    )
    assert scrub("nothing to hide", []) == "nothing to hide"


def test_kafka_client_error_never_prints_a_secret() -> None:
    # An unknown (mistyped) property makes librdkafka refuse the config at once: no broker.
    config = {"bootstrap.servers": "127.0.0.1:1", **SECRET_CONFIG}
    client = KafkaOffsetsClient(config, timeout=1)
    with pytest.raises(KafkaError) as caught:
        client.snapshot(["orders"])
    message = str(caught.value)
    assert "127.0.0.1:1" in message and "sasl.passwd" in message
    assert all(secret not in message for secret in SECRETS), message
