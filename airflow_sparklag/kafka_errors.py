"""librdkafka's errors and log lines as our typed errors: one :class:`KafkaErrors` per client
(it remembers that client's refusals). ``confluent_kafka`` is imported inside functions only.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_sparklag.errors import KafkaConfigInvalid, KafkaError, KafkaUnavailable
from airflow_sparklag.redact import kafka_secrets, redact_kafka_config, scrub

# Error codes that mean "the cluster did not answer", as opposed to "it answered with an error".
_UNAVAILABLE_CODES = frozenset(
    {"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT_QUEUE", "_DESTROY"}
)
MISSING_TOPIC_CODES = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_ID"})
# The cluster refused who we are (bad password, certificate): librdkafka reports these through
# the error callback and lets requests fail as "_TRANSPORT" or time out.
_AUTHENTICATION_CODES = frozenset({"SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION", "_SSL"})
# The cluster knows who we are and refuses the request.
_AUTHORIZATION_CODES = frozenset(
    {"TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}
)
AUTH_CODES = _AUTHENTICATION_CODES | _AUTHORIZATION_CODES
# Where a user puts Kafka's client settings: the CLI's file, or an Airflow connection's extra.
WHERE_SETTINGS_GO = "(--kafka-config, or the Kafka connection's extra)"
POLL_INTERVAL = 0.2  # seconds between two looks at librdkafka's error callbacks while waiting


def error_name(exc: BaseException) -> str:
    """librdkafka's error name (e.g. "_TRANSPORT") of a KafkaException, or "" if none."""
    try:
        return str(exc.args[0].name())
    except Exception:  # no error object, or a malformed one: it must not hide the real error
        return ""


def error_text(exc: BaseException) -> str:
    """What went wrong, never empty: librdkafka's text, completed with the error's name and
    standard description when the broker gave no reason (``"ConsumerGroupDescribe: "``)."""
    error: Any = exc.args[0] if exc.args else None
    try:
        text = str(error.str()) if hasattr(error, "str") else str(exc)
    except Exception:
        text = ""
    prefix = text.strip().rstrip(":").strip()
    if prefix and not text.rstrip().endswith(":"):
        return text
    code = error_name(exc)
    described = code or type(exc).__name__
    if code:
        with contextlib.suppress(Exception):  # an error object without a code: its name alone
            from confluent_kafka import KafkaError as LibKafkaError

            standard = LibKafkaError(error.code()).str()
            described = f"{code} ({standard})" if standard else code
    return f"{prefix}: {described}" if prefix else described


# librdkafka's lines about a broker connection: "[rdkafka#producer-1] [thrd:host:9092/bootstrap]:
# host:9092/bootstrap: Failed to resolve 'host:9092': ... (after 1ms in state CONNECT)".
_LOG_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)*\[thrd:[^\]]*\]:\s*(\S+/(bootstrap|\d+):\s*)?")
_LOG_SUFFIX = re.compile(r"\s*\(after \d+ms in state \w+\)(, \d+ identical error\(s\) suppressed)?")
_CONNECTION_FACILITY = "FAIL"  # librdkafka's facility of a failed broker connection
# The logger librdkafka's lines go to (docs/connections.md names it).
LIBRDKAFKA_LOGGER = "airflow_sparklag.kafka.librdkafka"


class ClientLog:
    """librdkafka's log callback (the `logger` setting): each distinct line is logged once at its
    own level, repeats at DEBUG, and the last connection failure is kept as the cause that a
    "did not answer" error names (a mistyped host retried every 100 ms is 40 lines in 4 s)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._log = logging.getLogger(LIBRDKAFKA_LOGGER)
        self._secrets = list(secrets)
        self._seen: dict[str, int] = {}
        self._cause: str | None = None  # the last connection failure
        self._lock = threading.Lock()

    def log(self, level: int, fmt: str, facility: str, client: str, message: str) -> None:
        line = fmt % (facility, client, message)
        text = scrub(_LOG_SUFFIX.sub("", _LOG_PREFIX.sub("", message)), self._secrets)
        with self._lock:
            repeats = self._seen.get(text, 0)
            self._seen[text] = repeats + 1
            if len(self._seen) > 200:  # a long-lived client: forget, do not grow
                self._seen = {text: repeats + 1}
            if facility == _CONNECTION_FACILITY and level >= logging.WARNING:
                self._cause = text
        self._log.log(level if repeats == 0 else logging.DEBUG, "%s", scrub(line, self._secrets))

    def answered(self) -> None:
        """The cluster answered: an earlier connection failure is history, no cause."""
        with self._lock:
            self._cause = None

    def cause(self) -> str | None:
        """The last connection failure librdkafka logged since the cluster last answered,
        with how often it was seen. (Not "in the last N seconds": librdkafka logs a repeated
        failure once, so a handshake refused at the first connection is the cause still.)"""
        with self._lock:
            text = self._cause
            if text is None:
                return None
            count = self._seen.get(text, 1)
        return text + (f" (seen {count} times)" if count > 1 else "")


class KafkaErrors:
    """Our typed errors for one client's requests: what librdkafka returned, what its error
    callback and its log said meanwhile, without the secrets of ``config``. ``user_error_cb``,
    the user's own error callback, is still called."""

    def __init__(
        self,
        config: Mapping[str, Any],
        timeout: float,
        user_error_cb: Callable[[Any], Any] | None = None,
    ) -> None:
        self.servers = str(config["bootstrap.servers"])
        self.timeout = timeout
        self._config = config
        self._user_error_cb = user_error_cb
        self.secrets = kafka_secrets(config)
        self.client_log = ClientLog(self.secrets)
        self.oauth_failure: str | None = None  # why the oauth_cb failed, if it did
        # (when, code, text) of the last refusal; replaced whole, so read without a lock
        self._refusal: tuple[float, str, str] | None = None

    def describe(self, exc: BaseException) -> str:
        """What went wrong in ``exc``, never empty, scrubbed (librdkafka may quote a secret)."""
        return scrub(error_text(exc), self.secrets)

    def unavailable(self, what: str, detail: str = "") -> KafkaUnavailable:
        # What librdkafka saw says more than "Broker transport failure": it comes first.
        detail = "; ".join(part for part in (self.client_log.cause(), detail) if part)
        extra = f" ({detail})" if detail else ""
        return KafkaUnavailable(
            f"Kafka bootstrap servers {self.servers} did not answer {what} within "
            f"{self.timeout:g} s{extra}. Check that the brokers are up and reachable from "
            f"this host, and the security settings {WHERE_SETTINGS_GO}."
        )

    def on_error(self, error: Any) -> None:
        """librdkafka's error callback (served by ``poll``): keep the last refusal of our
        credentials, which requests themselves only report as a transport failure."""
        try:
            code = str(error.name())
            text = str(error.str())
        except Exception:  # not a KafkaError: nothing to learn from it
            code = text = ""
        if code in _AUTHENTICATION_CODES:
            self._refusal = (time.monotonic(), code, scrub(text, self.secrets))
        if self._user_error_cb is not None:
            self._user_error_cb(error)

    def _refused(self, code: str, text: str) -> KafkaError:
        if code == "_SSL":
            return KafkaError(
                f"Kafka {self.servers}: the TLS handshake failed (SSL error): {text}. "
                "Check security.protocol, ssl.ca.location and the client certificate settings "
                f"{WHERE_SETTINGS_GO}."
            )
        return KafkaError(
            f"Kafka refused the credentials for {self.servers} (SASL authentication "
            f"failed): {text}. Check sasl.mechanism, sasl.username and sasl.password "
            f"{WHERE_SETTINGS_GO}."
        )

    def refused_recently(self) -> KafkaError | None:
        refusal = self._refusal
        if refusal is None or time.monotonic() - refusal[0] > self.timeout + POLL_INTERVAL:
            return None
        return self._refused(refusal[1], refusal[2])

    def translate(self, exc: BaseException, what: str, topic: str | None = None) -> Exception:
        code = error_name(exc)
        text = self.describe(exc)
        if isinstance(exc, concurrent.futures.TimeoutError) or code in _UNAVAILABLE_CODES:
            refused = self.refused_recently()
            return refused or self.unavailable(what, text if code else "")
        where = f" for topic '{topic}'" if topic else ""
        if code in _AUTHENTICATION_CODES:
            return self._refused(code, text)
        if code in _AUTHORIZATION_CODES:
            return KafkaError(
                f"Kafka refused {what}{where} on {self.servers}: {text}. Grant the "
                f"principal Describe on the topic (and Read for exact time lag) or fix the "
                f"credentials."
            )
        if code in MISSING_TOPIC_CODES:
            return KafkaError(
                f"Topic '{topic}' does not exist on {self.servers} ({text}). Was it "
                f"deleted or renamed?"
            )
        return KafkaError(f"Kafka error during {what}{where} on {self.servers}: {text}")

    def unbuildable(self, exc: BaseException) -> KafkaConfigInvalid:
        """Why librdkafka refused the config; a SASL mechanism missing from the build (GSSAPI in
        the PyPI wheels) says which builds have it, not "recompile librdkafka"."""
        text = self.describe(exc)
        if "No provider for SASL mechanism" in text:
            mechanism = str(
                self._config.get("sasl.mechanism") or self._config.get("sasl.mechanisms")
            )
            built = re.search(r"Current build options: [A-Z_ ]+", text)
            return KafkaConfigInvalid(
                f"Kafka {self.servers}: this confluent-kafka cannot use SASL mechanism "
                f"{mechanism}: its librdkafka was built without it"
                f"{f' ({built.group(0).strip()})' if built else ''}. The PyPI wheels have no "
                "Kerberos (GSSAPI): use a confluent-kafka built against a librdkafka with Cyrus "
                "SASL (for example conda-forge's python-confluent-kafka), or another mechanism "
                "the cluster offers (SCRAM, OAUTHBEARER). See docs/connections.md, 'Kafka with "
                "Kerberos'."
            )
        return KafkaConfigInvalid(
            f"Cannot create a Kafka client for {self.servers}: "
            f"{text} (config: {redact_kafka_config(self._config)})"
        )

    def guarded_oauth_cb(self, callback: Callable[[str], Any]) -> Callable[[str], Any]:
        """``callback`` that remembers why it failed: librdkafka only says "OAuth token not
        set" after its own wait, never what the token provider (MSK IAM, an IdP) answered."""

        def oauth_cb(config_str: str) -> Any:
            try:
                return callback(config_str)
            except Exception as exc:
                self.oauth_failure = f"{type(exc).__name__}: {self.describe(exc)[:300]}"
                raise

        return oauth_cb

    def no_token(self) -> KafkaError | None:
        if self.oauth_failure is None:
            return None
        return KafkaError(
            f"Cannot get an OAuth token for Kafka {self.servers}: the oauth_cb token callback "
            f"failed ({self.oauth_failure}); check the token provider (MSK IAM role, identity "
            "provider) and the callback's config"
        )
