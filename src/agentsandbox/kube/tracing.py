"""OpenTelemetry tracing, off unless :func:`enable` is called (``--enable-tracing``).

Off, nothing of OpenTelemetry is imported and a traced function costs one extra call: the
:func:`traced` wrapper checks a module global and awaits the function. On, :func:`enable` imports
the SDK and installs a tracer provider with a batch span processor and the OTLP/HTTP (protobuf)
span exporter, both configured by the standard ``OTEL_*`` environment variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``..._HEADERS``,
``..._TIMEOUT``, ``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_TRACES_SAMPLER``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SDK_DISABLED``). The exporter runs in the processor's thread,
never on the event loop.

A remote parent travels as a *carrier*, the W3C Trace Context headers as a dict
(``{"traceparent": "00-<trace id>-<span id>-<flags>", "tracestate": "..."}``). Objects carry one
in an annotation (``opentelemetry.io/trace-context``) as a JSON map of those headers;
:func:`carrier_from_annotation` reads it (or a bare ``traceparent`` string) and returns ``None``
for anything missing or malformed: a bad annotation starts a new trace, it is never an error.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, NamedTuple, ParamSpec, TypeVar

import orjson

log = logging.getLogger("agentsandbox.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

P = ParamSpec("P")
R = TypeVar("R")

#: Attribute values a span takes (``None`` values are dropped).
Attributes = Mapping[str, str | bool | int | float | None]

_TRACEPARENT_RE = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?"
)
_MAX_TRACESTATE = 512  # W3C: at least 512 characters must be propagated; longer may be dropped

# the SDK's tracer and provider while tracing is on; None = off (the only check on the hot path)
_tracer: Any = None
_provider: Any = None


class TraceParent(NamedTuple):
    """A parsed W3C ``traceparent`` header."""

    trace_id: str  # 32 lowercase hex digits, not all zero
    span_id: str  # 16 lowercase hex digits, not all zero
    flags: int  # bit 0: sampled

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"


def parse_traceparent(value: object) -> TraceParent | None:
    """The W3C ``traceparent`` header, or ``None`` when it is not a valid one.

    Version ``00`` has exactly four fields; a later version may append fields (ignored, as the
    W3C spec says); version ``ff``, all-zero ids and upper-case hex are invalid.
    """
    if not isinstance(value, str):
        return None
    m = _TRACEPARENT_RE.fullmatch(value.strip())
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def carrier_from_annotation(value: object) -> dict[str, str] | None:
    """The W3C headers of a trace-context annotation, or ``None`` (missing or malformed).

    Accepted: a JSON object with a ``traceparent`` string (what the released clients write:
    ``{"traceparent": "00-…-01", "tracestate": "…"}``; keys are case-insensitive, as HTTP header
    names) or a bare ``traceparent`` string. A ``tracestate`` that is not a string, or too long,
    is dropped; the parent is kept.
    """
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    headers: Mapping[str, Any]
    if text.startswith("{"):
        try:
            decoded = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(decoded, dict):
            return None
        headers = {str(k).lower(): v for k, v in decoded.items()}
    else:
        headers = {TRACEPARENT: text}
    parent = parse_traceparent(headers.get(TRACEPARENT))
    if parent is None:
        return None
    carrier = {TRACEPARENT: parent.header()}
    state = headers.get(TRACESTATE)
    if isinstance(state, str) and state.strip() and len(state) <= _MAX_TRACESTATE:
        carrier[TRACESTATE] = state.strip()
    return carrier


def enabled() -> bool:
    """Tracing is on (:func:`enable` was called and :func:`shutdown` was not)."""
    return _tracer is not None


def enable(service_name: str, service_version: str = "", tracer_name: str = "") -> None:
    """Install the SDK's tracer provider: batch span processor, OTLP/HTTP protobuf exporter.

    ``service_name`` is the default ``service.name``; ``OTEL_SERVICE_NAME`` or a ``service.name``
    in ``OTEL_RESOURCE_ATTRIBUTES`` overrides it. Raises ``ImportError`` when the OpenTelemetry
    packages are not installed.
    """
    global _tracer, _provider
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import (
        SERVICE_NAME,
        SERVICE_VERSION,
        OTELResourceDetector,
        Resource,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    defaults: dict[str, str] = {}
    from_env = OTELResourceDetector().detect().attributes
    if SERVICE_NAME not in from_env:
        defaults[SERVICE_NAME] = service_name
    if service_version and SERVICE_VERSION not in from_env:
        defaults[SERVICE_VERSION] = service_version
    # Resource.create: SDK defaults < OTEL_RESOURCE_ATTRIBUTES < ours < OTEL_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(defaults), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider = provider
    _tracer = provider.get_tracer(tracer_name or service_name, service_version or None)
    with contextlib.suppress(Exception):  # a provider set before (tests) stays the global one
        trace.set_tracer_provider(provider)
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    if protocol and protocol != "http/protobuf":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s ignored: spans go over http/protobuf", protocol)
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
    log.info(
        "tracing enabled: spans exported over OTLP/HTTP to %s",
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or base.rstrip("/") + "/v1/traces",
    )


def use_tracer(tracer: Any) -> None:
    """Trace with this OpenTelemetry tracer (tests: an in-memory exporter's), ``None`` = off."""
    global _tracer
    _tracer = tracer


def shutdown(timeout: float = 3.0) -> None:
    """Export what is buffered and stop (at the end of the process); tracing is off after.

    Waits at most ``timeout`` seconds: an unreachable collector (the exporter retries for up to
    its own 10 s timeout) must not hold up the process's exit. What is not sent by then is
    dropped with a warning (the exporter's threads are daemons).
    """
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is None:
        return

    def stop() -> None:
        try:
            provider.shutdown()  # flushes the batch processor, then stops the exporter
        except Exception as err:  # never let the exporter fail the process's exit
            log.warning("could not flush the trace exporter: %s", err)

    stopping = threading.Thread(target=stop, name="tracing-shutdown", daemon=True)
    stopping.start()
    stopping.join(timeout)
    if stopping.is_alive():
        log.warning("spans not exported within %.0f s of stopping were dropped", timeout)


def _parent_context(carrier: Mapping[str, str] | None) -> Any:
    if not carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(dict(carrier))


def set_attributes(span: Any, attributes: Attributes | None) -> None:
    """Set the non-``None`` attributes on an OpenTelemetry span."""
    if attributes:
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


@contextlib.contextmanager
def span(
    name: str,
    *,
    carrier: Mapping[str, str] | None = None,
    attributes: Attributes | None = None,
) -> Iterator[Any]:
    """A span made current for the block: child of ``carrier`` (a remote parent) when given,
    else of the current span (a new root if none). Only while :func:`enabled`. An exception
    leaving the block is recorded and sets the span's status to error."""
    if _tracer is None:
        raise RuntimeError("tracing is not enabled")
    with _tracer.start_as_current_span(name, context=_parent_context(carrier)) as current:
        set_attributes(current, attributes)
        yield current


def current_carrier() -> dict[str, str]:
    """The current span's context as W3C headers (empty when no span is current)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier


def current_span() -> Any:
    """The current OpenTelemetry span (a non-recording one when none). Only while enabled."""
    from opentelemetry import trace

    return trace.get_current_span()


def traced(
    name: str,
    attributes: Callable[..., Attributes] | None = None,
    result_attributes: Callable[[Any], Attributes] | None = None,
    *,
    on_parent: bool = False,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate a coroutine function to run in a child span of the current span.

    ``attributes(*args, **kwargs)`` gives the span's attributes at the start,
    ``result_attributes(result)`` more at the end; with ``on_parent`` the latter are also set on
    the parent span (a summary on the enclosing span). Tracing off: the function is awaited
    directly, nothing else runs.
    """

    def decorate(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if _tracer is None:
                return await fn(*args, **kwargs)
            parent = current_span() if on_parent else None
            with span(name, attributes=attributes(*args, **kwargs) if attributes else None) as s:
                result = await fn(*args, **kwargs)
                if result_attributes is not None:
                    more = result_attributes(result)
                    set_attributes(s, more)
                    if parent is not None:
                        set_attributes(parent, more)
                return result

        return wrapper

    return decorate


__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "TraceParent",
    "carrier_from_annotation",
    "current_carrier",
    "enable",
    "enabled",
    "parse_traceparent",
    "set_attributes",
    "shutdown",
    "span",
    "traced",
    "use_tracer",
]
