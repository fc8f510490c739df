"""Typed Kubernetes API errors, built from the server's ``Status`` body.

Callers branch on the *kind* of failure (``except NotFound``, ``except Conflict``) the way Go code
uses ``apierrors.IsNotFound``; the server's own message is kept verbatim so a log line says what
the API server said. ``str(err)`` is always a single line, so an expected error can be logged as
one line rather than a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "AlreadyExists",
    "ApiConnectionError",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "InternalError",
    "Invalid",
    "KubeError",
    "MethodNotAllowed",
    "NotFound",
    "ServerError",
    "ServerTimeout",
    "ServiceUnavailable",
    "TooManyRequests",
    "Unauthorized",
    "UnsupportedMediaType",
    "api_error_from_response",
    "api_error_from_status",
    "namespace_terminating",
]

_MAX_MESSAGE = 2000


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    if len(line) > _MAX_MESSAGE:
        line = line[: _MAX_MESSAGE - 3] + "..."
    return line


class KubeError(Exception):
    """Root of every error raised by the API client."""


class ApiConnectionError(KubeError):
    """The request never got an HTTP answer (refused, reset, timed out, TLS failure)."""

    def __init__(self, message: str, *, method: str = "", path: str = "") -> None:
        self.message = _one_line(message)
        self.method = method
        self.path = path
        super().__init__(self.message)

    def __str__(self) -> str:
        where = f" [{self.method} {self.path}]" if self.method else ""
        return f"connection error: {self.message}{where}"


class ApiError(KubeError):
    """The API server answered with an error status.

    Attributes mirror ``metav1.Status``: ``status`` is the HTTP code; ``reason`` the
    machine-readable ``StatusReason`` (``NotFound``, ``AlreadyExists``, ``Conflict``, ...);
    ``message`` the server's human-readable text; ``details`` the ``StatusDetails`` (name, kind,
    causes, retryAfterSeconds); ``body`` the decoded ``Status`` (None if the body was not one).
    """

    #: HTTP code used when an error of this class is raised without one.
    default_status: int = 0
    #: ``StatusReason`` used when the server did not send one.
    default_reason: str = "Unknown"

    def __init__(
        self,
        status: int | None = None,
        reason: str | None = None,
        message: str = "",
        details: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        *,
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.status: int = self.default_status if status is None else status
        self.reason: str = _one_line(reason or "") or self.default_reason
        self.message: str = _one_line(message) if message else self.reason
        self.details: dict[str, Any] = dict(details) if details else {}
        self.body: dict[str, Any] | None = dict(body) if body is not None else None
        self.method = method
        self.path = path
        if retry_after is None:
            seconds = self.details.get("retryAfterSeconds")
            if isinstance(seconds, int | float) and seconds > 0:
                retry_after = float(seconds)
        #: Seconds the server asked us to wait (``Retry-After`` or ``details.retryAfterSeconds``).
        self.retry_after: float | None = retry_after
        super().__init__(self.message)

    @property
    def causes(self) -> list[dict[str, Any]]:
        """``details.causes``: for ``Invalid`` one entry per rejected field."""
        causes = self.details.get("causes")
        return list(causes) if isinstance(causes, list) else []

    def __str__(self) -> str:
        where = f" [{self.method} {self.path}]" if self.method else ""
        return f"{self.status} {self.reason}: {self.message}{where}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, reason={self.reason!r}, "
            f"message={self.message!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                type(self),
                self.status,
                self.reason,
                self.message,
                self.details,
                self.body,
                self.method,
                self.path,
                self.retry_after,
            ),
        )


def _rebuild(
    cls: type[ApiError],
    status: int,
    reason: str,
    message: str,
    details: dict[str, Any],
    body: dict[str, Any] | None,
    method: str,
    path: str,
    retry_after: float | None,
) -> ApiError:
    return cls(
        status, reason, message, details, body, method=method, path=path, retry_after=retry_after
    )


class BadRequest(ApiError):
    default_status = 400
    default_reason = "BadRequest"


class Unauthorized(ApiError):
    default_status = 401
    default_reason = "Unauthorized"


class Forbidden(ApiError):
    default_status = 403
    default_reason = "Forbidden"


class NotFound(ApiError):
    default_status = 404
    default_reason = "NotFound"


class MethodNotAllowed(ApiError):
    default_status = 405
    default_reason = "MethodNotAllowed"


class Conflict(ApiError):
    """409 with reason ``Conflict``: a stale ``resourceVersion`` or a failed precondition."""

    default_status = 409
    default_reason = "Conflict"


class AlreadyExists(ApiError):
    """409 with reason ``AlreadyExists``: a create for a name that is taken.

    Not a subclass of :class:`Conflict`, as in client-go (``IsConflict`` is false for it).
    """

    default_status = 409
    default_reason = "AlreadyExists"


class Gone(ApiError):
    """410 / reason ``Expired`` or ``Gone``: the resourceVersion is too old; relist."""

    default_status = 410
    default_reason = "Expired"


class UnsupportedMediaType(ApiError):
    default_status = 415
    default_reason = "UnsupportedMediaType"


class Invalid(ApiError):
    """422: the object failed validation; :attr:`causes` names the fields."""

    default_status = 422
    default_reason = "Invalid"


class TooManyRequests(ApiError):
    """429: API priority and fairness (or an eviction budget) refused the request."""

    default_status = 429
    default_reason = "TooManyRequests"


class ServerError(ApiError):
    """Any 5xx answer."""

    default_status = 500
    default_reason = "InternalError"


class InternalError(ServerError):
    default_status = 500
    default_reason = "InternalError"


class ServiceUnavailable(ServerError):
    default_status = 503
    default_reason = "ServiceUnavailable"


class ServerTimeout(ServerError):
    """504 ``Timeout``, or reason ``ServerTimeout`` (the server could not finish in time)."""

    default_status = 504
    default_reason = "Timeout"


_BY_REASON: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "Conflict": Conflict,
    "AlreadyExists": AlreadyExists,
    "Gone": Gone,
    "Expired": Gone,
    "UnsupportedMediaType": UnsupportedMediaType,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": InternalError,
    "ServiceUnavailable": ServiceUnavailable,
    "ServerTimeout": ServerTimeout,
    "Timeout": ServerTimeout,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}


def _error_class(status: int, reason: str) -> type[ApiError]:
    cls = _BY_REASON.get(reason)
    # A reason only decides when it agrees with the code's family (a 5xx "NotFound" is odd;
    # trust the code), except that 409 distinguishes Conflict from AlreadyExists by reason.
    if cls is not None and (status == 0 or cls.default_status // 100 == status // 100):
        return cls
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    if 500 <= status < 600:
        return ServerError
    return ApiError


def api_error_from_status(
    status_obj: Mapping[str, Any],
    *,
    http_status: int | None = None,
    method: str = "",
    path: str = "",
    retry_after: float | None = None,
) -> ApiError:
    """Build the typed error for a decoded ``metav1.Status`` (e.g. a watch ``ERROR`` event)."""
    code = status_obj.get("code")
    status = http_status if http_status else (code if isinstance(code, int) else 0)
    reason = status_obj.get("reason")
    reason = reason if isinstance(reason, str) and reason else ""
    message = status_obj.get("message")
    message = message if isinstance(message, str) else ""
    details = status_obj.get("details")
    details = details if isinstance(details, Mapping) else None
    cls = _error_class(status, reason)
    return cls(
        status,
        reason or None,
        message,
        details,
        status_obj,
        method=method,
        path=path,
        retry_after=retry_after,
    )


def api_error_from_response(
    status: int,
    body: bytes,
    *,
    method: str = "",
    path: str = "",
    retry_after: float | None = None,
) -> ApiError:
    """Build the typed error for an HTTP error answer whose raw body is ``body``."""
    decoded: Any = None
    if body[:1] == b"{":
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return api_error_from_status(
            decoded, http_status=status, method=method, path=path, retry_after=retry_after
        )
    text = body.decode("utf-8", "replace").strip()
    cls = _error_class(status, "")
    return cls(
        status,
        None,
        text or f"HTTP {status}",
        None,
        decoded if isinstance(decoded, dict) else None,
        method=method,
        path=path,
        retry_after=retry_after,
    )


def namespace_terminating(err: BaseException) -> bool:
    """Whether ``err`` is the API server refusing to create anything in a namespace that is
    being deleted (the NamespaceLifecycle admission's 403, cause ``NamespaceTerminating``).

    Nothing can be created there again: retrying the same create only costs requests.
    """
    if not isinstance(err, Forbidden):
        return False
    causes = {str(c.get("reason") or c.get("type") or "") for c in err.causes}
    return "NamespaceTerminating" in causes or "because it is being terminated" in err.message
