"""Our flags against upstream v1.0.1's own definitions, read from the pinned module.

Upstream's ``cmd/agent-sandbox-controller/main.go`` defines its flags with Go's ``flag`` package
(``flag.IntVar(&x, "name", default, "help")``); this parses those calls (a default may name a
constant of upstream's extensions/controllers package) and compares each flag's name, type and
default with our parser's, and with the table the unit tests keep
(``tests/unit/cli/test_options.py``). The flags upstream's binary takes from controller-runtime
(zap's, ``--kubeconfig``) and the flags only we take are declared there, each with its reason.
Needs only the module's files (``upstream`` fixture): a missing file FAILS, never skips.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentsandbox.cli.options import build_flagset
from tests.unit.cli.test_options import (
    CONTROLLER_RUNTIME_FLAGS,
    OURS_ONLY_FLAGS,
    V1_0_1_FLAGS,
)

MAIN = Path("cmd") / "agent-sandbox-controller" / "main.go"
CONSTANTS = Path("extensions") / "controllers"
GO_KINDS = {
    "Bool": "bool",
    "String": "string",
    "Int": "int",
    "Float64": "float",
    "Duration": "duration",
}
# flag.<Kind>Var(&variable, "name", default, ...: the default is one expression up to the comma
DEFINITION = re.compile(
    r'flag\.(Bool|String|Int|Float64|Duration)Var\(\s*&\w+,\s*"([^"]+)",\s*([^,]+),'
)
UNITS = {"Nanosecond": 1e-9, "Microsecond": 1e-6, "Millisecond": 1e-3, "Second": 1.0}
UNITS |= {"Minute": 60.0, "Hour": 3600.0}


def go_constants(directory: Path) -> dict[str, str]:
    """``Name = expression`` of the package's const/var blocks (one per line)."""
    out: dict[str, str] = {}
    for source in sorted(directory.glob("*.go")):
        if source.name.endswith("_test.go"):
            continue
        for m in re.finditer(r"^\s*(\w+)\s*=\s*([^\n/]+?)\s*$", source.read_text(), re.M):
            out.setdefault(m[1], m[2])
    return out


def go_duration(expr: str) -> float:
    """Seconds of a Go ``time.Duration`` expression: ``0``, ``time.Minute``, ``5 * time.Minute``."""
    expr = expr.strip()
    if re.fullmatch(r"\d+", expr):
        return int(expr) * 1e-9
    m = re.fullmatch(r"(?:(\d+)\s*\*\s*)?time\.(\w+)", expr)
    assert m and m[2] in UNITS, f"not a duration expression: {expr!r}"
    return int(m[1] or 1) * UNITS[m[2]]


def go_value(kind: str, expr: str, constants: dict[str, str]) -> object:
    expr = expr.strip()
    if expr.startswith("extensionscontrollers."):
        name = expr.partition(".")[2]
        assert name in constants, f"{name} is not defined in {CONSTANTS}"
        expr = constants[name]
    if kind == "bool":
        assert expr in ("true", "false"), expr
        return expr == "true"
    if kind == "string":
        assert expr.startswith('"') and expr.endswith('"'), expr
        return expr[1:-1]
    if kind == "int":
        return int(expr)
    if kind == "float":
        return float(expr)
    return go_duration(expr)


def upstream_flags(upstream: Path) -> dict[str, tuple[str, object]]:
    main = upstream / MAIN
    assert main.is_file(), f"{main} is missing from the pinned upstream module"
    text = main.read_text()
    constants = go_constants(upstream / CONSTANTS)
    found: dict[str, tuple[str, object]] = {}
    for m in DEFINITION.finditer(text):
        kind = GO_KINDS[m[1]]
        assert m[2] not in found, f"--{m[2]} defined twice"
        found[m[2]] = (kind, go_value(kind, m[3], constants))
    # every flag definition in the file was understood (none skipped by the pattern)
    assert len(found) == len(re.findall(r"\bflag\.\w+Var\(", text)), "a definition not parsed"
    return found


def test_the_table_of_v1_0_1s_flags_is_upstreams_main_go(upstream: Path) -> None:
    assert upstream_flags(upstream) == V1_0_1_FLAGS


def test_every_upstream_flag_is_ours_with_its_type_and_default(upstream: Path) -> None:
    ours = {name: (f.kind, f.default) for name, f in build_flagset().flags.items()}
    for name, (kind, default) in upstream_flags(upstream).items():
        assert name in ours, f"--{name} (upstream v1.0.1) would end start-up with exit 2"
        assert ours[name] == (kind, default), name
        assert type(ours[name][1]) is type(default), name


def test_the_flags_from_controller_runtime_are_bound_by_upstreams_main(upstream: Path) -> None:
    """zap's flags come from ``zap.Options.BindFlags`` on the command line's flag set, and
    ``--kubeconfig`` from controller-runtime's config package, which the manager's
    ``ctrl.GetConfigOrDie()`` reads: their names are not in main.go's own definitions."""
    text = (upstream / MAIN).read_text()
    assert "opts.BindFlags(flag.CommandLine)" in text
    assert "ctrl.GetConfigOrDie()" in text
    ours = build_flagset().flags
    for name, (kind, default, _) in CONTROLLER_RUNTIME_FLAGS.items():
        assert name not in upstream_flags(upstream), name
        assert (ours[name].kind, ours[name].default) == (kind, default), name


def test_every_flag_upstream_lacks_is_declared_ours_only_with_a_reason(upstream: Path) -> None:
    theirs = set(upstream_flags(upstream)) | set(CONTROLLER_RUNTIME_FLAGS)
    extra = set(build_flagset().flags) - theirs
    assert extra == set(OURS_ONLY_FLAGS)
    for name in extra:
        assert OURS_ONLY_FLAGS[name][2], name
