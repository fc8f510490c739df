"""An event-loop watchdog: how late the loop runs a timer, exported and checked by ``/healthz``.

Asyncio is cooperative: one long synchronous step (a relist of tens of thousands of objects, a
scrape of a large registry) delays every other task, the Lease renewal included. The monitor
sleeps ``interval`` at a time and measures how much longer the pause took (the lag, exported as
``agentsandbox_runtime_event_loop_lag_seconds``). :meth:`LoopMonitor.healthy` fails while no
tick has come for ``stall_after`` seconds (the loop is blocked right now), and for
``stall_after`` seconds after a tick that measured a lag over ``stall_after`` (the loop was
blocked; the Lease may be lost), so a probe that could not be answered during the stall still
sees it afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from . import metrics

__all__ = ["LoopMonitor"]

log = logging.getLogger(__name__)


class LoopMonitor:
    """Measures the loop's lag every ``interval`` seconds on ``clock`` (injectable for tests)."""

    def __init__(
        self,
        stall_after: float,
        *,
        interval: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stall_after <= 0 or interval <= 0:
            raise ValueError("stall_after and interval must be positive")
        self.stall_after = stall_after
        self.interval = interval
        self._clock = clock
        self._last_tick = clock()
        self._lag = 0.0
        self._stalled_at: float | None = None  # the tick that last measured a stall
        self._task: asyncio.Task[None] | None = None

    @property
    def lag(self) -> float:
        """The last measured lag, in seconds."""
        return self._lag

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def healthy(self) -> bool:
        """False while the loop has been blocked ``stall_after``, and for ``stall_after`` after."""
        now = self._clock()
        if now - self._last_tick > self.stall_after:
            return False
        return self._stalled_at is None or now - self._stalled_at > self.stall_after

    async def run(self) -> None:
        self._last_tick = self._clock()
        while True:
            before = self._clock()
            await self._sleep(self.interval)
            now = self._clock()
            self._lag = max(0.0, now - before - self.interval)
            self._last_tick = now
            metrics.EVENT_LOOP_LAG.set(self._lag)
            if self._lag > self.stall_after:
                self._stalled_at = now
                metrics.EVENT_LOOP_STALLS.inc()
                log.error(
                    "the event loop was blocked for %.1fs (more than %.1fs): the Lease may be lost",
                    self._lag,
                    self.stall_after,
                )

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name="event loop monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
