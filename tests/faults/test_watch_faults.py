"""A throttled watch, on a private control plane: the controller reaches kube-apiserver through the
HTTP fault proxy (tests/faults/proxy.py), which answers its next watches of sandboxes 429 (with
``Retry-After``), then 500 and 503, the way API priority and fairness or an overloaded
kube-apiserver would. The proxy's own request log is the evidence: every request the controller
made, in order, with the proxy's arrival time and the answer's code.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qs

import pytest

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from tests.integration.invariants import (
    SandboxHistory,
    check_converged,
    checked_history,
)
from tests.integration.test_claims import claim_obj
from tests.integration.test_warmpool import pool_obj, template_obj, wait_ready_pool
from tests.polling import eventually

from .faultkit import ProxyProcess

POOL = "pool"
REPLICAS = 3
SANDBOX_COLLECTION = r"/apis/agents\.x-k8s\.io/[^/]+/(namespaces/[^/]+/)?sandboxes"
WATCH = r"(^|&)watch=(true|1)(&|$)"
RETRY_AFTER = 1  # seconds, on every 429
REFUSALS = (429, 429, 500, 503, 503)  # the answers to the watches after the fault is on
SLACK = 0.05  # seconds: two clocks read by two processes, and a timer that fires on time


def _is_watch(entry: dict[str, object]) -> bool:
    return re.search(WATCH, str(entry["query"])) is not None


def _sandbox_reads(px: ProxyProcess, since: int) -> list[dict[str, object]]:
    """The GETs of the sandbox collection (lists and watches) from the ``since``-th request on."""
    return [
        e
        for e in px.requests()[since:]
        if e["method"] == "GET" and re.fullmatch(SANDBOX_COLLECTION, str(e["path"]))
    ]


def _rv(entry: dict[str, object]) -> str:
    return parse_qs(str(entry["query"])).get("resourceVersion", [""])[0]


def _show(entries: list[dict[str, object]], t0: float) -> list[str]:
    return [
        f"+{float(str(e['at'])) - t0:.2f}s {'WATCH' if _is_watch(e) else 'LIST'} "
        f"rv={_rv(e) or '-'} -> {e['status']}"
        for e in entries
    ]


@pytest.fixture(autouse=True)
async def claim_history(
    private_cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(private_cluster, request.node.nodeid) as history:
        yield history


async def test_a_throttled_watch_rewatches_from_its_resource_version_with_backoff(
    fault_proxy: ProxyProcess, pclient: Client, pns: str
) -> None:
    """security review #8, against kube-apiserver. About 10 s, 6 of them refused watches (two
    Retry-After of 1 s and three growing backoffs). Once the controller's caches are synced (a
    Ready pool of 3), the proxy ends its watch of sandboxes (as the server's watch timeout
    would) and answers the next five watches 429 (Retry-After: 1), 429, 500, 503, 503. The
    informer must open the watch again each time from the resourceVersion it had (never a
    relist: no LIST of sandboxes after the sync), wait at least Retry-After after a 429 and back
    off exponentially after the 5xx (the last gap longer than the first); the watch that is let
    through must work: a claim made afterwards is served by a pool sandbox, and the pool is
    refilled to its replicas."""
    px = fault_proxy
    await pclient.create(SANDBOX_TEMPLATES, template_obj("tpl"), pns)
    await pclient.create(SANDBOX_WARM_POOLS, pool_obj(POOL, "tpl", REPLICAS), pns)
    members = {s["metadata"]["name"] for s in await wait_ready_pool(pclient, pns, POOL, REPLICAS)}
    synced = _sandbox_reads(px, 0)
    assert any(not _is_watch(e) for e in synced), f"no initial list of sandboxes: {synced}"
    assert any(_is_watch(e) and e["status"] == 200 for e in synced), "no watch of sandboxes"
    opened = [e for e in synced if _is_watch(e) and e["status"] == 200][-1]
    since = len(px.requests())
    px.set_faults(
        *(
            {
                "method": "GET",
                "path": SANDBOX_COLLECTION,
                "query": WATCH,
                "action": "status",
                "status": status,
                "retry_after": RETRY_AFTER if status == 429 else 0,
                "count": 1,
            }
            for status in REFUSALS
        )
    )
    ended = px.end_streams(SANDBOX_COLLECTION)
    assert ended == 1, f"{ended} watches of sandboxes were open, not the informer's one"

    def through() -> list[dict[str, object]]:
        watches = [e for e in _sandbox_reads(px, since) if _is_watch(e)]
        return watches if len(watches) > len(REFUSALS) and watches[-1]["status"] else []

    await eventually(through, within=30, what="a watch of sandboxes let through after 5 refused")
    px.set_faults()
    reads = _sandbox_reads(px, since)
    t0 = float(str(reads[0]["at"]))
    shown = "\n".join(_show(reads, t0))
    lists = [e for e in reads if not _is_watch(e)]
    assert not lists, f"the informer relisted sandboxes after a refused watch:\n{shown}"
    watches = reads[: len(REFUSALS) + 1]
    assert [e["status"] for e in watches] == [*REFUSALS, 200], shown
    rv = _rv(watches[0])
    assert rv and int(rv) >= int(_rv(opened)), f"a re-watch from before the last watch:\n{shown}"
    assert all(_rv(e) == rv for e in watches), f"a re-watch from another resourceVersion:\n{shown}"
    at = [float(str(e["at"])) for e in watches]
    gaps = [b - a for a, b in itertools.pairwise(at)]
    for status, gap in zip(REFUSALS, gaps, strict=True):
        if status == 429:
            assert gap >= RETRY_AFTER - SLACK, f"Retry-After not honoured:\n{shown}"
    server_errors = [gap for status, gap in zip(REFUSALS, gaps, strict=True) if status >= 500]
    assert server_errors[-1] > server_errors[0], f"no backoff after 5xx:\n{shown}"
    print(f"\nwatches of sandboxes after the fault:\n{shown}")

    claimed = time.monotonic()
    await pclient.create(SANDBOX_CLAIMS, claim_obj("after", pool=POOL), pns)
    served = await check_converged(pclient, pns, pools={POOL: REPLICAS}, claims={"after"})
    assert served["after"] in members, f"claim served cold by {served['after']}, not the pool"
    print(f"a claim after the fault served warm in {time.monotonic() - claimed:.1f}s")
    late = [e for e in _sandbox_reads(px, since) if not _is_watch(e)]
    assert not late, f"sandboxes listed again: {_show(late, t0)}"
