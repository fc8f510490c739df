"""The error a reconcile raises when several API calls of one pass failed."""

from __future__ import annotations

from agentsandbox.kube.errors import ApiError
from agentsandbox.kube.reconcile import is_terminal


class ReconcileErrors(ApiError):
    """Several API errors from one reconcile, reported together (one log line)."""

    def __init__(self, errors: list[BaseException]) -> None:
        first = next((e for e in errors if isinstance(e, ApiError)), None)
        text = "; ".join(str(e) for e in errors)
        super().__init__(
            first.status if first else 0,
            first.reason if first else "Aggregate",
            f"{len(errors)} error(s): {text}",
        )
        self.errors = errors
        #: No retry can mend any of them (e.g. creates refused in a namespace being deleted):
        #: the runtime does not retry the key (see :func:`agentsandbox.kube.reconcile.is_terminal`)
        self.terminal = bool(errors) and all(is_terminal(e) for e in errors)


__all__ = ["ReconcileErrors"]
