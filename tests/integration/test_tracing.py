"""``--enable-tracing``: the controller process exports its spans over OTLP/HTTP to a receiver on
127.0.0.1, and each claim is one connected trace under the client's trace-context annotation.

The receiver is a tiny aiohttp server that decodes ``ExportTraceServiceRequest`` protobufs at
``POST /v1/traces`` (what ``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:<port>`` sends to).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import secrets
import signal
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.controllers.claim import tracing as claim_tracing
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from tests.polling import eventually

from .invariants import SandboxHistory, checked_history, controller_process, wait_claims_ready
from .test_claims import claim_obj
from .test_warmpool import (
    pool_obj,
    template_obj,
    wait_ready_pool,
)


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    name: str
    attributes: dict[str, Any]
    service: str


@dataclass
class Receiver:
    port: int = 0
    spans: list[Span] = field(default_factory=list)
    requests: int = 0

    def trace(self, trace_id: str) -> list[Span]:
        return [s for s in self.spans if s.trace_id == trace_id]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


def _decode(body: bytes, encoding: str) -> list[Span]:
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out: list[Span] = []
    for rs in req.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        name=s.name,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        service=str(resource.get("service.name", "")),
                    )
                )
    return out


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    received = Receiver()

    async def traces(request: web.Request) -> web.Response:
        received.requests += 1
        assert request.content_type == "application/x-protobuf", request.content_type
        body = await request.read()
        received.spans.extend(_decode(body, request.headers.get("Content-Encoding", "")))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    received.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield received
    finally:
        await runner.cleanup()


def traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def annotated(body: dict[str, Any], value: str) -> dict[str, Any]:
    body["metadata"]["annotations"] = {keys.ANNOTATION_TRACE_CONTEXT: value}
    return body


def names(spans: list[Span]) -> list[str]:
    return sorted(s.name for s in spans)


def check_connected(spans: list[Span], root_parent: str) -> list[Span]:
    """Every span's parent is another span of the trace or ``root_parent``; returns the
    reconcile spans, all children of ``root_parent``."""
    ids = {s.span_id for s in spans}
    for s in spans:
        assert s.parent_id in ids or s.parent_id == root_parent, (s.name, s.parent_id)
    reconciles = [s for s in spans if s.name == claim_tracing.SPAN_RECONCILE]
    assert reconciles and all(s.parent_id == root_parent for s in reconciles), reconciles
    return reconciles


def one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, names(spans))
    return found[0]


async def test_each_claim_is_one_connected_trace_under_its_annotation(
    client: Client,
    namespace: str,
    cluster: DevCluster,
    tmp_path: Path,
) -> None:
    log = tmp_path / "controller.log"
    warm_trace, warm_parent, warm_tp = traceparent()
    cold_trace, cold_parent, cold_tp = traceparent()
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 2), namespace)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",  # set below, once the port is known
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
    }
    async with otlp_receiver() as rx:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{rx.port}"
        with controller_process(cluster, log, flags=["--enable-tracing"], env=env) as proc:
            await wait_ready_pool(client, namespace, "pool", 2, within=30)
            await client.create(
                SANDBOX_CLAIMS,
                # what the 1.0.x client writes: a JSON map of the W3C headers
                annotated(
                    claim_obj("warm", pool="pool"),
                    json.dumps({"traceparent": warm_tp, "tracestate": "t=1"}),
                ),
                namespace,
            )
            await client.create(
                SANDBOX_CLAIMS,
                annotated(
                    claim_obj("cold", template="tpl", warmpool="none"),
                    json.dumps({"traceparent": cold_tp}),
                ),
                namespace,
            )
            await client.create(
                SANDBOX_CLAIMS,
                annotated(claim_obj("garbled", pool="pool"), "{not json"),
                namespace,
            )
            claims = {
                c["metadata"]["name"]: c
                for c in await wait_claims_ready(client, namespace, {"warm", "cold", "garbled"}, 30)
            }
            # spans are exported while the controller runs (a batch every ~100 ms) ...
            done = await eventually(
                lambda: {
                    t
                    for t in (warm_trace, cold_trace)
                    if claim_tracing.SPAN_READY in names(rx.trace(t))
                },
                accept=lambda done: len(done) == 2,
                within=15,
                what=lambda: f"the Ready span of both traces; log: {log.read_text()[-3000:]}",
            )
            assert len(done) == 2, (done, log.read_text()[-3000:])
            assert proc.poll() is None, log.read_text()[-3000:]
            # ... and a clean stop exports the rest: no span below misses its parent
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 15)
            assert code == 0, log.read_text()[-3000:]

    assert rx.requests > 0, log.read_text()[-3000:]
    ours = [s for s in rx.spans if s.attributes.get("sandboxclaim.namespace") == namespace]
    assert ours, names(rx.spans)
    expected_service = os.environ.get("OTEL_SERVICE_NAME") or "agent-sandbox-controller"
    assert {s.service for s in rx.spans} == {expected_service}

    # warm: every pass is a child of the client's span; adoption, status and Ready under a pass
    warm = rx.trace(warm_trace)
    reconciles = check_connected(warm, warm_parent)
    reconcile_ids = {s.span_id for s in reconciles}
    sandbox = claims["warm"]["status"]["sandbox"]["name"]
    assert {s.attributes["sandboxclaim.name"] for s in reconciles} == {"warm"}
    adopt = one(warm, claim_tracing.SPAN_ADOPT)
    ready = one(warm, claim_tracing.SPAN_READY)
    assert adopt.parent_id in reconcile_ids and ready.parent_id == adopt.parent_id
    assert claim_tracing.SPAN_CREATE not in names(warm)
    assert adopt.attributes["sandboxclaim.adopted"] is True
    assert adopt.attributes["sandbox.name"] == sandbox
    assert adopt.attributes["sandboxwarmpool.name"] == "pool"
    assert adopt.attributes["sandboxtemplate.name"] == "tpl"
    statuses = [s for s in warm if s.name == claim_tracing.SPAN_WRITE_STATUS]
    assert statuses and all(s.parent_id in reconcile_ids for s in statuses)
    (written,) = [s for s in statuses if s.parent_id == adopt.parent_id]
    assert written.attributes["sandboxclaim.ready"] == "True"
    assert written.attributes["sandboxclaim.status_changed"] is True
    assert written.attributes["sandboxclaim.status_written"] is True
    adopting = next(s for s in reconciles if s.span_id == adopt.parent_id)
    assert adopting.attributes["sandboxclaim.namespace"] == namespace
    assert adopting.attributes["sandboxclaim.name"] == "warm"
    assert adopting.attributes["sandboxclaim.uid"] == claims["warm"]["metadata"]["uid"]
    assert adopting.attributes["sandboxclaim.launch_type"] == "warm"
    assert adopting.attributes["sandbox.name"] == sandbox
    assert adopting.attributes["sandboxclaim.ready"] == "True"

    # cold: created from the template in one pass, Ready in a later one, same trace
    cold = rx.trace(cold_trace)
    reconciles = check_connected(cold, cold_parent)
    reconcile_ids = {s.span_id for s in reconciles}
    create = one(cold, claim_tracing.SPAN_CREATE)
    ready = one(cold, claim_tracing.SPAN_READY)
    assert create.parent_id in reconcile_ids and ready.parent_id in reconcile_ids
    assert claim_tracing.SPAN_ADOPT not in names(cold), "warmpool none: no adoption attempt"
    assert create.attributes["sandboxclaim.launch_type"] == "cold"
    assert create.attributes["sandbox.name"] == claims["cold"]["status"]["sandbox"]["name"]
    assert ready.attributes["sandboxclaim.launch_type"] == "cold"
    assert {s.attributes["sandboxclaim.name"] for s in reconciles} == {"cold"}

    # each annotated claim's spans are in its own trace only
    for claim, trace_id in (("warm", warm_trace), ("cold", cold_trace)):
        elsewhere = [
            s
            for s in ours
            if s.attributes.get("sandboxclaim.name") == claim and s.trace_id != trace_id
        ]
        assert elsewhere == [], elsewhere

    # a garbled annotation is no error: a new trace, whose root is its first pass
    garbled = [s for s in ours if s.attributes.get("sandboxclaim.name") == "garbled"]
    assert {s.trace_id for s in garbled} - {warm_trace, cold_trace} == {garbled[0].trace_id}
    assert len({s.trace_id for s in garbled}) == 1
    roots = [s for s in rx.trace(garbled[0].trace_id) if not s.parent_id]
    assert [s.name for s in roots] == [claim_tracing.SPAN_RECONCILE]
    check_connected([s for s in rx.trace(garbled[0].trace_id) if s.parent_id], roots[0].span_id)
    assert claim_tracing.SPAN_ADOPT in names(rx.trace(garbled[0].trace_id))


async def test_spans_still_buffered_are_exported_when_the_controller_stops(
    client: Client,
    namespace: str,
    cluster: DevCluster,
    tmp_path: Path,
) -> None:
    """A batch delay of a minute: nothing is sent while the claim gets Ready; SIGTERM makes the
    controller flush the buffered spans before it exits."""
    log = tmp_path / "controller.log"
    trace_id, parent, tp = traceparent()
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    async with otlp_receiver() as rx:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rx.port}",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
        }
        with controller_process(cluster, log, flags=["--enable-tracing"], env=env) as proc:
            await client.create(
                SANDBOX_CLAIMS,
                annotated(claim_obj("c", template="tpl", warmpool="none"), tp),  # a bare string
                namespace,
            )
            await wait_claims_ready(client, namespace, {"c"}, 30)
            assert rx.trace(trace_id) == [], "the batch delay holds them"
            proc.send_signal(signal.SIGTERM)
            # waited for in a thread: the receiver on this loop must keep answering meanwhile
            code = await asyncio.to_thread(proc.wait, 15)
            assert code == 0, log.read_text()[-3000:]
    spans = rx.trace(trace_id)
    check_connected(spans, parent)
    assert {claim_tracing.SPAN_CREATE, claim_tracing.SPAN_READY} <= set(names(spans)), names(spans)
