"""Typed API errors are built from the server's Status body and print as one line."""

from __future__ import annotations

import pickle

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsandbox.kube import errors
from agentsandbox.kube.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    InternalError,
    Invalid,
    NotFound,
    ServerError,
    ServerTimeout,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    api_error_from_response,
    api_error_from_status,
)


def status_body(code: int, reason: str, message: str, **details: object) -> bytes:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return orjson.dumps(body)


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", BadRequest),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (410, "Gone", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", InternalError),
        (500, "ServerTimeout", ServerTimeout),
        (503, "ServiceUnavailable", ServiceUnavailable),
        (504, "Timeout", ServerTimeout),
    ],
)
def test_status_reason_and_code_select_the_class(code: int, reason: str, cls: type) -> None:
    err = api_error_from_response(code, status_body(code, reason, f"the {reason} message"))
    assert type(err) is cls
    assert err.status == code
    assert err.reason == reason
    assert err.message == f"the {reason} message"
    assert err.body is not None and err.body["code"] == code


def test_already_exists_is_not_a_conflict_as_in_client_go() -> None:
    err = api_error_from_response(409, status_body(409, "AlreadyExists", 'configmaps "a" exists'))
    assert isinstance(err, AlreadyExists)
    assert not isinstance(err, Conflict)


def test_409_without_reason_is_a_conflict() -> None:
    assert isinstance(api_error_from_response(409, status_body(409, "", "x")), Conflict)


def test_server_timeout_and_internal_error_are_server_errors() -> None:
    for code, reason in [(500, "InternalError"), (504, "Timeout"), (502, ""), (599, "")]:
        err = api_error_from_response(code, status_body(code, reason, "boom"))
        assert isinstance(err, ServerError), (code, reason)


def test_a_reason_from_another_code_family_does_not_override_the_code() -> None:
    err = api_error_from_response(500, status_body(500, "NotFound", "odd"))
    assert isinstance(err, InternalError)


def test_unknown_code_is_a_plain_api_error() -> None:
    err = api_error_from_response(418, status_body(418, "Teapot", "short and stout"))
    assert type(err) is ApiError
    assert err.status == 418
    assert err.reason == "Teapot"


def test_str_is_one_readable_line_with_code_reason_message_and_request() -> None:
    err = api_error_from_response(
        409,
        status_body(409, "Conflict", "the object has been modified;\nplease apply your changes"),
        method="PUT",
        path="/api/v1/namespaces/ns/configmaps/a",
    )
    text = str(err)
    assert "\n" not in text
    assert text == (
        "409 Conflict: the object has been modified; please apply your changes "
        "[PUT /api/v1/namespaces/ns/configmaps/a]"
    )


def test_retry_after_comes_from_the_header_or_the_status_details() -> None:
    from_header = api_error_from_response(
        429, status_body(429, "TooManyRequests", "slow down"), retry_after=3.0
    )
    assert isinstance(from_header, TooManyRequests)
    assert from_header.retry_after == 3.0
    from_details = api_error_from_response(
        429, status_body(429, "TooManyRequests", "slow down", retryAfterSeconds=2)
    )
    assert from_details.retry_after == 2.0
    assert api_error_from_response(429, b"").retry_after is None


def test_invalid_carries_the_field_causes() -> None:
    cause = {"reason": "FieldValueInvalid", "message": "Invalid value", "field": "metadata.name"}
    err = api_error_from_response(
        422,
        status_body(
            422, "Invalid", 'ConfigMap "A" is invalid', name="A", kind="ConfigMap", causes=[cause]
        ),
    )
    assert isinstance(err, Invalid)
    assert err.causes == [cause]
    assert err.details["name"] == "A"


def test_watch_error_event_status_with_code_410_is_gone() -> None:
    obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "too old resource version: 1 (4242)",
        "reason": "Expired",
        "code": 410,
    }
    err = api_error_from_status(obj, method="WATCH", path="/api/v1/pods")
    assert isinstance(err, Gone)
    assert err.status == 410
    assert "too old resource version" in str(err)


def test_status_without_reason_uses_the_class_default() -> None:
    err = api_error_from_status({"kind": "Status", "code": 404, "message": "gone fishing"})
    assert isinstance(err, NotFound)
    assert err.reason == "NotFound"


def test_non_status_body_uses_the_code_and_the_text() -> None:
    err = api_error_from_response(403, b"<html>\n<body>proxy says no</body>\n</html>\n")
    assert isinstance(err, Forbidden)
    assert err.body is None
    assert err.message == "<html> <body>proxy says no</body> </html>"


def test_empty_body_still_gives_a_message() -> None:
    err = api_error_from_response(503, b"")
    assert isinstance(err, ServiceUnavailable)
    assert str(err) == "503 ServiceUnavailable: HTTP 503"


def test_huge_messages_are_truncated() -> None:
    err = api_error_from_response(422, status_body(422, "Invalid", "x" * 10_000))
    assert len(err.message) <= 2000
    assert err.message.endswith("...")


def test_errors_can_be_raised_directly_with_defaults() -> None:
    err = NotFound(message='pods "p" not found')
    assert err.status == 404
    assert str(err) == '404 NotFound: pods "p" not found'
    with pytest.raises(errors.KubeError):
        raise err


def test_errors_survive_pickling() -> None:
    err = api_error_from_response(
        409, status_body(409, "AlreadyExists", "exists", name="a"), method="POST", path="/x"
    )
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is AlreadyExists
    assert (copy.status, copy.reason, copy.message, copy.details, copy.path) == (
        409,
        "AlreadyExists",
        "exists",
        {"name": "a"},
        "/x",
    )


def test_connection_error_is_one_line() -> None:
    err = errors.ApiConnectionError(
        "ServerDisconnectedError:\nServer disconnected", method="GET", path="/api"
    )
    assert str(err) == "connection error: ServerDisconnectedError: Server disconnected [GET /api]"


@settings(deadline=None)  # no wall-clock budget per example: a loaded machine is not a failure
@given(
    code=st.integers(min_value=100, max_value=999),
    reason=st.text(max_size=30),
    message=st.text(max_size=300),
)
def test_any_status_gives_a_one_line_api_error(code: int, reason: str, message: str) -> None:
    err = api_error_from_response(code, status_body(code, reason, message))
    assert isinstance(err, ApiError)
    assert err.status == code
    text = str(err)
    assert "\n" not in text and "\r" not in text
    assert text.startswith(f"{code} ")


@settings(deadline=None)
@given(body=st.binary(max_size=200), code=st.integers(min_value=400, max_value=599))
def test_arbitrary_bodies_never_break_error_construction(body: bytes, code: int) -> None:
    err = api_error_from_response(code, body)
    assert isinstance(err, ApiError)
    assert "\n" not in str(err)
