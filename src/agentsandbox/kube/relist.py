"""The informer's reflector rules: which watch errors cost a re-watch only (not a relist), how
long to wait before the next attempt (jittered exponential backoff, at least ``Retry-After``)."""

from __future__ import annotations

import random
from collections.abc import Callable

from .errors import ApiConnectionError, ApiError, ServerError, TooManyRequests

__all__ = [
    "Backoff",
    "is_retriable_watch_error",
    "retry_after",
    "too_large_resource_version",
]


class Backoff:
    """Jittered exponential backoff: ``min(cap, base * 2**n)``, then a random 50-100 % of it."""

    def __init__(
        self,
        base: float = 0.2,
        cap: float = 30.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.attempts = 0
        self._rand = rand

    def next(self) -> float:
        """The delay before the next attempt; each call doubles the following one."""
        exp = min(self.attempts, 64)
        self.attempts += 1
        delay = min(self.cap, self.base * 2.0**exp)
        return delay * (0.5 + 0.5 * self._rand())

    def reset(self) -> None:
        self.attempts = 0


def is_retriable_watch_error(error: BaseException | None) -> bool:
    """Errors after which the watch is opened again from the same resourceVersion (no relist):
    no answer at all, throttling (429) or a server error (5xx), as client-go's reflector."""
    return isinstance(error, ApiConnectionError | TooManyRequests | ServerError)


def too_large_resource_version(error: BaseException) -> bool:
    """A 504 "Too large resource version": the watch cache has not caught up with our RV."""
    if not isinstance(error, ApiError):
        return False
    if any(c.get("reason") == "ResourceVersionTooLarge" for c in error.causes):
        return True
    return "too large resource version" in error.message.lower()


def retry_after(error: BaseException | None) -> float:
    """The server's ``Retry-After`` (capped at 60 s), or 0."""
    if isinstance(error, ApiError) and error.retry_after is not None:
        return min(error.retry_after, 60.0)
    return 0.0
