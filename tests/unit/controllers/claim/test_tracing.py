"""Tracing: the trace-context annotation's parsing, the spans of a claim reconcile (in-memory
exporter, fake API), and nothing of OpenTelemetry loaded while tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS
from agentsandbox.controllers.claim import tracing as claim_tracing
from agentsandbox.kube import tracing
from agentsandbox.kube.tracing import TraceParent, carrier_from_annotation, parse_traceparent
from tests.unit.controllers.claim.test_controller import (
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    setup_pool,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TP = f"00-{TRACE_ID}-{SPAN_ID}-01"


# ------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (TP, TraceParent(TRACE_ID, SPAN_ID, 1)),
        (f"00-{TRACE_ID}-{SPAN_ID}-00", TraceParent(TRACE_ID, SPAN_ID, 0)),
        (f" {TP} ", TraceParent(TRACE_ID, SPAN_ID, 1)),
        (f"01-{TRACE_ID}-{SPAN_ID}-01-future", TraceParent(TRACE_ID, SPAN_ID, 1)),
        (f"00-{TRACE_ID}-{SPAN_ID}-01-extra", None),  # version 00 has exactly four fields
        (f"ff-{TRACE_ID}-{SPAN_ID}-01", None),
        (f"00-{'0' * 32}-{SPAN_ID}-01", None),
        (f"00-{TRACE_ID}-{'0' * 16}-01", None),
        (f"00-{TRACE_ID.upper()}-{SPAN_ID}-01", None),
        (f"00-{TRACE_ID[:-1]}-{SPAN_ID}-01", None),
        ("00-a-b-01", None),
        ("", None),
        (None, None),
        (42, None),
    ],
)
def test_traceparent_parsing_follows_w3c(value: object, expected: TraceParent | None) -> None:
    assert parse_traceparent(value) == expected


def test_traceparent_round_trips_and_knows_the_sampled_flag() -> None:
    parsed = parse_traceparent(TP)
    assert parsed is not None and parsed.sampled and parsed.header() == TP
    unsampled = parse_traceparent(TP[:-2] + "00")
    assert unsampled is not None and not unsampled.sampled


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        # what the 1.0.x client writes (docs/tracing.md, "The annotation")
        (json.dumps({"traceparent": TP}), {"traceparent": TP}),
        (
            json.dumps({"traceparent": TP, "tracestate": "vendor=x"}),
            {"traceparent": TP, "tracestate": "vendor=x"},
        ),
        (json.dumps({"Traceparent": TP}), {"traceparent": TP}),  # header names: any case
        (json.dumps({"traceparent": TP, "tracestate": 5}), {"traceparent": TP}),
        (json.dumps({"traceparent": TP, "tracestate": "x" * 600}), {"traceparent": TP}),
        (TP, {"traceparent": TP}),  # a bare traceparent string
        # missing or garbled: no parent (a new trace), never an error
        (None, None),
        ("", None),
        ("   ", None),
        ("{not json", None),
        ("[1, 2]", None),
        (json.dumps([TP]), None),
        (json.dumps({"tracestate": "vendor=x"}), None),
        (json.dumps({"traceparent": "00-a-b-01"}), None),
        (json.dumps({"traceparent": 7}), None),
        ("00-a-b-01", None),
        (7, None),
    ],
)
def test_trace_context_annotation(annotation: object, expected: dict[str, str] | None) -> None:
    assert carrier_from_annotation(annotation) == expected


def test_claim_carrier_reads_the_annotation_of_the_claim() -> None:
    claim = {"metadata": {"annotations": {keys.ANNOTATION_TRACE_CONTEXT: TP}}}
    assert claim_tracing.claim_carrier(claim) == {"traceparent": TP}
    assert claim_tracing.claim_carrier({"metadata": {}}) is None
    assert claim_tracing.claim_carrier({}) is None


# ------------------------------------------------------------------------------------ off
def test_tracing_off_imports_no_opentelemetry() -> None:
    """The controller's modules load without OpenTelemetry (RSS is measured in benchmarks)."""
    code = (
        "import sys\n"
        "import agentsandbox.cli.controller, agentsandbox.controllers.claim.controller\n"
        "from agentsandbox.kube import tracing\n"
        "assert not tracing.enabled()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'google', 'requests'))\n"
        "assert loaded == [], loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # 60 s: a hang guard


async def test_traced_function_is_awaited_directly_when_off() -> None:
    calls: list[int] = []

    def attributes(*_: Any) -> dict[str, str]:
        calls.append(1)
        return {}

    @tracing.traced("x", attributes)
    async def f(a: int) -> int:
        return a + 1

    assert not tracing.enabled()
    assert await f(1) == 2
    assert calls == [], "no attribute is computed while tracing is off"


async def test_a_claim_reconcile_makes_no_span_when_off() -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    assert await h.reconcile() is None
    assert h.ready()["status"] == "True"


# ------------------------------------------------------------------------------------ on
@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer(provider.get_tracer("test"))
    claim_tracing._roots.clear()
    try:
        yield exporter
    finally:
        tracing.use_tracer(None)
        claim_tracing._roots.clear()
        provider.shutdown()


def _hex(span: ReadableSpan) -> tuple[str, str, str | None]:
    ctx = span.context
    assert ctx is not None
    parent = None if span.parent is None else f"{span.parent.span_id:016x}"
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", parent


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


def _annotated(body: dict[str, Any], value: str) -> dict[str, Any]:
    body["metadata"].setdefault("annotations", {})[keys.ANNOTATION_TRACE_CONTEXT] = value
    return body


async def test_warm_claim_is_one_trace_under_the_annotation(spans: InMemorySpanExporter) -> None:
    h = Harness()
    setup_pool(h)
    c = h.add(SANDBOX_CLAIMS.plural, _annotated(claim_v1beta1(), json.dumps({"traceparent": TP})))
    assert await h.reconcile() is None
    sandbox = h.claim()["status"]["sandbox"]["name"]
    by_name = _by_name(spans)
    assert set(by_name) == {
        claim_tracing.SPAN_RECONCILE,
        claim_tracing.SPAN_ADOPT,
        claim_tracing.SPAN_WRITE_STATUS,
        claim_tracing.SPAN_READY,
    }
    (root,) = by_name[claim_tracing.SPAN_RECONCILE]
    trace_id, root_id, parent = _hex(root)
    assert (trace_id, parent) == (TRACE_ID, SPAN_ID)
    assert root.parent is not None and root.parent.is_remote
    for name in (
        claim_tracing.SPAN_ADOPT,
        claim_tracing.SPAN_WRITE_STATUS,
        claim_tracing.SPAN_READY,
    ):
        (child,) = by_name[name]
        assert _hex(child)[0] == TRACE_ID and _hex(child)[2] == root_id, name
    attrs = dict(root.attributes or {})
    assert attrs["sandboxclaim.namespace"] == c["metadata"]["namespace"]
    assert attrs["sandboxclaim.name"] == "claim"
    assert attrs["sandboxclaim.uid"] == c["metadata"]["uid"]
    assert attrs["sandboxclaim.launch_type"] == "warm"
    assert attrs["sandbox.name"] == sandbox
    assert attrs["sandboxclaim.ready"] == "True"
    adopt = dict(by_name[claim_tracing.SPAN_ADOPT][0].attributes or {})
    assert adopt["sandboxwarmpool.name"] == "pool"
    assert adopt["sandboxtemplate.name"] == "tpl"
    assert adopt["sandboxclaim.adopted"] is True
    assert adopt["sandbox.name"] == sandbox
    status = dict(by_name[claim_tracing.SPAN_WRITE_STATUS][0].attributes or {})
    assert status["sandboxclaim.ready"] == "True"
    assert status["sandboxclaim.status_written"] is True
    assert status["sandboxclaim.status_changed"] is True
    spans.clear()
    h.sync()
    await h.reconcile()  # nothing new: a pass whose status write is a no-op, in the same trace
    again = _by_name(spans)
    assert _hex(again[claim_tracing.SPAN_RECONCILE][0])[:3:2] == (TRACE_ID, SPAN_ID)
    (noop,) = again[claim_tracing.SPAN_WRITE_STATUS]
    assert dict(noop.attributes or {})["sandboxclaim.status_changed"] is False
    assert claim_tracing.SPAN_ADOPT not in again and claim_tracing.SPAN_READY not in again


async def test_cold_claim_without_annotation_is_a_new_trace_its_passes_join(
    spans: InMemorySpanExporter,
) -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, _annotated(claim_v1alpha1(warmpool="none"), "{garbled"))
    await h.reconcile()
    h.sync()
    await h.reconcile()
    by_name = _by_name(spans)
    first, second = sorted(by_name[claim_tracing.SPAN_RECONCILE], key=lambda s: s.start_time or 0)
    trace_id, first_id, parent = _hex(first)
    assert parent is None, "a garbled annotation: a new root"
    assert _hex(second)[0] == trace_id and _hex(second)[2] == first_id, "later passes join"
    (create,) = by_name[claim_tracing.SPAN_CREATE]
    assert _hex(create)[2] == first_id
    attrs = dict(create.attributes or {})
    assert attrs["sandboxclaim.launch_type"] == "cold"
    assert attrs["sandbox.name"] == "claim"
    assert claim_tracing.SPAN_ADOPT not in by_name, "warmpool none: no adoption attempt"
    assert dict(first.attributes or {})["sandboxclaim.launch_type"] == "cold"


async def test_a_deleted_claim_is_forgotten_and_its_new_incarnation_is_a_new_trace(
    spans: InMemorySpanExporter,
) -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert len(claim_tracing._roots) == 1
    h.claims.remove(h.claim())
    await h.reconcile()
    assert claim_tracing._roots == {}
    assert len(_by_name(spans)[claim_tracing.SPAN_RECONCILE]) == 1, "no span for a gone claim"


async def test_an_error_is_recorded_on_the_span_and_raised(spans: InMemorySpanExporter) -> None:
    @tracing.traced("failing")
    async def f() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await f()
    (span,) = spans.get_finished_spans()
    assert not span.status.is_ok and span.events[0].name == "exception"


def test_enable_names_the_service_unless_the_environment_does() -> None:
    """service.name: ours by default; OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME, win.
    Run in a subprocess: enable() installs the process's global tracer provider."""
    code = (
        "import os, json\n"
        "from agentsandbox.kube import tracing\n"
        "out = []\n"
        "for env in ({}, {'OTEL_RESOURCE_ATTRIBUTES': 'service.name=from-attrs,team=a'},\n"
        "            {'OTEL_RESOURCE_ATTRIBUTES': 'team=b', 'OTEL_SERVICE_NAME': 'from-env'}):\n"
        "    for k in ('OTEL_RESOURCE_ATTRIBUTES', 'OTEL_SERVICE_NAME'):\n"
        "        os.environ.pop(k, None)\n"
        "    os.environ.update(env)\n"
        "    tracing.enable('ours', '1.2.3')\n"
        "    assert tracing.enabled()\n"
        "    attrs = dict(tracing._provider.resource.attributes)\n"
        "    out.append([attrs['service.name'], attrs.get('service.version'), attrs.get('team')])\n"
        "    tracing.shutdown()\n"
        "    assert not tracing.enabled()\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"  # nothing is exported
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        timeout=60,  # only stops a hung run
        capture_output=True,
        text=True,
        env=env,
    )
    assert json.loads(proc.stdout) == [
        ["ours", "1.2.3", None],
        ["from-attrs", "1.2.3", "a"],
        ["from-env", "1.2.3", "b"],
    ]
