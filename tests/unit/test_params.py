"""params.py: rendered text in, typed values out, or an error naming the parameter.

One table per class of input the issue found dangerous: switches that ran a real migration
("Ture", ""), durations that switched a guard off ("nan", "-60"), verdict lists that never
matched ("LAGGIN", a list rendered as text), thresholds rendered as text or holding a list,
a location given as a list.
"""

from __future__ import annotations

import datetime
import math

import pytest

from airflow_sparklag import params
from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("True", True),
        ("false", False),
        (" yes ", True),
        ("OFF", False),
        ("1", True),
        (0, False),
    ],
)
def test_boolean_accepts_true_false_spellings(value: object, expected: bool) -> None:
    assert params.boolean("dry_run", value) is expected


@pytest.mark.parametrize("value", ["Ture", "", "None", "2", 2, None, [], "y e s", 1.5])
def test_boolean_refuses_everything_else_naming_the_parameter(value: object) -> None:
    with pytest.raises(InvalidParameter, match=r"^dry_run: must be true or false") as caught:
        params.boolean("dry_run", value)
    assert caught.value.parameter == "dry_run"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (60, 60.0),
        ("60", 60.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("2d", 172800.0),
        (0, 0.0),
        (datetime.timedelta(minutes=2), 120.0),
    ],
)
def test_duration_reads_numbers_and_units(value: object, seconds: float) -> None:
    assert params.duration("quiet_period", value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", ["nan", "-60", -1, "inf", float("nan"), math.inf, "", None, "5 weeks", True, [60]]
)
def test_duration_refuses_non_finite_negative_and_garbage(value: object) -> None:
    with pytest.raises(InvalidParameter, match=r"^quiet_period: "):
        params.duration("quiet_period", value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["LAGGING", "stopped"], (Health.LAGGING, Health.STOPPED)),
        ("['STOPPED', 'LAGGING']", (Health.STOPPED, Health.LAGGING)),
        ('["DATA_LOSS"]', (Health.DATA_LOSS,)),
        ("LAGGING", (Health.LAGGING,)),
        ("LAGGING, STALLED", (Health.LAGGING, Health.STALLED)),
        (("OK",), (Health.OK,)),
        ([], ()),
    ],
)
def test_health_names_read_lists_in_any_rendered_form(value: object, expected: tuple) -> None:
    assert params.health_names("fail_on", value) == expected


@pytest.mark.parametrize("value", [["LAGGIN"], "['STOPED']", "HEALTHY", [1], "[", {"a": 1}])
def test_health_names_refuse_unknown_verdicts(value: object) -> None:
    with pytest.raises(InvalidParameter, match=r"^fail_on: "):
        params.health_names("fail_on", value)


def test_unknown_verdict_message_lists_the_known_ones() -> None:
    with pytest.raises(InvalidParameter, match="LAGGING") as caught:
        params.health_names("accept", ["HEALTHY"])
    assert "'HEALTHY'" in str(caught.value) and "DATA_LOSS" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"max_lag_seconds": 60}, Thresholds(max_lag_seconds=60.0)),
        ('{"max_lag_seconds": "60"}', Thresholds(max_lag_seconds=60.0)),
        (
            "{'max_lag_records_total': 1000, 'window': 5}",
            Thresholds(max_lag_records_total=1000, window=5),
        ),
        ({"max_lag_seconds": None, "allowed_lag": "2"}, Thresholds(allowed_lag=2)),
        (None, Thresholds()),
        ("", Thresholds()),
    ],
)
def test_thresholds_from_dicts_and_rendered_text(value: object, expected: Thresholds) -> None:
    assert params.thresholds("thresholds", value) == expected


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"max_lag_seconds": [60]}, "thresholds.max_lag_seconds"),
        ({"max_lag_seconds": "nan"}, "thresholds.max_lag_seconds"),
        ({"max_lag_seconds": "inf"}, "thresholds.max_lag_seconds"),
        ({"max_lag_seconds": -5}, "thresholds.max_lag_seconds"),
        ({"max_lag_seconds": True}, "thresholds.max_lag_seconds"),
        ({"max_lagg": 5}, "thresholds"),
        ({"window": 2.5}, "thresholds.window"),  # a count: the field is named
        ("max_lag_seconds=60", "thresholds"),
        ("[1, 2]", "thresholds"),
        ([("max_lag_seconds", 60)], "thresholds"),
    ],
)
def test_thresholds_refuse_bad_values_naming_the_field(value: object, named: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        params.thresholds("thresholds", value)
    assert str(caught.value).startswith(f"{named}: ")


@pytest.mark.parametrize("value", [["/ck/a", "/ck/b"], ("/ck/a",), "", None, 5, {"a": 1}])
def test_location_must_be_one_path(value: object) -> None:
    with pytest.raises(InvalidParameter, match=r"^location: "):
        params.location("location", value)


def test_locations_read_lists_text_and_single_values() -> None:
    assert params.locations("locations", "['/a', '/b', '/a']") == ["/a", "/b"]
    assert params.locations("locations", "/a") == ["/a"]
    assert params.locations("locations", ["/a"]) == ["/a"]
    assert params.locations("locations", "") == []
    with pytest.raises(InvalidParameter, match=r"^locations: "):
        params.locations("locations", [1, 2])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("None", None),
        (1_700_000_000, 1_700_000_000.0),
        (1_700_000_000_000, 1_700_000_000.0),  # milliseconds
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        (datetime.datetime(2023, 11, 14, 22, 13, 20), 1_700_000_000.0),
    ],
)
def test_moment(value: object, expected: float | None) -> None:
    assert params.moment("target_time", value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "nan",
        -5,
        [1],
        # Kafka reads -1 as LATEST: a catch-up target then meant "the log end", silently
        "1969-12-31T23:59:59.999Z",
        "0001-01-01",  # was sent to Kafka as -62135596800000 ms
        datetime.datetime(1969, 12, 31, 23, 59, 59),
        "1e20",  # was an internal error (OSError) printing it, or "int too big" from Kafka
        "10000-01-01T00:00:00",
    ],
)
def test_moment_refuses_what_is_not_a_time(value: object) -> None:
    with pytest.raises(InvalidParameter, match=r"^target_time: "):
        params.moment("target_time", value)


def test_counts_are_whole_and_bounded() -> None:
    assert params.count("history", "5", minimum=1) == 5
    assert params.count("history", 5.0, minimum=1) == 5
    for bad in ("0", "5.5", "nan", "five", True):
        with pytest.raises(InvalidParameter, match=r"^history: "):
            params.count("history", bad, minimum=1)


def test_check_options_name_each_parameter() -> None:
    options = params.options(
        CheckOptions,
        {
            "thresholds": '{"max_lag_seconds": 30}',
            "history": "5",
            "exact_time_lag": "true",
            "read_committed": "None",
        },
    )
    assert options.thresholds.max_lag_seconds == 30
    assert (options.history, options.exact_time_lag, options.read_committed) == (5, True, None)
    for kwargs, name in [
        ({"history": "0"}, "history"),
        ({"exact_time_lag": "maybe"}, "exact_time_lag"),
        ({"read_committed": "Ture"}, "read_committed"),
        ({"thresholds": "{'max_lag_seconds': 'nan'}"}, "thresholds.max_lag_seconds"),
        ({"runs_every": "0"}, "runs_every"),
        ({"run_grace": "5m"}, "run_grace"),
    ]:
        with pytest.raises(InvalidParameter) as caught:
            params.options(CheckOptions, kwargs)
        assert caught.value.parameter == name
