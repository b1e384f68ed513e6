"""Kafka errors without a broker: what a message says when librdkafka gives no reason, the
credentials refusal seen through the error callback, the coordinator retries of a group export,
and the timeout's validation. The real broker cases (SASL, faults) are in
tests/integration/test_faults.py."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException

from airflow_sparklag import consumer_group
from airflow_sparklag.errors import InvalidParameter, KafkaError, KafkaUnavailable
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.session import Session

NOWHERE = {"bootstrap.servers": "127.0.0.1:9"}  # never contacted by these tests


@pytest.fixture
def client() -> Iterator[KafkaOffsetsClient]:
    with KafkaOffsetsClient(NOWHERE, timeout=2) as kafka:
        yield kafka


def _failed(code: int, reason: str | None = None) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    error = LibKafkaError(code, reason) if reason is not None else LibKafkaError(code)
    future.set_exception(KafkaException(error))
    return future


def _done(result: Any) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(result)
    return future


def test_an_error_without_a_reason_still_says_what_went_wrong(client: KafkaOffsetsClient) -> None:
    empty = KafkaException(LibKafkaError(LibKafkaError.NOT_COORDINATOR, "ConsumerGroupDescribe: "))
    assert client.errors.describe(empty) == (
        "ConsumerGroupDescribe: NOT_COORDINATOR (Broker: Not coordinator)"
    )
    error = client.errors.translate(empty, "describe group 'g'")
    assert str(error).endswith(": ConsumerGroupDescribe: NOT_COORDINATOR (Broker: Not coordinator)")
    assert client.errors.describe(TimeoutError()) == "TimeoutError"


def test_refusal_reported_by_the_error_callback_wins_over_transport_failure(
    client: KafkaOffsetsClient,
) -> None:
    transport = KafkaException(LibKafkaError(LibKafkaError._TRANSPORT))
    assert isinstance(client.errors.translate(transport, "a metadata request"), KafkaUnavailable)
    client.errors.on_error(
        LibKafkaError(
            LibKafkaError._AUTHENTICATION,
            "SASL authentication error: Authentication failed: Invalid username or password",
        )
    )
    refused = client.errors.translate(transport, "a metadata request")
    assert type(refused) is KafkaError
    assert str(refused).startswith(
        "Kafka refused the credentials for 127.0.0.1:9 (SASL authentication failed): "
    )
    assert "Invalid username or password" in str(refused)


def test_refusal_stops_the_wait_at_once(client: KafkaOffsetsClient) -> None:
    pending: concurrent.futures.Future = concurrent.futures.Future()  # never completes
    client.errors.on_error(LibKafkaError(LibKafkaError._AUTHENTICATION, "bad password"))
    started = time.monotonic()
    with pytest.raises(KafkaError, match="refused the credentials"):
        client.outcomes({"x": pending}, "a ListOffsets request")
    assert time.monotonic() - started < 1.0


def test_the_users_error_callback_still_runs() -> None:
    seen: list[str] = []
    config = {**NOWHERE, "error_cb": lambda error: seen.append(error.name())}
    with KafkaOffsetsClient(config, timeout=1) as kafka:
        kafka.errors.on_error(LibKafkaError(LibKafkaError._ALL_BROKERS_DOWN))
    assert seen == ["_ALL_BROKERS_DOWN"]


def test_unfinished_futures_are_unavailable_after_the_timeout() -> None:
    with KafkaOffsetsClient(NOWHERE, timeout=0.5) as kafka:
        started = time.monotonic()
        with pytest.raises(KafkaUnavailable, match=r"did not answer a ListOffsets .* 0.5 s"):
            kafka.outcomes({"x": concurrent.futures.Future()}, "a ListOffsets request")
    assert 0.4 <= time.monotonic() - started < 1.5


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "10", True])
def test_bad_timeout_is_refused_naming_it(timeout: Any) -> None:
    with pytest.raises(InvalidParameter) as raised:
        KafkaOffsetsClient(NOWHERE, timeout=timeout)
    assert raised.value.parameter == "timeout"


@pytest.mark.parametrize(
    "servers",
    ["alice:CANARY-pw-5e1d@b:9092", "b:9092,u:CANARY-pw-5e1d@c:9092", "b:99999", ",,", "9092"],
)
def test_bootstrap_servers_librdkafka_would_misread_are_refused(servers: str) -> None:
    # userinfo was printed in every KafkaUnavailable message; port 99999 dialled 34463
    for make in (
        lambda: KafkaOffsetsClient({"bootstrap.servers": servers}),
        lambda: Session(
            kafka_config={"bootstrap.servers": "b:9092"},
            source_kafka={"1": {"bootstrap.servers": servers}},
        ),
    ):
        with pytest.raises(InvalidParameter) as raised:
            make()
        assert raised.value.parameter == "bootstrap.servers"
        assert "CANARY" not in str(raised.value)


@pytest.mark.parametrize("timeout", [301, 3600, 1e9])
def test_a_timeout_beyond_librdkafkas_socket_timeout_still_makes_a_client(timeout: float) -> None:
    # socket.timeout.ms above 300,000 (or past a 32-bit int at 1e9 s) failed every command:
    # "Cannot create a Kafka client ... value 301000 is outside allowed range 10..300000".
    with KafkaOffsetsClient(NOWHERE, timeout=timeout) as kafka:
        assert kafka.admin() is not None
        assert kafka.timeout == timeout


# -- group requests retry while the coordinator is not ready ----------------------------------


def test_group_request_retries_coordinator_errors_then_succeeds(
    client: KafkaOffsetsClient,
) -> None:
    answers = [
        _failed(LibKafkaError.NOT_COORDINATOR, "ConsumerGroupDescribe: "),
        _failed(LibKafkaError.COORDINATOR_NOT_AVAILABLE),
        _failed(LibKafkaError.COORDINATOR_LOAD_IN_PROGRESS),
        _done("described"),
    ]
    timeouts: list[float] = []

    def send(seconds: float) -> concurrent.futures.Future:
        timeouts.append(seconds)
        return answers.pop(0)

    assert consumer_group._group_request(client, "describe group 'g'", send) == "described"
    assert len(timeouts) == 4 and all(0 < t <= 2 for t in timeouts)
    assert timeouts == sorted(timeouts, reverse=True)  # one deadline for all attempts


def test_group_request_gives_up_at_the_timeout_saying_why(client: KafkaOffsetsClient) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable) as raised:
        consumer_group._group_request(
            client,
            "describe group 'g'",
            lambda _s: _failed(LibKafkaError.NOT_COORDINATOR, "ConsumerGroupDescribe: "),
        )
    assert 2 <= time.monotonic() - started < 3
    assert str(raised.value) == (
        "Kafka 127.0.0.1:9: the group coordinator was not ready for describe group 'g' within "
        "2 s (last answer: ConsumerGroupDescribe: NOT_COORDINATOR (Broker: Not coordinator)); "
        "try again once the cluster has settled"
    )


def test_group_request_does_not_retry_other_errors(client: KafkaOffsetsClient) -> None:
    sent: list[float] = []

    def send(seconds: float) -> concurrent.futures.Future:
        sent.append(seconds)
        return _failed(LibKafkaError.GROUP_AUTHORIZATION_FAILED)

    with pytest.raises(KafkaError, match=r"Kafka refused describe group 'g' on 127.0.0.1:9"):
        consumer_group._group_request(client, "describe group 'g'", send)
    assert len(sent) == 1


def test_a_failing_oauth_callback_is_named_with_its_reason() -> None:
    # librdkafka only says "OAuth token not set within 10 seconds" (its own wait); the error
    # names the callback's own failure, without the config's secrets.
    def token_provider(_config: str) -> tuple[str, float]:
        raise RuntimeError("identity provider answered 503")

    config = {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": token_provider,
        "sasl.oauthbearer.client.secret": "CANARY-oauth-client-secret",
    }
    with pytest.raises(KafkaError) as raised, KafkaOffsetsClient(config, timeout=2) as client:
        client.snapshot(["orders"])
    message = str(raised.value)
    assert "oauth_cb token callback failed" in message
    assert "RuntimeError: identity provider answered 503" in message
    assert "CANARY" not in message and raised.value.__cause__ is None


@pytest.mark.parametrize(
    ("server", "cause"),
    [
        ("kafka-brokr.invalid:9092", "Failed to resolve 'kafka-brokr.invalid:9092'"),
        ("127.0.0.1:1", "Connect to ipv4#127.0.0.1:1 failed: Connection refused"),
    ],
)
def test_an_unreachable_broker_is_named_with_its_cause_once(
    server: str, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A real librdkafka client retries every ~100 ms and logs each failure: the error says the
    # cause, and the log has it once (repeats go to DEBUG), not 40 times.
    caplog.set_level(logging.DEBUG, logger="airflow_sparklag.kafka")
    with (
        KafkaOffsetsClient({"bootstrap.servers": server}, timeout=2) as client,
        pytest.raises(KafkaUnavailable) as caught,
    ):
        client.snapshot(["orders"])
    message = str(caught.value)
    assert f"{server} did not answer a metadata request within 2 s ({cause}" in message
    lines = [r for r in caplog.records if r.name.endswith("librdkafka")]
    loud = [r for r in lines if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and cause in loud[0].getMessage(), [r.getMessage() for r in loud]
    assert len(lines) > 3  # the repeats were seen, at DEBUG


def test_a_cause_from_before_the_last_answer_is_not_named() -> None:
    # The broker answered since: that connection failure is no cause. One from before the
    # timeout with no answer since still is (librdkafka logs a repeated failure once).
    errors = KafkaOffsetsClient({"bootstrap.servers": "127.0.0.1:1"}, timeout=1).errors
    errors.client_log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#1", "[thrd:x]: refused")
    assert "refused" in str(errors.unavailable("a metadata request"))
    errors.client_log.answered()
    assert "refused" not in str(errors.unavailable("a metadata request"))


def test_kerberos_with_a_wheel_without_gssapi_says_which_builds_have_it() -> None:
    # The PyPI wheels lack Cyrus SASL: librdkafka refuses the config when the client is built.
    config = {
        "bootstrap.servers": "127.0.0.1:9",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.keytab": "/etc/secret-canary.keytab",
    }
    started = time.monotonic()
    with KafkaOffsetsClient(config, timeout=5) as kafka, pytest.raises(KafkaError) as caught:
        kafka.snapshot(["orders"])
    message = str(caught.value)
    assert "cannot use SASL mechanism GSSAPI" in message
    assert "Current build options: PLAIN SASL_SCRAM OAUTHBEARER" in message
    assert "conda-forge" in message and "recompile" not in message
    assert time.monotonic() - started < 1  # refused before any request


def test_a_bootstrap_list_of_hung_servers_fails_within_one_timeout() -> None:
    """Two servers that accept connections and never answer (a hung broker, a black-holing
    proxy): the one-cluster check sees no answer within the timeout and says so at once;
    before, the metadata request after it waited a second timeout (4 s for a 2 s bound)."""
    import socket

    listeners = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # accepted by the kernel, never read: no answer ever comes
        listeners.append(sock)
    servers = ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in listeners)
    started = time.monotonic()
    try:
        with (
            KafkaOffsetsClient({"bootstrap.servers": servers}, timeout=2) as kafka,
            pytest.raises(KafkaUnavailable, match="did not answer a metadata request within 2 s"),
        ):
            kafka.snapshot(["orders"])
    finally:
        for sock in listeners:
            sock.close()
    assert time.monotonic() - started < 2 + 1.0
