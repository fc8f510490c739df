"""No unit test reads a real clock: time-based behaviour runs on an injected (fake) clock.

A unit test that measures how long something took, or waits a real-time budget for it, passes
or fails with the machine's load, not with the code. So the code under test takes its clock as
an argument (``clock=``, ``now=``) and the tests pass a fake one they move by hand; a timeout
kept only to stop a hung test says so in a comment (see tests/polling.py for waiting on
conditions).

The check reads every .py file under tests/unit with ``ast`` and names each use, called or
passed on, of a real clock: ``time.monotonic``, ``time.time``, ``time.perf_counter``, their
``_ns`` twins, ``process_time``, ``thread_time`` and ``clock_gettime`` (by any alias of the
module, or imported by name), ``datetime.now``/``utcnow``/``today`` and ``date.today``, and an
event loop's ``time`` (``loop.time()``, ``asyncio.get_running_loop().time()``). ``ALLOWED``
lists the uses that are not timing, each with the reason. What it cannot see is a real clock
the code under test falls back on when a test passes none (``FirstStatusHold()``,
``TokenBucket(1, 1)``): a test of time-based behaviour passes its fake clock explicitly.

A second check: every Hypothesis property test (``@given``, and each ``RuleBasedStateMachine``)
runs with ``deadline=None``. Hypothesis's default fails an example that takes more than 200 ms
of wall time, a real-time budget like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TypeGuard

UNIT = Path(__file__).resolve().parents[1]
ROOT = UNIT.parents[1]

TIME_FUNCTIONS = frozenset(
    {
        "monotonic",
        "monotonic_ns",
        "time",
        "time_ns",
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "process_time_ns",
        "thread_time",
        "thread_time_ns",
        "clock_gettime",
        "clock_gettime_ns",
    }
)
DATETIME_CLOCKS = frozenset({"now", "utcnow", "today"})
DATETIME_CLASSES = frozenset({"datetime", "date"})
LOOP_GETTERS = frozenset({"get_running_loop", "get_event_loop", "new_event_loop"})

# (file, qualified name of the function holding the use): why it is not a timing assertion.
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/unit/kube/test_ratelimit.py", "test_by_default_the_bucket_paces_on_the_real_clock"): (
        "compares the token bucket's default clock with time.monotonic by identity; it reads "
        "no time"
    ),
}


def _scoped(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every node of ``tree`` with the qualified name of the function or class holding it."""
    out: list[tuple[ast.AST, str]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            out.append((child, inner))
            visit(child, inner)

    visit(tree, "")
    return out


def real_clocks_in(source: str, filename: str = "<snippet>") -> list[tuple[int, str]]:
    """(line, qualified name of the enclosing function, "" at module level) of every use of a
    real clock in ``source``."""
    tree = ast.parse(source, filename)
    time_modules: set[str] = set()  # local names of the time module
    clock_names: set[str] = set()  # time functions imported by name
    datetime_modules: set[str] = set()  # local names of the datetime module
    datetime_classes: set[str] = set()  # datetime.datetime / datetime.date imported by name
    loop_getters: set[str] = set()  # asyncio's loop getters imported by name
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "time":
                    time_modules.add(alias.asname or alias.name)
                elif alias.name == "datetime":
                    datetime_modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "time" and alias.name in TIME_FUNCTIONS:
                    clock_names.add(local)
                elif node.module == "datetime" and alias.name in DATETIME_CLASSES:
                    datetime_classes.add(local)
                elif node.module == "asyncio" and alias.name in LOOP_GETTERS:
                    loop_getters.add(local)

    def is_loop(node: ast.AST) -> bool:
        if isinstance(node, ast.Call):  # asyncio.get_running_loop().time
            func = node.func
            return (isinstance(func, ast.Attribute) and func.attr in LOOP_GETTERS) or (
                isinstance(func, ast.Name) and func.id in loop_getters
            )
        name = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else ""
        )
        return name == "loop" or name.endswith("_loop")  # loop.time, self.event_loop.time

    def is_datetime_class(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):  # from datetime import datetime; datetime.now
            return node.id in datetime_classes
        return (  # dt.datetime.now, datetime.date.today
            isinstance(node, ast.Attribute)
            and node.attr in DATETIME_CLASSES
            and isinstance(node.value, ast.Name)
            and node.value.id in datetime_modules
        )

    def reads_real_time(node: ast.AST) -> TypeGuard[ast.expr | ast.ImportFrom]:
        if isinstance(node, ast.Attribute):
            if (
                node.attr in TIME_FUNCTIONS
                and isinstance(node.value, ast.Name)
                and node.value.id in time_modules
            ):
                return True
            if node.attr in DATETIME_CLOCKS and is_datetime_class(node.value):
                return True
            return node.attr == "time" and is_loop(node.value)
        if isinstance(node, ast.Name):  # after ``from time import monotonic``
            return node.id in clock_names and isinstance(node.ctx, ast.Load)
        if isinstance(node, ast.ImportFrom):
            return node.module == "time" and any(a.name in TIME_FUNCTIONS for a in node.names)
        return False

    return sorted({(n.lineno, scope) for n, scope in _scoped(tree) if reads_real_time(n)})


def _unit_sources() -> list[tuple[str, str]]:
    return [
        (path.relative_to(ROOT).as_posix(), path.read_text()) for path in sorted(UNIT.rglob("*.py"))
    ]


def test_no_unit_test_reads_a_real_clock() -> None:
    offenders: list[str] = []
    used: set[tuple[str, str]] = set()
    for rel, source in _unit_sources():
        for line, scope in real_clocks_in(source, rel):
            if (rel, scope) in ALLOWED:
                used.add((rel, scope))
            else:
                offenders.append(f"{rel}:{line} ({scope or 'module level'})")
    assert not offenders, (
        "real clocks in unit tests (inject a fake clock into the code under test; a timeout "
        "that only stops a hung test needs no clock):\n" + "\n".join(offenders)
    )
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"allowed to read a real clock but reading none any more: {stale}"


def test_the_check_finds_every_real_clock() -> None:
    snippet = """
import asyncio
import datetime as dt
import time
import time as clock
from asyncio import get_running_loop
from datetime import date, datetime
from time import perf_counter as pc


async def measures() -> None:
    started = time.monotonic()
    clock.perf_counter_ns()
    pc()
    asyncio.get_running_loop().time()
    get_running_loop().time()
    loop = asyncio.get_event_loop()
    took = loop.time() - started


class Stamps:
    def at(self) -> None:
        datetime.now(dt.UTC)
        dt.datetime.utcnow()
        date.today()
        self.event_loop.time()
        Thing(clock=time.time)
"""
    assert real_clocks_in(snippet) == [
        (8, ""),
        (12, "measures"),
        (13, "measures"),
        (14, "measures"),
        (15, "measures"),
        (16, "measures"),
        (18, "measures"),
        (23, "Stamps.at"),
        (24, "Stamps.at"),
        (25, "Stamps.at"),
        (26, "Stamps.at"),
        (27, "Stamps.at"),
    ]


def test_the_check_leaves_fake_clocks_alone() -> None:
    snippet = """
import datetime as dt
import time


class FakeClock:
    now = 1000.0

    def time(self) -> float:
        return self.now


def uses(fake: FakeClock, clock) -> None:
    fake.time()
    clock()
    time = fake.now
    dt.datetime.fromtimestamp(1_800_000_000, dt.UTC)
    dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    print("time.monotonic()")
"""
    assert real_clocks_in(snippet) == []


# ---------------------------------------------------------------------- hypothesis deadlines
def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _no_deadline(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def deadlines_in(source: str, filename: str = "<snippet>") -> list[tuple[int, str]]:
    """(line, name) of every Hypothesis test in ``source`` that may run with a deadline: an
    ``@given`` function without ``@settings(deadline=None)`` (or a name bound to such
    settings), a ``RuleBasedStateMachine`` whose ``TestCase.settings`` are not such settings,
    and any ``settings(deadline=...)`` other than None."""
    tree = ast.parse(source, filename)
    settings_names: set[str] = set()
    given_names: set[str] = set()
    hypothesis_modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "hypothesis":
                    hypothesis_modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module == "hypothesis":
            for alias in node.names:
                if alias.name == "settings":
                    settings_names.add(alias.asname or alias.name)
                elif alias.name == "given":
                    given_names.add(alias.asname or alias.name)

    def named(func: ast.expr, names: set[str], attr: str) -> bool:
        return (isinstance(func, ast.Name) and func.id in names) or (
            isinstance(func, ast.Attribute)
            and func.attr == attr
            and isinstance(func.value, ast.Name)
            and func.value.id in hypothesis_modules
        )

    def is_settings(node: ast.AST) -> TypeGuard[ast.Call]:
        return isinstance(node, ast.Call) and named(node.func, settings_names, "settings")

    def unbounded(node: ast.expr) -> bool:  # settings(..., deadline=None), or a name for one
        if isinstance(node, ast.Name):
            return node.id in without_deadline
        return is_settings(node) and _no_deadline(_keyword(node, "deadline"))

    without_deadline = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and is_settings(node.value)
        and _no_deadline(_keyword(node.value, "deadline"))
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    machine_settings: dict[str, ast.expr] = {}  # Machine.TestCase.settings = ...
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "settings"
                    and isinstance(target.value, ast.Attribute)
                    and target.value.attr == "TestCase"
                    and isinstance(target.value.value, ast.Name)
                ):
                    machine_settings[target.value.value.id] = node.value

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if is_settings(node):
            deadline = _keyword(node, "deadline")
            if deadline is not None and not _no_deadline(deadline):
                found.append((node.lineno, "settings(deadline=...)"))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            decorators = node.decorator_list
            if any(
                isinstance(d, ast.Call) and named(d.func, given_names, "given") for d in decorators
            ) and not any(unbounded(d) for d in decorators):
                found.append((node.lineno, node.name))
        elif isinstance(node, ast.ClassDef) and any(
            (isinstance(b, ast.Name) and b.id == "RuleBasedStateMachine")
            or (isinstance(b, ast.Attribute) and b.attr == "RuleBasedStateMachine")
            for b in node.bases
        ):
            chosen = machine_settings.get(node.name)
            if chosen is None or not unbounded(chosen):
                found.append((node.lineno, node.name))
    return sorted(found)


def test_every_property_test_runs_without_a_deadline() -> None:
    offenders = [
        f"{rel}:{line} ({name})"
        for rel, source in _unit_sources()
        for line, name in deadlines_in(source, rel)
    ]
    assert not offenders, (
        "Hypothesis tests on its 200 ms per-example deadline (add @settings(deadline=None)):\n"
        + "\n".join(offenders)
    )


def test_the_deadline_check_finds_property_tests_with_a_deadline() -> None:
    snippet = """
import hypothesis
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine

PROPERTY = settings(max_examples=10, deadline=None)


@given(st.integers())
def test_default(n: int) -> None: ...


@settings(max_examples=5)
@given(st.integers())
def test_settings_without_deadline_none(n: int) -> None: ...


@hypothesis.settings(deadline=500)
@hypothesis.given(st.integers())
def test_explicit_deadline(n: int) -> None: ...


@PROPERTY
@given(st.integers())
def test_fine_by_name(n: int) -> None: ...


@settings(deadline=None)
@given(st.integers())
def test_fine(n: int) -> None: ...


class Machine(RuleBasedStateMachine): ...


class Bounded(RuleBasedStateMachine): ...


Bounded.TestCase.settings = settings(deadline=None)
"""
    assert deadlines_in(snippet) == [
        (11, "test_default"),
        (16, "test_settings_without_deadline_none"),
        (19, "settings(deadline=...)"),
        (21, "test_explicit_deadline"),
        (34, "Machine"),
    ]
