"""Rendered text in, typed values out: the one place that reads user-given parameters (templated
fields, DAG params, CLI flags), refusing what it cannot read with an
:class:`~airflow_sparklag.errors.InvalidParameter` naming the parameter (docs/names.md).

The core's option types stay strict: each field names its reader here (:func:`option`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import datetime
import difflib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from airflow_sparklag.checkpoint_files import LATEST_TIME_MS
from airflow_sparklag.errors import InvalidParameter, UnsupportedStorageURL, UsageError
from airflow_sparklag.location import Location
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.redact import shown

TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})
NONE_WORDS = frozenset({"", "none", "null"})
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_Value = TypeVar("_Value")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")


def invalid(name: str, problem: str) -> InvalidParameter:
    """The error for parameter ``name``: ``"<name>: <problem>"``."""
    return InvalidParameter(problem, parameter=name)


def renamed(name: str, renames: Mapping[str, str], where: str = "") -> str:
    """``name``, or its new name with a DeprecationWarning (docs/names.md)."""
    new = renames.get(name)
    if new is None:
        return name
    import warnings

    place = f" {where}" if where else ""
    message = f"{name!r} is deprecated{place}: use {new!r} (docs/names.md)"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    return new


def is_none(value: Any) -> bool:
    """None, or text a template renders for "nothing" ("", "None", "null")."""
    return value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS)


def _optional(read: Callable[..., _Value]) -> Callable[..., _Value | None]:
    """``read``, except that "nothing" (:func:`is_none`) is None."""

    def optional(name: str, value: Any, **limits: Any) -> _Value | None:
        return None if is_none(value) else read(name, value, **limits)

    return optional


# -- scalars ---------------------------------------------------------------------------------


def boolean(name: str, value: Any) -> bool:
    """True/False, or their text spellings (true/false, yes/no, on/off, 1/0, any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise invalid(name, f"must be true or false, got {shown(value)}")


optional_boolean = _optional(boolean)


def number(name: str, value: Any) -> float:
    """A finite number (int, float or numeric text); bools, nan and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise invalid(name, f"must be a number, got {shown(value)}")
    try:
        result = float(value)
    except ValueError:
        raise invalid(name, f"must be a number, got {shown(value)}") from None
    if not math.isfinite(result):
        raise invalid(name, f"must be a finite number, got {shown(value)}")
    return result


def duration(name: str, value: Any) -> float:
    """Seconds >= 0: a number, numeric text, or text with a unit (``500ms``, ``90s``, ``5m``,
    ``1h``, ``1d``), or a ``timedelta``."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str) and not is_none(value):
        match = _DURATION.match(value)
        if match is None:
            raise invalid(name, f"must be a duration such as 60, 90s, 5m or 1h, got {shown(value)}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        seconds = number(name, value)
    if not math.isfinite(seconds) or seconds < 0:
        raise invalid(name, f"must be a duration of 0 seconds or more, got {shown(value)}")
    return seconds


def positive_duration(name: str, value: Any) -> float:
    """A duration above 0 seconds (a timeout, an interval)."""
    seconds = duration(name, value)
    if seconds <= 0:
        raise invalid(name, f"must be more than 0 seconds, got {shown(value)}")
    return seconds


optional_duration = _optional(duration)


optional_positive_duration = _optional(positive_duration)


def count(name: str, value: Any, *, minimum: int = 0) -> int:
    """A whole number >= ``minimum`` (int or its text; ``5.0`` is 5, ``5.5`` is refused)."""
    result = number(name, value)
    if not result.is_integer():
        raise invalid(name, f"must be a whole number, got {shown(value)}")
    if result < minimum:
        raise invalid(name, f"must be {minimum} or more, got {shown(value)}")
    return int(result)


optional_count = _optional(count)


def batches(name: str, value: Any) -> int:
    """A number of batches: a whole number >= 1."""
    return count(name, value, minimum=1)


def moment(name: str, value: Any) -> float | None:
    """A point in time as epoch seconds: a datetime, ISO-8601 text, or epoch seconds or
    milliseconds (a number above 1e11 is taken as milliseconds). None/"" -> None."""
    if is_none(value):
        return None
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return _epoch(name, value, aware.timestamp())
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = number(name, text)
        except InvalidParameter:
            try:
                parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise invalid(
                    name, f"must be a datetime, ISO-8601 text or epoch seconds, got {shown(value)}"
                ) from None
            return moment(name, parsed)
    else:
        seconds = number(name, value)
    return _epoch(name, value, seconds / 1000.0 if seconds > 1e11 else seconds)


# The last second of year 9999 (checkpoint's bound on batch times): later times cannot be
# printed as datetimes nor sent to Kafka.
_LATEST_MOMENT = float(LATEST_TIME_MS // 1000)


def _epoch(name: str, value: Any, seconds: float) -> float:
    """``seconds`` when it is a time from 1970 to 9999. Kafka reads a negative timestamp as
    a code (-1 latest, -2 earliest), so a time before 1970 is never passed on."""
    if seconds < 0:
        raise invalid(name, f"must not be before 1970, got {shown(value)}")
    if seconds > _LATEST_MOMENT:
        raise invalid(name, f"must be before the year 10000, got {shown(value)}")
    return seconds


# -- structures --------------------------------------------------------------------------------


def _literal(name: str, text: str) -> Any:
    """A JSON or Python literal rendered as text (Airflow renders a dict as ``{'a': 1}``)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise invalid(name, f"could not read {shown(text)} as a list or mapping") from None


def mapping(name: str, value: Any) -> dict[str, Any] | None:
    """A dict, or a dict rendered as JSON or Python text; None/"" -> None."""
    if is_none(value):
        return None
    if isinstance(value, str):
        value = _literal(name, value.strip())
    if not isinstance(value, Mapping):
        raise invalid(name, f"must be a mapping of names to values, got {shown(value)}")
    for key in value:
        if not isinstance(key, str):
            raise invalid(name, f"keys must be names, got {shown(key)}")
    return dict(value)


def strings(name: str, value: Any) -> list[str]:
    """A list of non-empty strings: a list/tuple, a list rendered as text, comma-separated
    text, or one string. None/"" -> []."""
    if is_none(value):
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "(")):
            value = _literal(name, text)
        else:
            value = [part.strip() for part in text.split(",")]
    if isinstance(value, (Mapping, bytes)) or not isinstance(value, Iterable):
        raise invalid(name, f"must be a list of names, got {shown(value)}")
    items = list(value)
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise invalid(name, f"every item must be a non-empty string, got {shown(item)}")
    return [item.strip() for item in items]


def source_map(name: str, value: Any) -> dict[str, str]:
    """Source (its index, an int read as its text, or its ``DataStreamReader.name()``) -> a
    name (a connection id, bootstrap servers): a dict or its text. None/"" -> {}."""
    if isinstance(value, Mapping):
        value = {
            str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v
            for k, v in value.items()
        }
    result: dict[str, str] = {}
    for source, target in (mapping(name, value) or {}).items():
        if not source.strip():
            raise invalid(name, "a source must be its index or name, got ''")
        result[source.strip()] = text(f"{name}.{source.strip()}", target)
    return result


def source_assignment(name: str, value: Any) -> tuple[str, str]:
    """``SOURCE=VALUE`` (e.g. ``1=broker-b:9092``): the source and its value."""
    source, sep, target = str(value).partition("=")
    if not sep or not source.strip() or not target.strip():
        raise invalid(name, f"must be SOURCE=VALUE, e.g. 1=broker-b:9092, got {shown(value)}")
    return source.strip(), target.strip()


def source_configs(
    name: str, pairs: Iterable[tuple[str, str]], config: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each source's Kafka config: the main ``config`` with its servers (docs/multi-cluster.md)."""
    mapped: dict[str, dict[str, Any]] = {}
    for source, servers in pairs:
        if source in mapped:
            raise invalid(name, f"source {source} is given twice")
        mapped[source] = {**config, "bootstrap.servers": servers}
    return mapped


def health_names(name: str, value: Any) -> tuple[Health, ...]:
    """Verdict names (``OK``, ``LAGGING``, ...; any case) in any form :func:`strings` reads."""
    verdicts: list[Health] = []
    for item in strings(name, value):
        try:
            verdicts.append(Health(item.upper()))
        except ValueError:
            known = ", ".join(h.value for h in Health)
            raise invalid(name, f"unknown verdict {item!r}; known: {known}") from None
    return tuple(dict.fromkeys(verdicts))


def text(name: str, value: Any) -> str:
    """A non-empty string (a name, an id)."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise invalid(name, f"must be a non-empty string, got {shown(value)}")


optional_text = _optional(text)


def conn_id(name: str, value: Any) -> str | None:
    """An Airflow connection id, or None (None, or a template rendered to "")."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return text(name, value)


def location(name: str, value: Any) -> Location:
    """One checkpoint location, parsed once; every refusal an ``InvalidParameter``."""
    if isinstance(value, str) and value.strip().startswith(("[", "(")):
        # Not a list after all: a path that starts with a bracket.
        with contextlib.suppress(InvalidParameter):
            value = _literal(name, value.strip())
    try:
        return Location.parse(value, name)
    except UnsupportedStorageURL as exc:  # credentials in it, no bucket: a parameter error too
        raise invalid(name, str(exc)) from None


optional_location = _optional(location)


def locations(name: str, value: Any) -> list[str]:
    """Checkpoint locations: a list, a list rendered as text, or one location."""
    return list(dict.fromkeys(strings(name, value)))


# -- the core's option types -------------------------------------------------------------------


def ratio(name: str, value: Any) -> float:
    """A ratio >= 0 (``0.25``, ``1.5``): a finite number or its text."""
    amount = number(name, value)
    if amount < 0:
        raise invalid(name, f"must be 0 or more, got {shown(value)}")
    return amount


def threshold_reader(key: str) -> Callable[[str, Any], Any]:
    """The reader of threshold ``key``: a duration for the ``*_seconds`` limits, a ratio for
    the ``*_ratio`` ones, else a whole count (records, batches)."""
    if key.endswith("_seconds"):
        return duration
    if key.endswith("_ratio"):
        return ratio
    return count


def _unknown_key(name: str, key: str, known: Iterable[str]) -> InvalidParameter:
    """The error for an unknown key: the closest known one suggested, then all of them."""
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return invalid(name, f"unknown threshold {key!r}{hint} (known: {', '.join(sorted(known))})")


def thresholds(name: str, value: Any) -> Thresholds:
    """``Thresholds`` from a dict (or its text); None leaves a limit at its default."""
    given = mapping(name, value) or {}
    known = list(Thresholds.__dataclass_fields__)
    for key in given:
        if key not in known:
            raise _unknown_key(name, key, known)
    values = {
        key: threshold_reader(key)(f"{name}.{key}", raw)
        for key, raw in given.items()
        if not is_none(raw)
    }
    try:
        return Thresholds(**values)
    except (TypeError, ValueError) as exc:
        raise invalid(name, str(exc)) from None


Options = TypeVar("Options")


def option(
    default: Any = dataclasses.MISSING,
    *,
    read: Any,
    doc: str,
    flag: str | None,
    factory: Any = dataclasses.MISSING,
) -> Any:
    """A field of an options dataclass, declared once: its default, the reader of its rendered
    text (``read(name, value)``, one of this module's), its one-line ``doc`` and its CLI
    ``flag`` (None: read from other flags). Operators, sensors, triggers and the CLI take every
    field from the declaration, so a new option is this one field plus its docs line."""
    return dataclasses.field(
        default=default,
        default_factory=factory,
        metadata={"read": read, "doc": doc, "flag": flag},
    )


def take(
    names: Iterable[str],
    build: Callable[..., Options],
    given: dict[str, Any],
    options: Options | None,
) -> Options:
    """``options``, or ``build(**fields)`` from the fields ``names`` taken out of ``given``
    (the rest is someone else's, e.g. a ``Session``'s); both: a TypeError."""
    values = {name: given.pop(name) for name in names if name in given}
    if options is not None and values:
        raise TypeError(f"give either options or {', '.join(sorted(values))}, not both")
    return options or build(**values)


def options(kind: type[Options], values: Mapping[str, Any]) -> Options:
    """An options object from rendered values, each field given read by its declared reader."""
    read = {
        f.name: f.metadata["read"](f.name, values[f.name])
        for f in dataclasses.fields(kind)  # type: ignore[arg-type]
        if f.name in values
    }
    try:
        return kind(**read)
    except InvalidParameter:
        raise
    except (TypeError, ValueError) as exc:
        raise invalid(kind.__name__, str(exc)) from None


# -- command-line flags (the CLI and the Spark fleet scan) --------------------------------------


class FlagType:
    """An argparse type from a reader of this module (``read``, which ``--help`` looks at for
    the value's kind: DURATION, N); the error names the flag."""

    def __init__(self, name: str, read: Callable[[str, Any], Any]) -> None:
        self.__name__ = name
        self.read = read

    def __call__(self, text: str) -> Any:
        try:
            return self.read(flag_of(self.__name__), text)
        except InvalidParameter as exc:  # argparse names the flag itself
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


# The kind of value a reader takes, as --help names it (``--max-wait DURATION``).
VALUE_KINDS: dict[Any, str] = {
    **dict.fromkeys(
        (duration, positive_duration, optional_duration, optional_positive_duration), "DURATION"
    ),
    **dict.fromkeys((count, optional_count, batches), "N"),
    **dict.fromkeys((number, ratio), "NUMBER"),
}


def flag_group(command: Any, title: str) -> Any:
    """``command``'s argument group ``title`` (a ``--help`` section), made on first use."""
    for group in command._action_groups:
        if group.title == title:
            return group
    return command.add_argument_group(title)


class FlagHelp(argparse.RawDescriptionHelpFormatter):
    """Each flag's default (or none) at the end of its help line, its value's kind in its
    name (DURATION, N) and the epilog as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = action.help or "", action.default
        if not action.option_strings or default is argparse.SUPPRESS or "default" in text:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            default = "off"
        elif default is None or default == []:
            default = "none"
        elif _value_kind(action) == "DURATION":
            default = duration_text(float(default))
        return f"{text} (default: {default})"

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        return _value_kind(action) or super()._get_default_metavar_for_optional(action)


def _value_kind(action: argparse.Action) -> str | None:
    return VALUE_KINDS.get(getattr(action.type, "read", None))


def duration_text(seconds: float) -> str:
    """``600.0`` as ``10m``, ``90.0`` as ``90s``: how the flags take durations."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def flag_of(name: str) -> str:
    """``max_lag_seconds`` -> ``--max-lag-seconds``: one name everywhere (docs/names.md)."""
    return "--" + name.replace("_", "-")


# Old flag -> its name now: still read for one release, with a line on stderr (docs/names.md).
RENAMED_FLAGS = {
    "--max-lag": "--max-lag-records-per-partition",
    "--max-total-lag": "--max-lag-records-total",
    "--max-commit-age": "--max-commit-age-seconds",
    "--max-in-flight": "--max-in-flight-seconds",
    "--min-time-to-loss": "--min-time-to-loss-seconds",
    "--min-time-to-breach": "--min-time-to-breach-seconds",
    "--exact": "--exact-time-lag",
    "--to": "--snapshot-root",
    "--snapshot-to": "--snapshot-root",
    "--archive": "--archive-root",
    "--after-batch": "--after-batch-id",
    "--after-time": "--after-commit-time",
}


def renamed_flags(prog: str, args: Iterable[str]) -> list[str]:
    """``args`` with each old flag renamed, saying so on stderr, once a flag."""
    result: list[str] = []
    said: set[str] = set()
    for arg in args:
        flag, sep, value = arg.partition("=")
        new = RENAMED_FLAGS.get(flag) if arg.startswith("--") else None
        if new is not None and flag not in said:
            said.add(flag)
            print(f"{prog}: {flag} is deprecated: use {new} (docs/names.md)", file=sys.stderr)
        result.append(f"{new}{sep}{value}" if new else arg)
    return result


class FlagParser(argparse.ArgumentParser):
    """argparse whose errors are a :class:`UsageError` (exit 64; argparse's 2 would read
    "stalled"): the reason, "did you mean" for a mistyped flag or choice, the usage line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", FlagHelp)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        args = renamed_flags(self.prog, sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._given(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> Any:
        usage = " ".join(self.format_usage().split())
        raise UsageError(f"{message}{self._did_you_mean(message)}\n{usage}")

    def _did_you_mean(self, message: str) -> str:
        """``; did you mean --max-lag-seconds?`` for an unknown flag or choice close to one."""
        if message.startswith("unrecognized arguments: "):
            words = [w.split("=")[0] for w in message.split(": ", 1)[1].split() if w[:1] == "-"]
            known = list(self._option_string_actions)
        elif "invalid choice: " in message and "choose from" in message:
            words = re.findall(r"invalid choice: '([^']*)'", message)
            known = re.findall(r"'([^']*)'", message.split("choose from", 1)[1])
        else:
            return ""
        close = [difflib.get_close_matches(word, known, n=1) for word in words]
        return "".join(f"; did you mean {found[0]}?" for found in close if found)

    def _given(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The subcommand given (it knows its own flags), else this parser."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen: argparse.ArgumentParser = action.choices.get(
                    getattr(parsed, action.dest, None) or "", self
                )
                return chosen
        return self


def option_flags(command: Any, kind: type, group: str | None = None) -> None:
    """A flag per field of an options dataclass that declares one (:func:`option`): a switch
    for a boolean, a repeatable flag for a list, else a value read by the field's reader."""
    target = flag_group(command, group) if group else command
    for f in dataclasses.fields(kind):
        flag, read = f.metadata["flag"], f.metadata["read"]
        if flag is None:
            continue
        factory: Any = f.default_factory
        default = f.default if f.default is not dataclasses.MISSING else factory()
        spec: dict[str, Any] = {"dest": f.name, "help": f.metadata["doc"].replace("%", "%%")}
        if read in (boolean, optional_boolean):
            spec.update(action="store_true", default=default)
        elif read is locations:
            spec.update(action="append", type=FlagType(f.name, location), default=list(default))
        else:
            spec.update(type=FlagType(f.name, read), default=default)
        target.add_argument(flag, **spec)


def from_flags(kind: type[Options], flags: Any, **given: Any) -> Options:
    """The options object of the flags :func:`option_flags` made, and the fields ``given``."""
    for f in dataclasses.fields(kind):  # type: ignore[arg-type]
        if f.metadata["flag"] is not None:
            given[f.name] = getattr(flags, f.name)
    return kind(**given)


def connection_flags(command: Any, *bootstrap: str) -> None:
    """The Kafka and storage flags of the CLI and the Spark fleet scan (``bootstrap``: the
    bootstrap servers flag's names)."""
    kafka = flag_group(command, "Kafka")
    kafka.add_argument(
        *bootstrap,
        dest="bootstrap_servers",
        metavar="SERVERS",
        help="Kafka bootstrap servers host:port,... (default: bootstrap.servers of --kafka-config)",
    )
    kafka.add_argument(
        "--kafka-config", metavar="FILE", help="librdkafka settings: a JSON or .properties file"
    )
    kafka.add_argument(
        "--source-servers",
        action="append",
        type=FlagType("source_servers", source_assignment),
        metavar="SOURCE=SERVERS",
        help="measure a source (its index or name) against another cluster, the rest of "
        "--kafka-config unchanged; repeatable (docs/multi-cluster.md)",
    )
    storage = flag_group(command, "storage")
    storage.add_argument(
        "--s3-endpoint-url",
        metavar="URL",
        help="S3 endpoint, e.g. http://minio:9000 (default: AWS's; credentials: the AWS "
        "default chain)",
    )
    storage.add_argument(
        "--s3-region", metavar="REGION", help="S3 region (default: the AWS default chain's)"
    )
    storage.add_argument(
        "--webhdfs-url",
        action="append",
        metavar="URL",
        help="WebHDFS URL http://namenode:9870 (repeat for HA)",
    )
    storage.add_argument(
        "--hdfs-user", metavar="USER", help="user name for WebHDFS (simple authentication)"
    )
    storage.add_argument(
        "--hdfs-ca-bundle",
        metavar="PEM",
        help="CA bundle (PEM) of HTTPS NameNodes (https:// --webhdfs-url)",
    )
    kerberos = flag_group(command, "Kerberos")
    kerberos.add_argument(
        "--hdfs-kerberos",
        action="store_true",
        help="Kerberized HDFS: log in to WebHDFS with SPNEGO, from the ticket cache kinit left "
        "(KRB5CCNAME) unless --hdfs-principal and --hdfs-keytab are given",
    )
    kerberos.add_argument(
        "--hdfs-principal",
        metavar="PRINCIPAL",
        help="Kerberos principal, e.g. spark@EXAMPLE.COM (the Spark scan: spark-submit's "
        "--principal unless given)",
    )
    kerberos.add_argument(
        "--hdfs-keytab", metavar="FILE", help="keytab of --hdfs-principal (renewed from it)"
    )


# The storage options (``s3_options``, ``webhdfs_options``) key by key -> the flag that sets
# it: read by :func:`storage_flags`; a core message naming an option is shown with its flag.
STORAGE_FLAGS = {
    "s3_options": {
        "endpoint_url": "--s3-endpoint-url",
        "region_name": "--s3-region",
        "reader": "--s3-reader",
    },
    "webhdfs_options": {
        "url": "--webhdfs-url",
        "user": "--hdfs-user",
        "kerberos": "--hdfs-kerberos",
        "principal": "--hdfs-principal",
        "keytab": "--hdfs-keytab",
        "verify": "--hdfs-ca-bundle",
        "token_file": "--hdfs-token-file",
    },
}


def storage_flags(flags: Any) -> dict[str, Any]:
    """The storage options given by flags (:data:`STORAGE_FLAGS`)."""
    found: dict[str, Any] = {}
    for options, keys in STORAGE_FLAGS.items():
        values = {
            key: getattr(flags, flag[2:].replace("-", "_"), None) for key, flag in keys.items()
        }
        found[options] = {key: value for key, value in values.items() if value}
    urls = found["webhdfs_options"].get("url")
    if urls and len(urls) == 1:
        found["webhdfs_options"]["url"] = urls[0]
    return found
