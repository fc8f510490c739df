"""No test sleeps to synchronise: every ``sleep`` under tests/ lives in tests/polling.py.

A test that waits for something waits on the condition (``eventually``), says what must not
change for how long (``stays``), waits for things to go quiet (``settles``) or lets other tasks
run (``yield_to_loop``), all in tests/polling.py. The only other sleeps are in ``PACED``: load
generators and the fault proxy, which pace traffic on purpose (the rate or the delay is what the
test is about). The check reads every .py file under tests/ with ``ast`` and names each use of a
sleep function: ``asyncio.sleep``, ``time.sleep``, ``anyio.sleep``, ``trio``'s and the rest, by
any module alias, and a name imported from one of those modules (``from asyncio import sleep``),
called or passed on.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
ROOT = TESTS.parent

SLEEPING_MODULES = frozenset({"asyncio", "time", "anyio", "trio", "gevent", "eventlet"})
SLEEP_NAMES = frozenset({"sleep", "sleep_forever", "sleep_until"})

POLLING = "tests/polling.py"

# (file, qualified name of the function holding the sleep): why it may sleep.
PACED: dict[tuple[str, str], str] = {
    (
        "tests/integration/test_autoscaler.py",
        "test_a_pool_grows_under_steady_claims_and_shrinks_after_the_window",
    ): "sends claims at a steady 8/s for 5 s: the arrival rate is what the autoscaler scales on",
    ("tests/integration/test_other_writers.py", "writer"): (
        "the other writer edits the objects as fast as it can, with 20 ms between its rounds"
    ),
    ("tests/faults/proxy.py", "Proxy.blackhole"): (
        "the fault proxy loses every answer for a second, then refuses connections for a while: "
        "those durations are the fault"
    ),
    ("tests/faults/proxy.py", "Proxy.pipe.deliver"): (
        "the fault proxy's delay line holds each chunk back for its added latency"
    ),
    ("tests/faults/proxy.py", "Proxy.resetter"): (
        "the fault proxy resets every open connection at a fixed period"
    ),
    ("tests/faults/proxy.py", "HttpFaults.handle"): (
        "the HTTP fault proxy holds a write's answer for a while before it cuts the connection"
    ),
    ("tests/faults/proxy.py", "HttpFaults.stalled"): (
        "the HTTP fault proxy holds watch answers back for a while: the lag is the fault"
    ),
}


def sleeps_in(source: str, filename: str = "<snippet>") -> list[tuple[int, str]]:
    """(line, qualified name of the enclosing function, "" at module level) of every use of a
    sleep function in ``source``."""
    tree = ast.parse(source, filename)
    modules: set[str] = set()  # local names bound to a sleeping module
    functions: set[str] = set()  # local names bound to a sleep function
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SLEEPING_MODULES:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module in SLEEPING_MODULES:
            for alias in node.names:
                if alias.name in SLEEP_NAMES:
                    functions.add(alias.asname or alias.name)

    def sleeps(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):  # asyncio.sleep(...), sleep=time.sleep
            return (
                node.attr in SLEEP_NAMES
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            )
        if isinstance(node, ast.Name):  # after ``from asyncio import sleep``
            return node.id in functions
        if isinstance(node, ast.ImportFrom):
            return node.module in SLEEPING_MODULES and any(
                alias.name in SLEEP_NAMES for alias in node.names
            )
        return False

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, f"{scope}.{child.name}" if scope else child.name)
                continue
            if sleeps(child):
                found.append((child.lineno, scope))
            visit(child, scope)

    visit(tree, "")
    return sorted(found)


def _exempt(rel: str) -> bool:
    return rel == POLLING


def test_only_the_polling_module_and_the_paced_traffic_sleep() -> None:
    offenders: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if _exempt(rel):
            continue
        for line, scope in sleeps_in(path.read_text(), rel):
            if (rel, scope) in PACED:
                used.add((rel, scope))
            else:
                offenders.append(f"{rel}:{line} ({scope or 'module level'})")
    assert not offenders, (
        "sleeps outside tests/polling.py (wait with eventually(), stays() or yield_to_loop() "
        "from there):\n" + "\n".join(offenders)
    )
    stale = sorted(set(PACED) - used)
    assert not stale, f"allowed to pace traffic but sleeping no more: {stale}"


def test_the_check_finds_every_way_to_sleep() -> None:
    snippet = """
import asyncio
import time as clock
from anyio import sleep as nap
from asyncio import sleep
import trio


async def waits() -> None:
    await asyncio.sleep(0.1)
    clock.sleep(1)
    await nap(1)
    await sleep(0)


class Paced:
    def go(self) -> None:
        loop.run_in_executor(None, clock.sleep, 1)
        trio.sleep_forever()
"""
    assert sleeps_in(snippet) == [
        (4, ""),
        (5, ""),
        (10, "waits"),
        (11, "waits"),
        (12, "waits"),
        (13, "waits"),
        (18, "Paced.go"),
        (19, "Paced.go"),
    ]


def test_the_check_leaves_other_sleeps_alone() -> None:
    snippet = """
import asyncio


class FakeClock:
    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def uses(fake: FakeClock) -> None:
    await fake.sleep(5)
    run("sleep 30")
    await asyncio.wait_for(fake.sleep(1), 1)
"""
    assert sleeps_in(snippet) == []
