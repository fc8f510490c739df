"""Event-loop time of one candidate pick under a ``Recreate`` pool of 40 Ready members.

The template has two containers with env, resources, probes and mounts (``realistic_pod_spec``).
One adoption pass's setup (``CandidatePicker.start``) plus its ``pick()``, timed with
``time.perf_counter`` over 20 picks (each taken sandbox is queued again, so every pick vets the
same 32 Ready candidates); prints the median and the spread in milliseconds. Synchronous code:
the time measured is time the event loop is blocked.

    PYTHONPATH=src:. python bench/pick_cost.py [--members 40] [--picks 20] [--strategy Recreate]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from tests.unit.controllers.claim.test_controller import (
    NS,
    claim_v1beta1,
    pool,
    pool_sandbox,
    template,
)
from tests.unit.fakes import FakeInformer

from agentsandbox.api import keys
from agentsandbox.api.hashing import sandbox_blueprint_hash
from agentsandbox.controllers.claim.candidates import CandidatePicker
from agentsandbox.controllers.claim.warm_index import WarmQueue


def realistic_pod_spec() -> dict[str, Any]:
    """A pod spec of the size real templates have: two containers with env, resources, probes,
    mounts and security contexts, and a few volumes."""

    def container(name: str, image: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": image,
            "command": ["/bin/sh", "-c"],
            "args": ["exec /app/run --port 8888 --log-level info"],
            "ports": [{"name": "http", "containerPort": 8888, "protocol": "TCP"}],
            "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(20)],
            "resources": {
                "requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "2Gi"},
            },
            "readinessProbe": {
                "httpGet": {"path": "/healthz", "port": 8888},
                "periodSeconds": 2,
                "failureThreshold": 3,
            },
            "volumeMounts": [
                {"name": "work", "mountPath": "/work"},
                {"name": "cache", "mountPath": "/cache"},
                {"name": "config", "mountPath": "/etc/app", "readOnly": True},
            ],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }

    return {
        "containers": [container("main", "python:3.12"), container("sidecar", "proxy:1.4")],
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "config", "configMap": {"name": "app-config"}},
        ],
        "nodeSelector": {"pool": "sandboxes"},
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=40)
    ap.add_argument("--picks", type=int, default=20)
    ap.add_argument("--strategy", default="Recreate")
    args = ap.parse_args()

    tpl = template()
    tpl["spec"]["podTemplate"]["spec"] = realistic_pod_spec()
    tpl["metadata"]["uid"] = "tpl-uid"
    p = pool(updateStrategy={"type": args.strategy})
    p["metadata"]["uid"] = "pool-uid"
    sandboxes, queue = FakeInformer(), WarmQueue()
    bp_hash = sandbox_blueprint_hash(tpl["spec"])
    for i in range(args.members):
        sb = pool_sandbox(p, tpl)
        sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] = bp_hash
        sb["metadata"]["uid"] = f"sb-{i}"
        sb["metadata"]["resourceVersion"] = str(i + 1)
        sandboxes.put(sb)
        queue.add((NS, "pool"), sb["metadata"]["name"])
    claim = claim_v1beta1()
    claim["metadata"].update(uid="claim-uid", creationTimestamp="2026-01-01T00:00:00Z")
    picker = CandidatePicker(sandboxes, queue)  # type: ignore[arg-type]

    times: list[float] = []
    for _ in range(args.picks):
        t0 = time.perf_counter()
        picked = picker.start(claim, tpl, [p]).pick()
        times.append((time.perf_counter() - t0) * 1000)
        assert picked is not None
        queue.add((NS, "pool"), picked["metadata"]["name"])
    print(
        f"{args.strategy} pool, {args.members} Ready members, {args.picks} picks: "
        f"median {statistics.median(times):.2f} ms, min {min(times):.2f} ms, "
        f"max {max(times):.2f} ms"
    )


if __name__ == "__main__":
    main()
