"""Waiting in tests: the only module under tests/ that sleeps (tests/unit/project/test_no_sleep.py).

- ``eventually`` polls a check until it holds and returns what it returned; it fails with what it
  waited for and the last answer (or exception) once ``within`` seconds have passed.
- ``stays`` checks that something keeps holding for a while ("nothing happens for N s"); it fails
  at the first answer that does not hold.
- ``settles`` waits until an answer stops changing for a while ("until things go quiet").
- ``yield_to_loop`` lets the other tasks on the event loop run.

``eventually`` and ``stays`` take sync or async checks (a check's awaitable answer is awaited);
``eventually_sync`` and ``stays_sync`` are their blocking twins for tests without an event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

Check = Callable[[], Any]
What = str | Callable[[], str]


def _describe(what: What) -> str:
    return what() if callable(what) else what


def _timed_out(within: float, what: What, last: Any) -> AssertionError:
    return AssertionError(
        f"timed out after {within}s waiting for {_describe(what)}; last: {last!r}"
    )


def _stopped(for_: float, held: float, what: What, value: Any) -> AssertionError:
    return AssertionError(
        f"{_describe(what)}: stopped holding after {held:.2f}s of {for_}s; got: {value!r}"
    )


async def _answer(check: Check) -> Any:
    value = check()
    if inspect.isawaitable(value):
        value = await value
    return value


async def eventually(
    check: Check,
    *,
    within: float,
    what: What,
    interval: float = 0.1,
    accept: Callable[[Any], bool] = bool,
    ignoring: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> Any:
    """Call ``check`` (awaiting its answer if it is awaitable) every ``interval`` seconds until
    ``accept(answer)`` (by default: the answer is truthy), and return that answer. Exceptions of
    the ``ignoring`` types raised by the check count as a wrong answer. After ``within`` seconds,
    raise AssertionError naming ``what`` (a string, or a callable that makes one) and the last
    answer or exception."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        try:
            value = await _answer(check)
        except ignoring as err:
            last = err
        else:
            if accept(value):
                return value
            last = value
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(within, what, last)
        await asyncio.sleep(min(interval, left))


def eventually_sync(
    check: Check,
    *,
    within: float,
    what: What,
    interval: float = 0.1,
    accept: Callable[[Any], bool] = bool,
    ignoring: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> Any:
    """``eventually`` for a synchronous ``check``, blocking the thread between calls."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        try:
            value = check()
        except ignoring as err:
            last = err
        else:
            if accept(value):
                return value
            last = value
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(within, what, last)
        time.sleep(min(interval, left))


async def stays(
    check: Check,
    *,
    for_: float,
    what: What,
    interval: float = 0.1,
    accept: Callable[[Any], bool] = bool,
) -> Any:
    """Call ``check`` (awaiting its answer if it is awaitable) at once, every ``interval``
    seconds, and once more when ``for_`` seconds have passed; raise AssertionError naming
    ``what`` at the first answer that ``accept`` refuses (by default: a falsy one). Returns the
    last answer."""
    start = time.monotonic()
    while True:
        value = await _answer(check)
        held = time.monotonic() - start
        if not accept(value):
            raise _stopped(for_, held, what, value)
        if held >= for_:
            return value
        await asyncio.sleep(min(interval, for_ - held))


def stays_sync(
    check: Check,
    *,
    for_: float,
    what: What,
    interval: float = 0.1,
    accept: Callable[[Any], bool] = bool,
) -> Any:
    """``stays`` for a synchronous ``check``, blocking the thread between calls."""
    start = time.monotonic()
    while True:
        value = check()
        held = time.monotonic() - start
        if not accept(value):
            raise _stopped(for_, held, what, value)
        if held >= for_:
            return value
        time.sleep(min(interval, for_ - held))


async def settles(
    check: Check, *, for_: float, within: float, what: What, interval: float = 0.1
) -> Any:
    """Call ``check`` (awaiting its answer if it is awaitable) every ``interval`` seconds until
    its answer has stayed equal for ``for_`` seconds ("until things go quiet"), and return that
    answer. After ``within`` seconds without such a stretch, raise AssertionError naming ``what``
    and the last answer."""
    deadline = time.monotonic() + within
    value = await _answer(check)
    since = time.monotonic()
    while True:
        now = time.monotonic()
        if now - since >= for_:
            return value
        if now >= deadline:
            raise _timed_out(within, what, value)
        await asyncio.sleep(min(interval, for_ - (now - since)))
        answer = await _answer(check)
        if answer != value:
            value, since = answer, time.monotonic()


async def yield_to_loop(times: int = 1) -> None:
    """Let every task that is ready run (one turn of the event loop per ``times``)."""
    for _ in range(times):
        await asyncio.sleep(0)


__all__ = ["eventually", "eventually_sync", "settles", "stays", "stays_sync", "yield_to_loop"]
