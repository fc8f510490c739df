"""No test waits on a subprocess longer than pytest lets it run.

pytest-timeout ends a test after pyproject.toml's ``timeout`` (or the test's own
``@pytest.mark.timeout``, or its module's in tests/conftest.py ``SLOW_MODULES``); a
``timeout=`` given to a subprocess call inside the test beyond that never fires, and the test
dies without the subprocess's output. The check reads every .py file under tests/ with ``ast``:
each literal ``timeout=`` keyword of a call that waits on a process (``subprocess.run`` and its
kin, ``wait``, ``communicate``, a module's own ``_run``) must be below the pytest timeout there.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from tests.conftest import SLOW_MODULES

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent
WAITING_CALLS = frozenset(
    {"run", "check_output", "check_call", "call", "wait", "communicate", "_run"}
)


def global_timeout() -> float:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return float(tomllib.load(f)["tool"]["pytest"]["ini_options"]["timeout"])


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _marked_timeout(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> float | None:
    """N of a ``@pytest.mark.timeout(N)`` on ``fn``."""
    for deco in fn.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and isinstance(deco.func, ast.Attribute)
            and deco.func.attr == "timeout"
            and deco.args
            and isinstance(deco.args[0], ast.Constant)
            and isinstance(deco.args[0].value, int | float)
        ):
            return float(deco.args[0].value)
    return None


def waits_beyond(source: str, module_timeout: float, where: str) -> list[str]:
    """Each waiting call in ``source`` whose literal ``timeout=`` is not below the pytest timeout
    that applies to it (its function's mark, else ``module_timeout``)."""
    found: list[str] = []

    def visit(node: ast.AST, limit: float) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            limit = _marked_timeout(node) or limit
        if isinstance(node, ast.Call) and _callee(node) in WAITING_CALLS:
            for kw in node.keywords:
                value = kw.value
                if (
                    kw.arg == "timeout"
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, int | float)
                    and value.value >= limit
                ):
                    found.append(
                        f"{where}:{node.lineno}: {_callee(node)}(timeout={value.value}) but pytest "
                        f"ends the test after {limit:g} s"
                    )
        for child in ast.iter_child_nodes(node):
            visit(child, limit)

    visit(ast.parse(source), module_timeout)
    return found


def test_no_subprocess_wait_outlasts_the_pytest_timeout() -> None:
    default = global_timeout()
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        found += waits_beyond(path.read_text(), SLOW_MODULES.get(module, default), module)
    assert not found, "\n".join(found)


def test_every_slow_module_exists() -> None:
    for module in SLOW_MODULES:
        assert (ROOT / module).is_file(), module


@pytest.mark.parametrize(
    ("source", "limit", "caught"),
    [
        ("subprocess.run(argv, timeout=900)", 300.0, True),  # what the bench smoke had
        ("subprocess.run(argv, timeout=240)", 300.0, False),
        ("proc.wait(timeout=300)", 300.0, True),
        ("_run('bench/run.py', timeout=1200)", 1500.0, False),
        (
            "@pytest.mark.timeout(1000)\ndef test_x():\n    subprocess.run(a, timeout=900)\n",
            300.0,
            False,
        ),
        (
            "@pytest.mark.timeout(600)\ndef test_x():\n    subprocess.run(a, timeout=900)\n",
            300.0,
            True,
        ),
        ("Expectations(timeout=300.0)", 300.0, False),  # not a wait on a process
    ],
)
def test_the_check_catches_a_wait_beyond_the_timeout(
    source: str, limit: float, caught: bool
) -> None:
    assert bool(waits_beyond(source, limit, "x.py")) is caught
