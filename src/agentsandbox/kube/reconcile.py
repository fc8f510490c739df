"""Reconcile requests and results: the key a reconciler is handed, what it asks for next, the
bound an error may put on the wait for its retry (``retry_within``), and errors that no retry
can mend (``is_terminal``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .errors import namespace_terminating
from .store import KubeObject

__all__ = [
    "RETRY_WITHIN",
    "TERMINAL",
    "ReconcileFunc",
    "Reconciler",
    "Request",
    "Result",
    "is_terminal",
    "retry_within",
]

#: The attribute of a reconcile error that bounds its retry delay: a number of seconds (or None).
#: The key is retried after ``min(backoff, retry_within)``; the backoff still grows.
RETRY_WITHIN = "retry_within"


#: The attribute of a reconcile error that says no retry can mend it (``True``): the key is not
#: requeued, and its next event reconciles it again (controller-runtime's TerminalError).
TERMINAL = "terminal"


def is_terminal(err: BaseException) -> bool:
    """Whether retrying the request that raised ``err`` cannot help until the object changes:
    the error says so (:data:`TERMINAL`), or the API server refused to create anything in the
    namespace because the namespace is being deleted (its objects go next, and each deletion
    is an event)."""
    return getattr(err, TERMINAL, False) is True or namespace_terminating(err)


def retry_within(err: BaseException) -> float | None:
    """The longest ``err`` lets its request wait for a retry (None: the backoff decides)."""
    value = getattr(err, RETRY_WITHIN, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(float(value), 0.0)


# --- requests and results ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """The key of one object to reconcile; ``namespace`` is ``""`` for cluster-scoped objects."""

    namespace: str
    name: str

    @classmethod
    def from_object(cls, obj: KubeObject) -> Request:
        meta = obj.get("metadata") or {}
        return cls(meta.get("namespace") or "", meta.get("name") or "")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks for next.

    ``requeue_after`` (seconds): reconcile again after a plain delay, backoff reset. ``requeue``
    alone: reconcile again with the key's rate-limited backoff. Neither: done until an event.
    """

    requeue: bool = False
    requeue_after: float | None = None


ReconcileFunc = Callable[[Request], Awaitable[Result | None]]


@runtime_checkable
class Reconciler(Protocol):
    async def reconcile(self, request: Request) -> Result | None: ...
