"""Micro-benchmarks of the controller runtime (``kube/``): decode, cache, queue, API writes.

Run with ``make bench SCENARIO=runtime`` (or ``.venv/bin/python bench/runtime.py``). Starts a
private local control plane unless ``AGENTSANDBOX_CLUSTER_DIR`` points at a running one. Prints a
table and writes ``bench/results/runtime.json``. A report of numbers, not a test.

The create benchmark is measured twice in the same run: through our ``Client`` and through a bare
aiohttp loop with the same TLS credentials and concurrency (the "ceiling"), so the ratio shows what
the client layer costs on top of what the apiserver can take.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.resources import CONFIGMAPS, NAMESPACES
from agentsandbox.kube.store import Store, index_by_controller_uid, index_by_namespace
from agentsandbox.kube.workqueue import WorkQueue

RESULTS = Path(__file__).parent / "results"


def synthetic_pod(i: int) -> dict[str, Any]:
    """A pod about the size of a sandbox pod as the apiserver returns it (managedFields too)."""
    name = f"pool-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": str(uuid.UUID(int=i)),
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "labels": {
                "agents.x-k8s.io/sandbox-name-hash": f"{i:08x}",
                "agents.x-k8s.io/warm-pool-sandbox": "59733166",
                "agents.x-k8s.io/sandbox-template-ref-hash": "69155462",
            },
            "annotations": {"agents.x-k8s.io/propagated-labels": "app,tier"},
            "ownerReferences": [
                {
                    "apiVersion": "agents.x-k8s.io/v1beta1",
                    "kind": "Sandbox",
                    "name": name,
                    "uid": str(uuid.UUID(int=10**9 + i)),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "sandbox-controller",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-02T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {f"f:k{j}": {} for j in range(8)}}},
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "sandbox",
                    "image": "registry.example/python-runtime:3.11",
                    "ports": [{"containerPort": 8888, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "automountServiceAccountToken": False,
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]},
            "nodeName": f"kwok-node-{i % 10}",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.64.{i // 250}.{i % 250 + 1}",
            "podIPs": [{"ip": f"10.64.{i // 250}.{i % 250 + 1}"}],
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-12-02T10:00:01Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
        },
    }


def bench_decode(n: int) -> dict[str, float]:
    body = orjson.dumps({"kind": "PodList", "items": [synthetic_pod(i) for i in range(n)]})
    t0 = time.perf_counter()
    items = orjson.loads(body)["items"]
    decode = time.perf_counter() - t0
    for item in items:
        item["metadata"].pop("managedFields", None)
    store = Store({"namespace": index_by_namespace, "controller": index_by_controller_uid})
    t0 = time.perf_counter()
    store.replace(items)
    insert = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(0, n, 7):
        store.by_index("controller", str(uuid.UUID(int=10**9 + i)))
    lookups = len(range(0, n, 7))
    lookup = time.perf_counter() - t0
    return {
        "objects": n,
        "bytes_per_object": round(len(body) / n),
        "decode_objects_per_s": round(n / decode),
        "store_replace_objects_per_s": round(n / insert),
        "index_lookups_per_s": round(lookups / lookup),
    }


async def bench_queue(n: int, workers: int) -> dict[str, float]:
    queue: WorkQueue[str] = WorkQueue("bench", "bench")
    done = 0
    finished = asyncio.Event()

    async def worker() -> None:
        nonlocal done
        while True:
            try:
                key = await queue.get()
            except Exception:  # ShutDown
                return
            queue.done(key)
            done += 1
            if done >= n:
                finished.set()

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    t0 = time.perf_counter()
    for i in range(n):
        queue.add(f"ns/key-{i}")
        if i % 256 == 0:
            await asyncio.sleep(0)
    await finished.wait()
    took = time.perf_counter() - t0
    queue.shutdown()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"keys": n, "workers": workers, "keys_per_s": round(n / took)}


async def bench_creates(cluster: DevCluster, n: int, concurrency: int) -> dict[str, float]:
    client = await Client.from_kubeconfig(str(cluster.kubeconfig), qps=0, pool_size=concurrency)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    results: dict[str, float] = {"creates": n, "concurrency": concurrency}
    try:
        await client.create(NAMESPACES, {"metadata": {"name": ns}})

        async def run(make_one: Any) -> float:
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with sem:
                    await make_one(i)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return time.perf_counter() - t0

        # ceiling: bare aiohttp with the same credentials, connection pool and concurrency
        ctx = ssl.create_default_context(cafile=str(cluster.pki / "ca.crt"))
        ctx.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
        url = f"{cluster.server}/api/v1/namespaces/{ns}/configmaps"
        conn = aiohttp.TCPConnector(limit=concurrency, ssl=ctx)
        async with aiohttp.ClientSession(connector=conn) as session:

            async def bare(i: int) -> None:
                body = orjson.dumps({"metadata": {"name": f"bare-{i}"}, "data": {"k": "v"}})
                async with session.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as resp:
                    orjson.loads(await resp.read())
                    assert resp.status == 201, resp.status

            bare_s = await run(bare)

        async def ours(i: int) -> None:
            await client.create(
                CONFIGMAPS, {"metadata": {"name": f"ours-{i}"}, "data": {"k": "v"}}, ns
            )

        ours_s = await run(ours)
        results["ceiling_creates_per_s"] = round(n / bare_s)
        results["client_creates_per_s"] = round(n / ours_s)
        results["client_vs_ceiling_time_ratio"] = round(ours_s / bare_s, 3)
        await client.delete(NAMESPACES, ns)
    finally:
        await client.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--creates", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
    }
    gc.collect()
    report["decode"] = bench_decode(args.objects)
    print("decode/cache:", report["decode"], flush=True)
    report["queue"] = asyncio.run(bench_queue(args.keys, workers=50))
    print("work queue:  ", report["queue"], flush=True)

    reuse = os.environ.get("AGENTSANDBOX_CLUSTER_DIR")
    attached = DevCluster.attach(Path(reuse)) if reuse else None
    cluster = attached or DevCluster(Path(tempfile.mkdtemp(prefix="agentsandbox-bench-")), nodes=1)
    if attached is None:
        cluster.start()
    try:
        report["creates"] = asyncio.run(bench_creates(cluster, args.creates, args.concurrency))
        print("creates:     ", report["creates"], flush=True)
    finally:
        if attached is None:
            cluster.stop(keep_logs=False)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "runtime.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {RESULTS / 'runtime.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
