"""What every claim and pool must satisfy after a fault, and the controller process the fault
tests kill, shared by tests/integration (the kill -9 and split-brain claim bursts) and
tests/faults (the fault suite, ``make test-faults``).

The invariants (issue 13):

- every claim Ready with exactly one sandbox, the one its status names (``check_invariants``);
- no sandbox with two claim owners, now or at any time seen (``SandboxHistory``);
- every pool exactly at its replicas, all Ready (``wait_ready_pool``) and no pool sandbox
  orphaned: every live sandbox is controlled by a pool or a claim that exists (``check_owned``);
- no duplicate creates: every sandbox ever created is accounted for (``SandboxHistory.extra``).

A kill -9 test proves something only if the kill lands while work is in flight: each such test
runs its scenario through ``kill_in_flight``, which tries up to three times (a fresh namespace
each time) and FAILS if no kill landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import Resource
from tests.polling import eventually

from .test_controller_process import EXE
from .test_warmpool import wait_ready_pool

__all__ = [
    "KillMissed",
    "SandboxHistory",
    "bound_claims",
    "check_converged",
    "check_invariants",
    "check_owned",
    "claim_progress",
    "controller_process",
    "kill_in_flight",
    "kill_when",
    "ready_reason",
    "wait_claims_ready",
    "wait_ready_pool",
]

CLAIM_KIND = "SandboxClaim"
POOL_KIND = "SandboxWarmPool"
KILL_TRIES = 3

T = TypeVar("T")


# ------------------------------------------------------------------------------------ process
@contextlib.contextmanager
def controller_process(
    cluster: DevCluster,
    log: Path,
    metrics_port: int | None = None,
    *,
    kubeconfig: Path | str | None = None,
    argv0: Sequence[str] = (),
    flags: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """agent-sandbox-controller in its own process, leader election off (so two may race).

    ``kubeconfig`` (default the cluster's) may point at a proxy; ``argv0`` replaces the console
    script (e.g. ``python tests/faults/short_lease_controller.py``); ``flags`` come last (a later
    flag wins, so ``--leader-elect=true`` turns election back on); ``env`` is added to this
    process's environment. Killed with SIGKILL at exit.
    """
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                *(argv0 or [str(EXE)]),
                f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
                "--extensions",
                "--leader-elect=false",
                "--metrics-bind-address=" + (f"127.0.0.1:{metrics_port}" if metrics_port else "0"),
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--kube-api-qps=1000",
                "--kube-api-burst=2000",
                "--sandbox-concurrent-workers=16",
                "--sandbox-claim-concurrent-workers=16",
                "--zap-log-level=info",
                *flags,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


class KillMissed(Exception):
    """A kill that did not land while work was in flight (the work was done already, or had not
    started): the attempt proves nothing and is tried again."""


async def kill_in_flight(
    cluster: DevCluster,
    namespace: str,
    attempt: Callable[[str], Awaitable[T]],
    *,
    tries: int = KILL_TRIES,
) -> T:
    """``attempt(namespace)``, and again in a fresh namespace each time it raises ``KillMissed``,
    up to ``tries`` times in all; returns what the first attempt that landed returns. If none
    landed, AssertionError listing every miss: the test FAILS, it does not pass untested."""
    misses: list[str] = []
    for i in range(tries):
        ns = namespace
        if i:
            ns = f"t-{uuid.uuid4().hex[:10]}"
            cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        try:
            return await attempt(ns)
        except KillMissed as miss:
            misses.append(f"try {i + 1} ({ns}): {miss}")
            print(f"\nthe kill missed, {tries - i - 1} tries left: {miss}")
        finally:
            if i:
                cluster.api("DELETE", f"/api/v1/namespaces/{ns}")
    raise AssertionError(f"no kill landed while work was in flight in {tries} tries: {misses}")


def bound_claims(claims: Collection[dict[str, Any]]) -> int:
    """How many of ``claims`` have a status naming their sandbox."""
    return sum(1 for c in claims if ((c.get("status") or {}).get("sandbox") or {}).get("name"))


async def kill_when(
    client: Client,
    resource: Resource,
    ns: str,
    proc: subprocess.Popen[bytes],
    ready: Callable[[Collection[dict[str, Any]]], bool],
    *,
    what: str,
    within: float = 30.0,
) -> None:
    """SIGKILL ``proc`` as soon as ``ready(objects)`` holds for the ``resource`` objects of
    ``ns``, from the handler of a watch on them: within milliseconds of the write that made it
    hold, not a poll (a list of everything) later, so that a fast controller is still at work
    when it dies. Returns once the process is dead; AssertionError after ``within`` seconds."""
    objects: dict[str, dict[str, Any]] = {}
    fired = asyncio.Event()

    def on_change(*objs: dict[str, Any]) -> None:
        objects[objs[-1]["metadata"]["uid"]] = objs[-1]
        if not fired.is_set() and proc.poll() is None and ready(objects.values()):
            os.kill(proc.pid, signal.SIGKILL)
            fired.set()

    def on_delete(obj: dict[str, Any]) -> None:
        objects.pop(obj["metadata"]["uid"], None)

    watcher = Informer(client, resource, ns, backoff_base=0.05, backoff_cap=0.5)
    watcher.add_handler(on_change, on_change, on_delete)
    watcher.start()
    try:
        await asyncio.wait_for(fired.wait(), within)
    except TimeoutError:
        raise AssertionError(f"timed out after {within}s waiting for {what}") from None
    finally:
        await watcher.stop()
    proc.wait(10)


# ------------------------------------------------------------------------------------ claims
def ready_reason(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status"), cond.get("reason")
    return None, None


async def ready_claims(client: Client, ns: str, names: set[str]) -> list[dict[str, Any]]:
    """The claims ``names``, every one Ready and bound; else AssertionError saying how many
    are not (and the first few that are not Ready)."""
    claims = [
        c for c in (await client.list(SANDBOX_CLAIMS, ns)).items if c["metadata"]["name"] in names
    ]
    if len(claims) == len(names) and all(
        ready_reason(c)[0] == "True" and (c.get("status") or {}).get("sandbox", {}).get("name")
        for c in claims
    ):
        return claims
    not_ready = [
        (c["metadata"]["name"], ready_reason(c)) for c in claims if ready_reason(c)[0] != "True"
    ]
    missing = len(names) - len(claims)
    raise AssertionError(f"{len(not_ready) + missing} claims not Ready: {not_ready[:5]}")


async def claim_progress(
    client: Client, ns: str, pool_born: Collection[str] | None = None
) -> tuple[int, int]:
    """(claims whose status names a sandbox, sandboxes controlled by a claim whose status does
    not name them yet: the controller is between the two writes of binding them). With
    ``pool_born`` (uids, e.g. ``SandboxHistory.pool_born``) only those sandboxes count as between
    the writes: an adoption of a pool member, not a cold create."""
    claims = (await client.list(SANDBOX_CLAIMS, ns)).items
    named = {
        c["metadata"]["uid"]
        for c in claims
        if ((c.get("status") or {}).get("sandbox") or {}).get("name")
    }
    between = 0
    for sb in (await client.list(SANDBOXES, ns)).items:
        if pool_born is not None and sb["metadata"]["uid"] not in pool_born:
            continue
        refs = sb["metadata"].get("ownerReferences") or []
        if any(r.get("kind") == CLAIM_KIND and r["uid"] not in named for r in refs):
            between += 1
    return len(named), between


async def wait_claims_ready(
    client: Client,
    ns: str,
    names: set[str],
    within: float,
) -> list[dict[str, Any]]:
    claims: list[dict[str, Any]] = await eventually(
        lambda: ready_claims(client, ns, names),
        within=within,
        what=f"{len(names)} claims Ready",
        interval=0.2,
        ignoring=AssertionError,
    )
    return claims


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


async def check_invariants(client: Client, ns: str, claims: list[dict[str, Any]]) -> dict[str, str]:
    """Every claim controls exactly one live sandbox, the one its status names, and no sandbox
    has two claim owners; returns claim -> sandbox."""
    sandboxes = [
        s
        for s in (await client.list(SANDBOXES, ns)).items
        if not s["metadata"].get("deletionTimestamp")
    ]
    by_claim: dict[str, list[str]] = {}
    for sb in sandboxes:
        refs = [
            r for r in sb["metadata"].get("ownerReferences") or [] if r.get("kind") == CLAIM_KIND
        ]
        assert len(refs) <= 1, f"{sb['metadata']['name']} has {len(refs)} claim owners"
        for ref in refs:
            by_claim.setdefault(ref["uid"], []).append(sb["metadata"]["name"])
    out = {}
    for c in claims:
        owned = by_claim.get(c["metadata"]["uid"], [])
        assert owned == [c["status"]["sandbox"]["name"]], (c["metadata"]["name"], owned)
        out[c["metadata"]["name"]] = owned[0]
    assert len(set(out.values())) == len(out), "one sandbox serves two claims"
    return out


async def check_owned(client: Client, ns: str) -> None:
    """No orphan: every live sandbox is controlled by a pool or a claim that exists."""
    owners = {p["metadata"]["uid"] for p in (await client.list(SANDBOX_WARM_POOLS, ns)).items} | {
        c["metadata"]["uid"] for c in (await client.list(SANDBOX_CLAIMS, ns)).items
    }
    orphans = []
    for sb in (await client.list(SANDBOXES, ns)).items:
        if sb["metadata"].get("deletionTimestamp"):
            continue
        ref = _controller(sb)
        if (
            ref is None
            or ref.get("kind") not in (POOL_KIND, CLAIM_KIND)
            or ref["uid"] not in owners
        ):
            orphans.append((sb["metadata"]["name"], ref))
    assert not orphans, f"orphaned sandboxes: {orphans[:5]}"


# ------------------------------------------------------------------------------------ history
class SandboxHistory:
    """Every Sandbox the namespace ever showed, from an informer started before the first write:
    which claims ever controlled each (at most one, ever) and how many were created."""

    def __init__(self, client: Client, ns: str) -> None:
        self.client = client
        self.ns = ns
        self.uids: dict[str, str] = {}  # uid -> name
        self.claims_of: dict[str, set[str]] = {}  # sandbox uid -> claim uids that controlled it
        self.pool_born: set[str] = set()  # sandbox uids first seen controlled by a pool
        self.deleted: set[str] = set()
        self.violations: list[str] = []
        # re-watch quickly after an apiserver restart, so that little goes unseen
        self._informer = Informer(client, SANDBOXES, ns, backoff_base=0.05, backoff_cap=0.5)
        self._informer.add_handler(self._on_change, self._on_change, self._on_delete)

    def _on_change(self, *objs: dict[str, Any]) -> None:
        sb = objs[-1]
        meta = sb["metadata"]
        uid, name = meta["uid"], meta["name"]
        if uid not in self.uids:
            self.uids[uid] = name
            ref = _controller(sb)
            if ref is not None and ref.get("kind") == POOL_KIND:
                self.pool_born.add(uid)
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == CLAIM_KIND]
        if len(refs) > 1:
            self.violations.append(f"{name} has {len(refs)} claim owners at once")
        seen = self.claims_of.setdefault(uid, set())
        seen.update(r["uid"] for r in refs)
        if len(seen) > 1:
            self.violations.append(f"{name} was controlled by {len(seen)} claims over time")

    def _on_delete(self, sb: dict[str, Any]) -> None:
        self.deleted.add(sb["metadata"]["uid"])

    async def __aenter__(self) -> SandboxHistory:
        self._informer.start()
        await asyncio.wait_for(self._informer.wait_synced(), 10)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._informer.stop()

    @property
    def created(self) -> int:
        return len(self.uids)

    def adopted(self) -> set[str]:
        """Names of the sandboxes a claim ever controlled."""
        return {self.uids[uid] for uid, claims in self.claims_of.items() if claims}

    def extra(self, claims: int, replicas: int) -> int:
        """Sandboxes created beyond need: each claim needs one sandbox and each pool ends with
        its replicas, so anything more was over-created (and deleted again)."""
        return self.created - claims - replicas

    def check(self) -> None:
        assert not self.violations, self.violations[:5]

    async def caught_up(self, within: float = 30.0) -> None:
        """Until the informer has seen every sandbox the API lists now (after a fault it may be
        behind the API for a few seconds)."""

        async def missed() -> set[str]:
            live = {
                s["metadata"]["uid"] for s in (await self.client.list(SANDBOXES, self.ns)).items
            }
            return live - set(self.uids)

        await eventually(
            missed,
            accept=lambda missing: not missing,
            within=within,
            what="the history to have every sandbox the API lists",
        )


async def check_converged(
    client: Client,
    ns: str,
    *,
    pools: dict[str, int],
    claims: Collection[str] = (),
    history: SandboxHistory | None = None,
    within: float = 60.0,
) -> dict[str, str]:
    """All the invariants at once: claims Ready with one sandbox each, pools exactly at their
    replicas and Ready, nothing orphaned, no sandbox ever with two claim owners."""
    served: dict[str, str] = {}
    if claims:
        ready = await wait_claims_ready(client, ns, set(claims), within)
        served = await check_invariants(client, ns, ready)
    for pool, replicas in pools.items():
        await wait_ready_pool(client, ns, pool, replicas, within=within)
    await check_owned(client, ns)
    if history is not None:
        await history.caught_up()
        history.check()
    return served
