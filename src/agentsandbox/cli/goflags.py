"""Command-line flags parsed the way Go's ``flag`` package parses them.

An upstream Deployment passes arguments such as ``--leader-elect=false`` or
``-kube-api-qps 50``; these must mean exactly what they mean to the Go binary. So:

- one or two leading dashes are the same; ``--`` ends the flags;
- ``--name=value`` always works; ``--name value`` works for every flag except booleans;
- a bare boolean ``--name`` means true and never takes the next argument;
- booleans accept ``1 t T TRUE true True 0 f F FALSE false False`` (Go's ``strconv.ParseBool``);
- integers accept Go's base prefixes and underscores (``0x10``, ``1_000``);
- durations are Go durations (``300ms``, ``1.5h``, ``2h45m``, ``0``).
Parsing stops at the first argument that is not a flag.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class FlagError(ValueError):
    """A flag could not be parsed; the message is what Go would print (one line)."""


class HelpRequested(Exception):
    """``-h`` / ``-help`` / ``--help`` was given."""


_BOOL_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_BOOL_FALSE = {"0", "f", "F", "FALSE", "false", "False"}

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_bool(text: str) -> bool:
    if text in _BOOL_TRUE:
        return True
    if text in _BOOL_FALSE:
        return False
    raise ValueError(f'parse error: invalid syntax for bool "{text}"')


def parse_int(text: str) -> int:
    t = text.replace("_", "") if "_" in text[1:] else text
    sign = -1 if t.startswith("-") else 1
    body = t.lstrip("+-")
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", body):
            value = int(body[2:], 16)
        elif re.fullmatch(r"0[oO][0-7]+", body):
            value = int(body[2:], 8)
        elif re.fullmatch(r"0[bB][01]+", body):
            value = int(body[2:], 2)
        elif re.fullmatch(r"0[0-7]+", body):
            value = int(body, 8)
        elif re.fullmatch(r"\d+", body):
            value = int(body, 10)
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f'parse error: invalid syntax for int "{text}"') from None
    return sign * value


def parse_float(text: str) -> float:
    try:
        return float(text.replace("_", ""))
    except ValueError:
        raise ValueError(f'parse error: invalid syntax for float "{text}"') from None


def parse_duration(text: str) -> float:
    """A Go duration string in seconds (``time.ParseDuration``)."""
    s = text
    sign = 1.0
    if s and s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'time: invalid duration "{text}"')
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            if re.match(r"\d", s[pos:]):
                raise ValueError(f'time: missing unit in duration "{text}"')
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Roughly Go's ``Duration.String`` for the defaults shown in ``--help``."""
    if seconds == 0:
        return "0s"
    out = ""
    rest = seconds
    if rest >= 3600:
        out += f"{int(rest // 3600)}h"
        rest %= 3600
    if rest >= 60 or (out and rest):
        out += f"{int(rest // 60)}m"
        rest %= 60
    if rest or not out:
        out += f"{rest:g}s"
    return out


@dataclass
class Flag:
    name: str
    kind: str  # bool | string | int | float | duration
    default: Any
    help: str
    parse: Callable[[str], Any]


@dataclass
class FlagSet:
    """A set of Go-style flags. ``parse(argv)`` returns ``(values, positional_args)``."""

    program: str
    flags: dict[str, Flag] = field(default_factory=dict)

    def _add(self, name: str, kind: str, default: Any, help: str, fn: Callable[[str], Any]) -> None:
        if name in self.flags:
            raise ValueError(f"flag redefined: {name}")
        self.flags[name] = Flag(name, kind, default, help, fn)

    def add_bool(self, name: str, default: bool, help: str) -> None:
        self._add(name, "bool", default, help, parse_bool)

    def add_string(self, name: str, default: str, help: str) -> None:
        self._add(name, "string", default, help, str)

    def add_int(self, name: str, default: int, help: str) -> None:
        self._add(name, "int", default, help, parse_int)

    def add_float(self, name: str, default: float, help: str) -> None:
        self._add(name, "float", default, help, parse_float)

    def add_duration(self, name: str, default: float, help: str) -> None:
        self._add(name, "duration", default, help, parse_duration)

    def parse(self, argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
        values = {name: f.default for name, f in self.flags.items()}
        args = list(argv)
        i = 0
        while i < len(args):
            arg = args[i]
            if len(arg) < 2 or arg[0] != "-":
                break
            if arg == "--":
                i += 1
                break
            body = arg[2:] if arg.startswith("--") else arg[1:]
            if not body or body[0] in "-=":
                raise FlagError(f"bad flag syntax: {arg}")
            name, has_value, value = body.partition("=")
            if name in ("h", "help") and name not in self.flags:
                raise HelpRequested
            flag = self.flags.get(name)
            if flag is None:
                raise FlagError(f"flag provided but not defined: -{name}")
            if flag.kind == "bool":
                text = value if has_value else "true"
            elif has_value:
                text = value
            else:
                if i + 1 >= len(args):
                    raise FlagError(f"flag needs an argument: -{name}")
                i += 1
                text = args[i]
            try:
                values[name] = flag.parse(text)
            except ValueError as err:
                raise FlagError(f'invalid value "{text}" for flag -{name}: {err}') from None
            i += 1
        return values, args[i:]

    def usage(self) -> str:
        lines = [f"Usage of {self.program}:"]
        for name in sorted(self.flags):
            f = self.flags[name]
            kind = "" if f.kind == "bool" else f" {f.kind}"
            lines.append(f"  -{name}{kind}")
            default = f.default
            if f.kind == "duration":
                default = format_duration(float(default))
            shown = "" if default in ("", False) else f" (default {default!s})"
            lines.append(f"    \t{f.help}{shown}")
        return "\n".join(lines)
