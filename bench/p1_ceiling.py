"""P1's ceiling: the writes the API contract requires per warm claim, made by a bare script with
**no controller running**, open loop, at the rates of ``RATES``; its knee is found the same way
as P1's (``p1_claims.knee``). P1 reports our knee as a ratio of this one.

Per claim ``i`` (due at ``t0 + i / rate``; the list and each write's reason are in
``docs/benchmarks.md``, "P1's ceiling"):

1. the client's claim create (``POST sandboxclaims``);
2. the claim's choice of sandbox (the annotation ``agents.x-k8s.io/sandbox-name``) with its
   first-observed annotation (``PATCH sandboxclaims``, preconditioned on the version the create
   returned, as our claim controller sends it: first, before the sandbox is adopted);
3. the adoption patch of a pre-created pool sandbox (``PATCH sandboxes``, the body our claim
   controller sends: ``adoption_patch``);

then, concurrently, as three controllers would:

- the claim's status, Ready with ``status.sandbox.name`` (``PATCH sandboxclaims/status``), then
  its first-Ready guard annotations (``PATCH sandboxclaims``);
- the adopted pod's labels, which the adoption changed in the pod template (``PATCH pods``),
  and the adopted sandbox's status at its new generation (``PATCH sandboxes/status``);
- the replacement: ``POST sandboxes`` (the pool's blueprint), ``POST pods``, and its status
  (``PATCH sandboxes/status``).

kwok, the scheduler and the apiserver do their own work as in P1 (pod binding, pod status). The
pool's sandboxes and pods are created before the step and are not timed. Latency is measured as
in P1: the claim watch's Ready event minus the claim's scheduled send time. Nothing here retries,
caches, reconciles or rate-limits: what is left is the apiserver's (and etcd's, kwok's) cost of
those writes on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import statistics
import time
from typing import Any

from harness import Bench, BenchError, cpu_usage, summary_ms, template, warm_claim
from p1_claims import POOL, Watches, knee

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.controllers.claim.claimed_sandbox import adoption_patch
from agentsandbox.controllers.warmpool.blueprint import build_blueprint
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.resources import PODS

RATES = tuple(range(10, 55, 5))  # 10, 15, ..., 50 claims/s
# the writes per warm claim this script makes: (resource, verb) -> count; docs/benchmarks.md
WRITES: tuple[tuple[str, str, str], ...] = (
    ("sandboxclaims", "create", "the claim (the client)"),
    (
        "sandboxclaims",
        "patch",
        "the claim's choice of sandbox, committed before the adoption (upstream's assignment "
        "protocol), carrying its first-observed annotation (upstream's e2e "
        "test reads it on the Ready claim; first, as upstream writes it)",
    ),
    ("sandboxes", "patch", "the adoption"),
    ("sandboxclaims/status", "patch", "the claim's status: Ready, status.sandbox.name"),
    ("sandboxclaims", "patch", "the claim's first-Ready guard annotations, after its Ready"),
    ("pods", "patch", "the adopted pod's labels (the adoption changed the pod template's)"),
    ("sandboxes/status", "patch", "the adopted sandbox's status at its new generation"),
    ("sandboxes", "create", "the pool's replacement"),
    ("pods", "create", "the replacement's pod"),
    ("sandboxes/status", "patch", "the replacement's status"),
)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _condition(generation: int | None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": "Ready",
        "status": "True",
        "reason": "DependenciesReady",
        "message": "Pod is Ready",
        "lastTransitionTime": _now()[:19] + "Z",
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def sandbox_status(sb: dict[str, Any]) -> dict[str, Any]:
    name = sb["metadata"]["name"]
    return {
        "status": {
            "conditions": [_condition(sb["metadata"].get("generation"))],
            "replicas": 1,
            "selector": f"agents.x-k8s.io/sandbox-name-hash={name}",
            "podIPs": ["10.0.0.1"],
        }
    }


def claim_status(sandbox: str, generation: int | None) -> dict[str, Any]:
    return {"status": {"conditions": [_condition(generation)], "sandbox": {"name": sandbox}}}


def pod_for(sb: dict[str, Any]) -> dict[str, Any]:
    ptpl = sb["spec"]["podTemplate"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": sb["metadata"]["name"], "labels": dict(ptpl["metadata"]["labels"])},
        "spec": copy.deepcopy(ptpl["spec"]),
    }


async def _pods_ready(client: Client, ns: str, n: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while True:
        pods = (await client.list(PODS, ns)).items
        ready = sum(
            1
            for p in pods
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )
        if ready >= n:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"P1 ceiling: only {ready} of {n} pre-created pods Ready")
        await asyncio.sleep(0.5)


async def step(b: Bench, rate: float, claims: int, limit: float = 300.0) -> dict[str, Any]:
    """One rate step of the ceiling in a fresh namespace (see the module doc)."""
    cfg = await load_kubeconfig(str(b.cluster.kubeconfig))
    # the "controllers'" client: limited like the controller under the gate flags
    writer = Client(cfg, qps=1000, burst=2000, pool_size=200, user_agent="agentsandbox-ceiling")
    client = b.api  # the load generator's, as in P1
    try:
        async with b.namespace(f"p1c-{int(rate)}") as ns:
            tpl = template("tpl")
            tpl["metadata"]["namespace"] = ns
            fake_pool = {
                "metadata": {"name": POOL, "namespace": ns, "uid": "0"},
                "spec": {"replicas": claims, "sandboxTemplateRef": {"name": "tpl"}},
            }
            blueprint = build_blueprint(fake_pool, tpl, "00000000")
            blueprint["metadata"].pop("ownerReferences")  # no pool object: nothing to own it
            sem = asyncio.Semaphore(32)

            async def precreate() -> dict[str, Any]:
                async with sem:
                    sb = await writer.create(SANDBOXES, copy.deepcopy(blueprint), ns)
                    await writer.create(PODS, pod_for(sb), ns)
                    return sb

            pool = list(await asyncio.gather(*(precreate() for _ in range(claims))))
            await _pods_ready(client, ns, claims, limit)
            async with Watches(client, ns) as w:
                await asyncio.sleep(1.0)  # the pre-creation's last writes settle
                names = [f"c-{i:04d}" for i in range(claims)]
                w.expect(set(names))
                scheduled: dict[str, float] = {}
                sent: dict[str, float] = {}
                errors: list[str] = []

                async def claim_path(name: str, sb: str, gen: int | None) -> None:
                    await writer.patch(
                        SANDBOX_CLAIMS, name, claim_status(sb, gen), ns, subresource="status"
                    )
                    guards = {
                        keys.ANNOTATION_CLAIM_FIRST_READY_AT: _now(),
                        keys.ANNOTATION_CREATION_LATENCY_RECORDED: "true",
                    }
                    await writer.patch(
                        SANDBOX_CLAIMS, name, {"metadata": {"annotations": guards}}, ns
                    )

                async def sandbox_path(adopted: dict[str, Any]) -> None:
                    name = adopted["metadata"]["name"]
                    labels = adopted["spec"]["podTemplate"]["metadata"].get("labels") or {}
                    await writer.patch(PODS, name, {"metadata": {"labels": labels}}, ns)
                    await writer.patch(
                        SANDBOXES, name, sandbox_status(adopted), ns, subresource="status"
                    )

                async def replacement() -> None:
                    new = await writer.create(SANDBOXES, copy.deepcopy(blueprint), ns)
                    await writer.create(PODS, pod_for(new), ns)
                    await writer.patch(
                        SANDBOXES,
                        new["metadata"]["name"],
                        sandbox_status(new),
                        ns,
                        subresource="status",
                    )

                async def chain(i: int, name: str) -> None:
                    sent[name] = time.monotonic()
                    try:
                        claim = await client.create(SANDBOX_CLAIMS, warm_claim(name, POOL), ns)
                        sb = pool[i]
                        first = {
                            "resourceVersion": claim["metadata"]["resourceVersion"],
                            "annotations": {
                                keys.LABEL_SANDBOX_NAME: sb["metadata"]["name"],
                                keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: _now(),
                            },
                        }
                        await writer.patch(SANDBOX_CLAIMS, name, {"metadata": first}, ns)
                        adopted = await writer.patch(
                            SANDBOXES, sb["metadata"]["name"], adoption_patch(sb, claim, tpl), ns
                        )
                        await asyncio.gather(
                            claim_path(
                                name,
                                adopted["metadata"]["name"],
                                claim["metadata"].get("generation"),
                            ),
                            sandbox_path(adopted),
                            replacement(),
                        )
                    except Exception as err:  # counted and reported
                        errors.append(f"{name}: {err!r}")

                cpu0 = b.cpu_snapshot()
                t0 = time.monotonic() + 0.05
                tasks: list[asyncio.Task[None]] = []
                for i, name in enumerate(names):  # due times only, never a response
                    scheduled[name] = t0 + i / rate
                    delay = scheduled[name] - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(chain(i, name)))
                await asyncio.gather(*tasks)
                with contextlib.suppress(TimeoutError):
                    left = max(scheduled.values()) + 60 - time.monotonic()
                    await asyncio.wait_for(w.all_ready.wait(), max(0.0, left))
                cpu = cpu_usage(cpu0, b.cpu_snapshot())
    finally:
        await writer.close()
    spread = sorted(sent.values())
    span = spread[-1] - spread[0] if len(spread) > 1 else 0.0
    achieved = (claims - 1) / span if span else float(rate)
    latencies = [(w.ready_at[k] - scheduled[k]) * 1000 for k in names if k in w.ready_at]
    return {
        "rate": rate,
        "claims": claims,
        "rate_achieved": round(achieved, 2),
        "counts": achieved >= 0.95 * rate,
        "errors": len(errors),
        "first_errors": errors[:3],
        "claims_ready": len(w.ready_at),
        "latency_ms": summary_ms(latencies),
        "cpu_claims": cpu,
    }


async def sweep(b: Bench, rates: list[float], claims: int) -> dict[str, Any]:
    """One ceiling sweep over ``rates``; no controller may run (it would answer the claims)."""
    if b.controllers:
        raise BenchError("P1 ceiling: a controller is running; the ceiling runs without one")
    steps = []
    for rate in rates:
        await b.wait_namespaces_gone()
        await b.check_healthy()
        s = await step(b, float(rate), claims)
        lat = s["latency_ms"]
        api = s["cpu_claims"]["processes"].get("kube-apiserver", {})
        print(
            f"  ceiling {rate:>3g}/s: achieved {s['rate_achieved']}/s, ready "
            f"{s['claims_ready']}/{s['claims']}, errors {s['errors']}, p50 {lat['p50']} p99 "
            f"{lat['p99']} ms; apiserver {api.get('cores')} cores, machine busy "
            f"{s['cpu_claims']['machine_busy_share']}",
            flush=True,
        )
        steps.append(s)
    return {"steps": steps, "knee_claims_per_s": knee(steps)}


def median_knee(sweeps: list[dict[str, Any]]) -> float:
    return float(statistics.median(s["knee_claims_per_s"] for s in sweeps))
