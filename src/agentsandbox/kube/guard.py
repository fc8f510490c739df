"""Hostile objects: a function of ours that fails on one object is logged, rarely, and skipped.

Index, transform and handler functions run on every object a watch delivers, and any namespace
user can write some of those objects (a SandboxClaim, for one). A function that raises for one
object must not stop the informer, nor fill the log with one line per event: the failure is
logged once per (place, object) and period, and the object is left out of that place.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["HOSTILE_LOG_PERIOD", "ObjectGuard", "RateLimitedLog"]

T = TypeVar("T")

HOSTILE_LOG_PERIOD = 300.0
"""Seconds between two log lines for the same failure on the same object."""

_MAX_KEYS = 4096


class RateLimitedLog:
    """Logs a warning at most once per key and ``period`` (a bounded set of keys is kept)."""

    def __init__(
        self,
        logger: logging.Logger,
        period: float = HOSTILE_LOG_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = _MAX_KEYS,
    ) -> None:
        self._log = logger
        self._period = period
        self._clock = clock
        self._max_keys = max_keys
        self._last: OrderedDict[str, float] = OrderedDict()

    def warning(
        self, key: str, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> bool:
        """Log ``msg % args`` unless ``key`` was logged less than a period ago; True if logged."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._period:
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self._max_keys:
            self._last.popitem(last=False)
        self._log.warning(msg, *args, exc_info=exc_info)
        return True


class ObjectGuard:
    """Runs functions of ours on watched objects for ``owner`` (an informer, in its log lines):
    a failure is logged once per (function, object) and period and reported as None/False."""

    def __init__(self, owner: object, key_of: Callable[[Any], str], logger: logging.Logger):
        self._owner = owner
        self._key_of = key_of
        self._log = RateLimitedLog(logger)

    def key(self, obj: Any) -> str | None:
        try:
            return self._key_of(obj)
        except Exception:
            return None

    def call(self, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        """``fn(*args)``; False (logged, rarely) if it raised. The object is ``args[-1]``."""
        try:
            fn(*args)
        except Exception as err:
            self._failed(what, fn, args[-1], err)
            return False
        return True

    def apply(self, what: str, fn: Callable[[T], T], obj: T) -> T | None:
        """``fn(obj)``, or None (logged, rarely) if it raised."""
        try:
            return fn(obj)
        except Exception as err:
            self._failed(what, fn, obj, err)
            return None

    def _failed(self, what: str, fn: object, obj: Any, err: Exception) -> None:
        key = self.key(obj)
        self._log.warning(
            f"{what}\0{id(fn)}\0{key}",
            "%r: %s %r failed on %s (skipped there): %s: %.200s",
            self._owner,
            what,
            fn,
            key,
            type(err).__name__,
            err,
            exc_info=err,
        )
