"""Kubernetes resource quantities ("500m", "1Gi", "1e3"): parsing, value and canonical form.

Semantics follow ``k8s.io/apimachinery/pkg/api/resource``: values are exact and rounded away
from zero to a whole number of nano units; the format (binary ``Ki``..``Ei``, decimal SI
``n``..``E``, or ``e``-exponent) comes from the suffix; :meth:`Quantity.canonical` is what
``Quantity.String()`` and JSON marshalling produce, including Kubernetes' habit of keeping the
original text when it is already canonical ("+1" stays "+1").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

__all__ = ["Format", "Quantity", "QuantityError", "parse_quantity", "quantities_equal"]

_NANO = 10**9
_MAX_INT64 = 2**63 - 1

_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {e // 10: s for s, e in _BINARY_SUFFIXES.items()}

# sign, digits, optional fraction, then the suffix (checked separately, as Kubernetes does).
_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_SUFFIX = re.compile(r"[eEinumkKMGTP]*[+-]?[0-9]*")


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


class Format(Enum):
    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact quantity: ``nanos`` nano units (10**-9), with the format it was written in.

    Equality and hashing are by value (``Quantity.Cmp``), as in ``equality.Semantic``.
    """

    nanos: int
    format: Format = Format.DECIMAL_SI
    text: str | None = field(default=None)  # original text when Kubernetes would keep it

    @property
    def value(self) -> Fraction:
        return Fraction(self.nanos, _NANO)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.nanos == other.nanos
        return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        return self.nanos < other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __str__(self) -> str:
        return self.canonical()

    def is_zero(self) -> bool:
        return self.nanos == 0

    def canonical(self) -> str:
        """``Quantity.String()``: the text Kubernetes writes back for this quantity."""
        if self.text:
            return self.text
        if self.nanos == 0:
            return "0"
        fmt = self.format
        if fmt is Format.BINARY_SI and (abs(self.nanos) < 1024 * _NANO or self.nanos % _NANO != 0):
            fmt = Format.DECIMAL_SI  # small or fractional binary values print as decimal
        if fmt is Format.BINARY_SI:
            amount, times = _remove_factors(self.nanos // _NANO, 1024)
            return f"{amount}{_BINARY_BY_EXPONENT.get(times, '')}"
        amount, exponent = _remove_factors(self.nanos, 10)
        exponent -= 9
        while exponent % 3:
            amount *= 10
            exponent -= 1
        if fmt is Format.DECIMAL_EXPONENT:
            return f"{amount}e{exponent}" if exponent else str(amount)
        return f"{amount}{_DECIMAL_BY_EXPONENT.get(exponent, '')}"


def _remove_factors(value: int, base: int) -> tuple[int, int]:
    times = 0
    sign = -1 if value < 0 else 1
    value = abs(value)
    while value >= base and value % base == 0:
        value //= base
        times += 1
    return sign * value, times


def parse_quantity(raw: str | int | Quantity) -> Quantity:
    """Parse a quantity as ``resource.ParseQuantity`` does (JSON numbers parse as their text)."""
    if isinstance(raw, Quantity):
        return raw
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise QuantityError(f"not a quantity: {raw!r}")
    text = str(raw).strip() if isinstance(raw, int) else raw.strip()
    if not text:
        raise QuantityError("empty quantity")
    if text == "0":
        return Quantity(0, Format.DECIMAL_SI, "0")
    m = _NUMBER.fullmatch(text)
    assert m is not None  # the pattern matches any string
    sign_text, int_text, frac_text, suffix = m.groups()
    stripped = int_text.lstrip("0")
    if not stripped and frac_text is None and not suffix:
        return Quantity(0, Format.DECIMAL_SI)  # "000", "+0": all zeros
    num = stripped or "0"
    denom = frac_text or ""
    if not _SUFFIX.fullmatch(suffix):
        raise QuantityError(f"quantity {text!r} has an invalid suffix")
    base, exponent, fmt = _interpret(suffix, text)
    negative = sign_text == "-"

    magnitude = Fraction(int(num + denom), 10 ** len(denom))
    magnitude *= Fraction(2) ** exponent if base == 2 else Fraction(10) ** exponent
    nanos = _ceil(magnitude * _NANO)
    if fmt is Format.BINARY_SI and nanos > _MAX_INT64 * _NANO:
        nanos = _MAX_INT64 * _NANO
    if fmt is Format.BINARY_SI and 0 < nanos < _NANO:
        fmt = Format.DECIMAL_SI
    if negative:
        nanos = -nanos
    return Quantity(nanos, fmt, text if _keeps_text(num, denom, exponent, fmt) else None)


def _interpret(suffix: str, text: str) -> tuple[int, int, Format]:
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        try:
            return 10, int(suffix[1:], 10), Format.DECIMAL_EXPONENT
        except ValueError:
            pass
    raise QuantityError(f"quantity {text!r} has an invalid suffix")


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _keeps_text(num: str, denom: str, exponent: int, fmt: Format) -> bool:
    """Kubernetes' fast path keeps the input text when it is already canonical."""
    if fmt is Format.BINARY_SI:
        if exponent < 0 or denom:
            return False
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        if precision < 0:
            return False
        value = int(num)
        return (
            value < 2**63 and (value << exponent) < 2**63 and exponent % 10 == 0 and value & 7 != 0
        )
    precision = 18 - (len(num) + len(denom))
    scale = exponent - len(denom)
    if precision < 0 or scale < -9:
        return False
    shifted = num + denom
    return (
        int(shifted) < 2**63
        and scale % 3 == 0
        and not shifted.endswith("000")
        and shifted[0] != "0"
    )


def quantities_equal(a: str | int | Quantity | None, b: str | int | Quantity | None) -> bool:
    """Equal by value; ``None`` is the zero quantity. Unparseable text compares as text."""
    try:
        qa = parse_quantity(a) if a is not None else Quantity(0)
        qb = parse_quantity(b) if b is not None else Quantity(0)
    except QuantityError:
        return a == b
    return qa == qb
