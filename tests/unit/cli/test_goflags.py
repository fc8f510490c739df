"""Flags parse exactly as Go's flag package parses them, so upstream Deployment args work."""

from __future__ import annotations

import pytest

from agentsandbox.cli.goflags import (
    FlagError,
    FlagSet,
    HelpRequested,
    parse_duration,
    parse_int,
)


def flags() -> FlagSet:
    fs = FlagSet("prog")
    fs.add_bool("leader-elect", True, "elect")
    fs.add_bool("extensions", False, "ext")
    fs.add_string("metrics-bind-address", ":8080", "metrics")
    fs.add_int("kube-api-burst", 10, "burst")
    fs.add_float("kube-api-qps", -1.0, "qps")
    fs.add_duration("grace", 300.0, "grace")
    return fs


def test_defaults_apply_when_no_flags_are_given() -> None:
    values, rest = flags().parse([])
    assert values == {
        "leader-elect": True,
        "extensions": False,
        "metrics-bind-address": ":8080",
        "kube-api-burst": 10,
        "kube-api-qps": -1.0,
        "grace": 300.0,
    }
    assert rest == []


@pytest.mark.parametrize(
    "arg", ["--extensions", "-extensions", "--extensions=true", "-extensions=1"]
)
def test_boolean_flag_forms_that_mean_true(arg: str) -> None:
    assert flags().parse([arg])[0]["extensions"] is True


@pytest.mark.parametrize("arg", ["--leader-elect=false", "-leader-elect=0", "--leader-elect=F"])
def test_boolean_flag_forms_that_mean_false(arg: str) -> None:
    assert flags().parse([arg])[0]["leader-elect"] is False


def test_bare_boolean_never_takes_the_next_argument() -> None:
    values, rest = flags().parse(["--extensions", "false", "--leader-elect=false"])
    assert values["extensions"] is True
    assert values["leader-elect"] is True  # parsing stopped at the positional "false"
    assert rest == ["false", "--leader-elect=false"]


def test_value_flags_take_equals_or_the_next_argument_with_one_or_two_dashes() -> None:
    values, _ = flags().parse(
        ["-metrics-bind-address", "127.0.0.1:9000", "--kube-api-burst=20", "-kube-api-qps", "50"]
    )
    assert values["metrics-bind-address"] == "127.0.0.1:9000"
    assert values["kube-api-burst"] == 20
    assert values["kube-api-qps"] == 50.0


def test_double_dash_ends_flags() -> None:
    values, rest = flags().parse(["--extensions", "--", "--leader-elect=false"])
    assert values["leader-elect"] is True and rest == ["--leader-elect=false"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nope"], "flag provided but not defined: -nope"),
        (["--kube-api-burst"], "flag needs an argument: -kube-api-burst"),
        (["--kube-api-burst=ten"], 'invalid value "ten" for flag -kube-api-burst'),
        (["--extensions=yes"], 'invalid value "yes" for flag -extensions'),
        (["--grace=5"], "missing unit in duration"),
        (["---x"], "bad flag syntax: ---x"),
    ],
)
def test_bad_flags_give_one_clear_message(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=message):
        flags().parse(argv)


def test_help_is_requested_with_h_or_help() -> None:
    for arg in ("-h", "--help", "-help"):
        with pytest.raises(HelpRequested):
            flags().parse([arg])
    assert "-kube-api-burst int" in flags().usage()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m", 300.0),
        ("30s", 30.0),
        ("1.5h", 5400.0),
        ("2h45m", 9900.0),
        ("300ms", 0.3),
        ("0", 0.0),
        ("-1s", -1.0),
        ("1m30s", 90.0),
        ("10us", 1e-5),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "+", "-", "5", "1x", "s"])
def test_bad_go_durations_are_a_value_error(text: str) -> None:
    """Go's time.ParseDuration refuses these; an empty value once raised IndexError."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("10", 10), ("0x10", 16), ("010", 8), ("-3", -3), ("1_000", 1000), ("0b11", 3)],
)
def test_go_integers(text: str, value: int) -> None:
    assert parse_int(text) == value
