"""Resource quantities: values, canonical text (checked against Go), equality by value."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsandbox.api.quantity import (
    Format,
    Quantity,
    QuantityError,
    parse_quantity,
    quantities_equal,
)

# (input, what Go's resource.Quantity marshals it to) — produced by
# `go run ./hack/openapi/gojson hash` over a pod template holding these values
# (k8s.io/apimachinery v0.36.3).
GO_CANONICAL = [
    ("1", "1"),
    ("1.5", "1500m"),
    ("1024Mi", "1Gi"),
    ("500m", "500m"),
    ("1e3", "1e3"),
    ("0.5Gi", "512Mi"),
    ("0.25", "250m"),
    ("+1", "+1"),
    ("01Ki", "01Ki"),
    ("1E3", "1E3"),
    ("1000", "1k"),
    ("1.5Ki", "1536"),
    ("0.1n", "1n"),
    ("100", "100"),
    ("12e6", "12e6"),
    ("1.5e3", "1500"),
    ("-500m", "-500m"),
    ("2048", "2048"),
    ("1Mi", "1Mi"),
    ("0.0001", "100u"),
    ("5Ei", "5Ei"),
    ("1e-3", "1e-3"),
    ("7Ki", "7Ki"),
    ("8Ki", "8Ki"),
    ("0", "0"),
    ("0Mi", "0"),
    ("1.G", "1.G"),
    ("10e2", "1e3"),
    ("1024Ki", "1Mi"),
    ("1.1Ki", "1126400m"),
    ("0.5Ki", "512"),
    ("100E", "100E"),
    ("1.0", "1"),
    ("2.50", "2500m"),
    ("1000000", "1M"),
    ("999999999999999999", "999999999999999999"),
    ("9223372036854775807", "9223372036854775807"),
    ("1e18", "1e18"),
    ("12345678901234567890", "12345678901234567890"),
    ("0.000000001", "1n"),
    ("0.0000000001", "1n"),
    ("1n", "1n"),
    ("1000n", "1u"),
    ("1u", "1u"),
    ("1500u", "1500u"),
    ("3k", "3k"),
    ("3000k", "3M"),
    ("1Ti", "1Ti"),
    ("1.5Ti", "1536Gi"),
    ("2000Mi", "2000Mi"),
    ("-1Ki", "-1Ki"),
    ("-1024", "-1024"),
    ("-1.5Gi", "-1536Mi"),
    ("5e-1", "500e-3"),
    ("1e+3", "1e+3"),
    (".5", "500m"),
    ("5.", "5."),
    ("0.5m", "500u"),
    ("1m", "1m"),
    ("0001", "0001"),
    ("1E", "1E"),
    ("2P", "2P"),
    ("1000P", "1E"),
    ("1e0", "1e0"),
    ("10e-1", "1"),
    ("123e2", "12300"),
    ("1023Ki", "1023Ki"),
    ("1025Ki", "1025Ki"),
    ("1536Mi", "1536Mi"),
    ("3Gi", "3Gi"),
    ("0.1", "100m"),
    ("1234.5678", "1234567800u"),
    ("-0.1n", "-1n"),
    ("4096", "4096"),
]


@pytest.mark.parametrize(("text", "canonical"), GO_CANONICAL)
def test_canonical_form_matches_go(text: str, canonical: str) -> None:
    assert parse_quantity(text).canonical() == canonical


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        ("1Gi", Fraction(2**30)),
        ("1e3", Fraction(1000)),
        ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)),
        ("2.5Mi", Fraction(5 * 2**19)),
        ("-1.5", Fraction(-3, 2)),
        ("100n", Fraction(1, 10**7)),
        ("1e-9", Fraction(1, 10**9)),
        ("0.1n", Fraction(1, 10**9)),  # rounded up to one nano unit
        (" 2 ", Fraction(2)),
        (7, Fraction(7)),
    ],
)
def test_values(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text).value == value


def test_format_follows_the_suffix() -> None:
    assert parse_quantity("1Ki").format is Format.BINARY_SI
    assert parse_quantity("1k").format is Format.DECIMAL_SI
    assert parse_quantity("1e3").format is Format.DECIMAL_EXPONENT
    assert parse_quantity("1").format is Format.DECIMAL_SI
    # binary values below one are shown as decimal
    assert parse_quantity("0.0001Ki").format is Format.DECIMAL_SI


@pytest.mark.parametrize(
    "text", ["", "abc", "1x", "1KB", "1.2.3", "--1", "1e", "1Ki3", "1e3.5", "1 Gi"]
)
def test_invalid_quantities(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_non_numbers_are_rejected() -> None:
    with pytest.raises(QuantityError):
        parse_quantity(True)
    with pytest.raises(QuantityError):
        parse_quantity(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1", "1000m"),
        ("1Gi", "1024Mi"),
        ("1e3", "1k"),
        ("0.5", "500m"),
        ("1", 1),
        ("1Ki", "1024"),
        ("0", "0Gi"),
        ("+1", "1"),
        ("0.1n", "1n"),
    ],
)
def test_equal_by_value(a: str | int, b: str | int) -> None:
    assert parse_quantity(a) == parse_quantity(b)
    assert hash(parse_quantity(a)) == hash(parse_quantity(b))
    assert quantities_equal(a, b)


@pytest.mark.parametrize(("a", "b"), [("1", "1001m"), ("1Gi", "1G"), ("1k", "1Ki"), ("-1", "1")])
def test_not_equal(a: str, b: str) -> None:
    assert parse_quantity(a) != parse_quantity(b)
    assert not quantities_equal(a, b)


def test_quantities_equal_treats_none_as_zero_and_bad_text_as_text() -> None:
    assert quantities_equal(None, "0")
    assert not quantities_equal(None, "1")
    assert quantities_equal("lots", "lots")
    assert not quantities_equal("lots", "1")


def test_quantity_ordering_and_str() -> None:
    assert parse_quantity("500m") < parse_quantity("1")
    assert str(parse_quantity("1024Mi")) == "1Gi"
    assert Quantity(0).is_zero()


@settings(deadline=None)  # no wall-clock budget per example: a loaded machine is not a failure
@given(st.integers(min_value=-(10**15), max_value=10**15), st.sampled_from(["", "m", "k", "Ki"]))
def test_canonical_text_parses_back_to_the_same_value(number: int, suffix: str) -> None:
    q = parse_quantity(f"{number}{suffix}")
    assert parse_quantity(q.canonical()) == q
