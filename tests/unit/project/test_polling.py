"""tests/polling.py, the one way tests wait: what each helper returns and how it fails."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from tests.polling import eventually, eventually_sync, settles, stays, stays_sync, yield_to_loop


def counter() -> Any:
    """A check whose answers are 0, 1, 2, ..."""
    return itertools.count().__next__


async def test_eventually_returns_the_first_answer_that_holds_sync_or_async() -> None:
    sync = counter()
    assert (
        await eventually(lambda: sync() >= 2 and "done", within=5, what="x", interval=0) == "done"
    )
    answers = counter()

    async def slow() -> int:
        return int(answers())

    assert await eventually(slow, within=5, what="x", accept=lambda n: n == 3, interval=0) == 3


async def test_eventually_fails_naming_what_and_the_last_answer() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the answer; last: 0"):
        await eventually(lambda: 0, within=0.05, what="the answer", interval=0.01)
    with pytest.raises(AssertionError, match=r"waiting for late; last: 7"):
        await eventually(lambda: 7, within=0.05, what=lambda: "late", accept=lambda n: n > 7)


async def test_eventually_ignores_only_the_exceptions_it_is_told_to() -> None:
    calls = counter()

    def flaky() -> str:
        if calls() < 2:
            raise OSError("not yet")
        return "up"

    assert await eventually(flaky, within=5, what="x", ignoring=OSError, interval=0) == "up"

    def down() -> None:
        raise OSError("down")

    with pytest.raises(AssertionError, match=r"last: OSError\('down'\)"):
        await eventually(down, within=0.05, what="x", ignoring=OSError)
    with pytest.raises(KeyError):
        await eventually(lambda: {}["k"], within=5, what="x", ignoring=OSError)


def test_eventually_sync_blocks_between_calls() -> None:
    calls = counter()
    assert eventually_sync(lambda: calls() == 2, within=5, what="x", interval=0.01) is True
    with pytest.raises(AssertionError, match="waiting for never"):
        eventually_sync(lambda: None, within=0.05, what="never", interval=0.01)


async def test_stays_holds_for_the_whole_while_and_fails_at_the_first_miss() -> None:
    assert await stays(lambda: "kept", for_=0.05, what="x", interval=0.01) == "kept"
    calls = counter()
    with pytest.raises(AssertionError, match=r"quiet: stopped holding after .* got: 3"):
        await stays(calls, for_=5, what="quiet", accept=lambda n: n < 3, interval=0)
    with pytest.raises(AssertionError, match="got: False"):
        stays_sync(lambda: False, for_=5, what="x")


async def test_settles_waits_for_the_answer_to_stop_changing() -> None:
    calls = counter()
    assert await settles(lambda: min(calls(), 3), for_=0.05, within=5, what="x", interval=0) == 3
    moving = counter()
    with pytest.raises(AssertionError, match="waiting for calm"):
        await settles(moving, for_=1, within=0.05, what="calm", interval=0.01)


async def test_yield_to_loop_lets_ready_tasks_run() -> None:
    ran: list[int] = []

    async def task() -> None:
        ran.append(1)

    asyncio.get_running_loop().create_task(task())
    await yield_to_loop()
    assert ran == [1]
