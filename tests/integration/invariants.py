"""What every claim and pool must satisfy after a fault, and the controller process the fault
tests kill, shared by tests/integration (the kill -9 and split-brain claim bursts) and
tests/faults (the fault suite, ``make test-faults``).

The invariants (issue 13):

- every claim Ready with exactly one sandbox, the one its status names (``check_invariants``);
- no sandbox with two claim owners, now or at any time seen (``SandboxHistory``);
- the claim rules over the whole history (``SandboxHistory``, ``history_violations``): a
  claim's first Ready sandbox is the only one its status names while that sandbox lives, no
  sandbox has two claim owners, and none that a live, unexpired claim was first Ready with is
  deleted by us (the audit log says who deleted it); a watch that had to relist is a failure.
  Every module whose tests make claims checks them in an autouse fixture (``checked_history``);
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
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import ApiConnectionError, ApiError, Gone
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import Resource
from agentsandbox.kube.transport import _USER_AGENT
from tests.polling import eventually

from .test_controller_process import EXE
from .test_warmpool import wait_ready_pool

__all__ = [
    "AuditDelete",
    "KillMissed",
    "SandboxHistory",
    "Version",
    "bound_claims",
    "check_converged",
    "check_invariants",
    "check_owned",
    "checked_history",
    "claim_progress",
    "controller_process",
    "history_violations",
    "kill_in_flight",
    "kill_when",
    "ready_reason",
    "wait_claims_ready",
    "wait_ready_pool",
]

CLAIM_KIND = "SandboxClaim"
SANDBOX_KIND = "Sandbox"
STALLED = 3.0  # seconds a watch may stay behind a LIST before it is reopened
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
#: The user agent every request of the project's own client starts with (the controller's, in
#: its own process or in the test's): a delete the audit log shows with it was made by us.
OUR_AGENT = _USER_AGENT.split("/")[0] + "/"
#: The field manager the API server names our writes by (its user agent up to the "/"): the
#: writer of a claim status the controller wrote, by the object's managedFields.
OUR_MANAGER = OUR_AGENT.rstrip("/")


@dataclass(frozen=True)
class Version:
    """One version of a claim or a sandbox, as the history's first LIST (``LISTED``) or its
    watch (``ADDED``, ``MODIFIED``, ``DELETED``) delivered it. ``rv`` orders versions of both
    kinds: the control plane's resourceVersions are etcd revisions, one sequence for every
    object (a DELETED event carries the revision of the delete)."""

    rv: int
    event: str
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def ref(self) -> str:
        meta = self.obj["metadata"]
        return f"{meta.get('namespace')}/{meta['name']}"


@dataclass(frozen=True)
class AuditDelete:
    """One delete of a sandbox or a claim, from the control plane's audit log: who asked
    (``agent``, the request's user agent), when (``at``, epoch seconds) and the answer's code.
    ``name`` is empty for a delete of the whole collection."""

    at: float
    resource: str
    namespace: str
    name: str
    agent: str
    code: int

    @property
    def ours(self) -> bool:
        return self.agent.startswith(OUR_AGENT)


def read_audit(path: Path, offset: int = 0) -> list[AuditDelete]:
    """The successful and refused deletes of sandboxes and claims logged after ``offset``."""
    out: list[AuditDelete] = []
    with path.open("rb") as log:
        log.seek(offset)
        for line in log:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a record being written as we read
            ref = ev.get("objectRef") or {}
            if ev.get("verb") not in ("delete", "deletecollection") or ref.get("resource") not in (
                "sandboxes",
                "sandboxclaims",
            ):
                continue
            out.append(
                AuditDelete(
                    at=parse_rfc3339(ev["requestReceivedTimestamp"]).timestamp(),
                    resource=ref["resource"],
                    namespace=ref.get("namespace") or "",
                    name=ref.get("name") or "",
                    agent=ev.get("userAgent") or "",
                    code=int((ev.get("responseStatus") or {}).get("code") or 0),
                )
            )
    return out


def _claim_refs(obj: dict[str, Any]) -> list[str]:
    refs = obj["metadata"].get("ownerReferences") or []
    return [r["uid"] for r in refs if r.get("kind") == CLAIM_KIND]


def _ending(v: Version) -> bool:
    return v.event == "DELETED" or bool(v.obj["metadata"].get("deletionTimestamp"))


def _ready_with(claim: dict[str, Any]) -> str:
    """The sandbox a claim's status names while the claim is Ready, else ""."""
    name = ((claim.get("status") or {}).get("sandbox") or {}).get("name") or ""
    return str(name) if ready_reason(claim)[0] == "True" else ""


def _expired(claim: dict[str, Any], sandbox: dict[str, Any], at: float) -> bool:
    """Whether at ``at`` the claim had expired (its ``shutdownTime``, or its ``Finished`` time
    plus ``ttlSecondsAfterFinished``) or the sandbox had reached its own ``shutdownTime``."""
    lifecycle = (claim.get("spec") or {}).get("lifecycle") or {}
    terms = [lifecycle.get("shutdownTime"), (sandbox.get("spec") or {}).get("shutdownTime")]
    ends = [parse_rfc3339(t).timestamp() for t in terms if t]
    ttl = lifecycle.get("ttlSecondsAfterFinished")
    for cond in (claim.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Finished" and cond.get("status") == "True" and ttl is not None:
            ends.append(parse_rfc3339(cond["lastTransitionTime"]).timestamp() + float(ttl))
    return any(end <= at for end in ends)


def deleter(deletes: Sequence[AuditDelete], sandbox: dict[str, Any]) -> AuditDelete | None:
    """The audit record of the delete that ended ``sandbox``: the first successful delete of
    its name (or of its namespace's whole collection) since it was created."""
    meta = sandbox["metadata"]
    born = parse_rfc3339(meta["creationTimestamp"]).timestamp()  # whole seconds: rounded down
    for rec in sorted(deletes, key=lambda d: d.at):
        if (
            rec.resource == "sandboxes"
            and rec.namespace == meta.get("namespace")
            and rec.name in ("", meta["name"])
            and 200 <= rec.code < 300
            and rec.at >= born
        ):
            return rec
    return None


@dataclass
class _Doomed:
    """A claim's first Ready sandbox whose deletion began while the claim lived."""

    claim: dict[str, Any]
    sandbox: dict[str, Any]
    rv: int
    reported_expired: bool


def history_violations(
    versions: Iterable[Version],
    deletes: Sequence[AuditDelete] | None,
    gaps: Sequence[str] = (),
) -> list[str]:
    """Every way the recorded history breaks the claim rules (empty: it keeps them).

    - the history is whole: no watch had to relist (``gaps``);
    - a claim's first Ready sandbox is the only sandbox its status names while that sandbox
      lives (until its deletion begins), as the controller writes it (a status whose
      ``status.sandbox.name`` another field manager wrote, a test's forgery, is not judged);
      a status naming a sandbox not made yet (a status not
      written by the controller: a test's, or one copied from elsewhere) names the one made
      next under that name;
    - no sandbox has two claim owners (in its owner references at once or one after the other)
      nor is the first Ready sandbox of two claims;
    - no claim's first Ready sandbox is deleted by us (``OUR_AGENT`` in ``deletes``, the audit
      log's records; None: there is no audit log) while the claim lives and has not expired.
    """
    out = [f"the watch of {gap} had to relist: the history has a gap" for gap in gaps]
    live: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid of the sandbox now
    latest: dict[str, dict[str, Any]] = {}  # uid -> its latest version so far
    owners: dict[str, set[str]] = {}  # sandbox uid -> every claim uid it was controlled by
    ended: set[str] = set()  # uids whose deletion began
    bound: dict[str, tuple[str, str]] = {}  # claim uid -> (sandbox uid, name) first Ready with
    bound_to: dict[str, str] = {}  # sandbox uid -> the claim first Ready with it
    expired: set[str] = set()  # claims whose status said ClaimExpired
    swapped: set[str] = set()
    doomed: list[_Doomed] = []
    pending: dict[str, tuple[str, str]] = {}  # claim uid -> the sandbox it named, not made yet
    seen: set[tuple[str, int, str]] = set()

    def bind(claim: str, sb: str, name: str, v: Version) -> list[str]:
        if sb in bound_to:
            return [
                f"{name} is the first Ready sandbox of two claims: "
                f"{bound_to[sb]} and {claim} (rv {v.rv})"
            ]
        bound[claim] = (sb, name)
        bound_to[sb] = claim
        return []

    for v in sorted(versions, key=lambda v: v.rv):
        if (v.uid, v.rv, v.event) in seen:
            continue  # a relist delivered it again
        seen.add((v.uid, v.rv, v.event))
        meta = v.obj["metadata"]
        latest[v.uid] = v.obj
        if v.kind == CLAIM_KIND:
            if ready_reason(v.obj)[1] == "ClaimExpired":
                expired.add(v.uid)
            name = _ready_with(v.obj)
            first = bound.get(v.uid)
            if first is None and name and v.uid not in pending:
                sb = live.get((meta.get("namespace", ""), name))
                if sb is None:  # written by someone else before the sandbox: bound once made
                    pending[v.uid] = (meta.get("namespace", ""), name)
                else:
                    out.extend(bind(v.uid, sb, name, v))
            elif first is not None and v.uid not in swapped:
                named = ((v.obj.get("status") or {}).get("sandbox") or {}).get("name")
                ours = v.obj.get("writer") in (None, OUR_MANAGER)
                if named and named != first[1] and first[0] not in ended and ours:
                    swapped.add(v.uid)
                    out.append(
                        f"claim {v.ref} names {named} at rv {v.rv} while {first[1]}, the first "
                        "sandbox it was Ready with, still lives"
                    )
            if _ending(v):
                ended.add(v.uid)
            continue
        if v.kind != SANDBOX_KIND:
            continue
        key = (meta.get("namespace", ""), meta["name"])
        if v.event == "DELETED":
            if live.get(key) == v.uid:
                del live[key]
        else:
            live[key] = v.uid
            for waiting, wanted in list(pending.items()):
                if wanted == key and waiting not in ended:
                    del pending[waiting]
                    out.extend(bind(waiting, v.uid, key[1], v))
        refs = _claim_refs(v.obj)
        if len(refs) > 1:
            out.append(f"{v.ref} has {len(refs)} claim owners at once (rv {v.rv})")
        had = owners.setdefault(v.uid, set())
        if len(had) < 2 and len(had | set(refs)) > 1:
            out.append(f"{v.ref} was controlled by two claims one after the other (rv {v.rv})")
        had.update(refs)
        if _ending(v) and v.uid not in ended:
            ended.add(v.uid)
            owner = bound_to.get(v.uid)
            if owner is not None and owner not in ended:
                doomed.append(_Doomed(latest[owner], v.obj, v.rv, owner in expired))
    for d in doomed:
        out.extend(_deleted_by_us(d, deletes))
    return out


def _deleted_by_us(d: _Doomed, deletes: Sequence[AuditDelete] | None) -> list[str]:
    what = (
        f"{d.sandbox['metadata']['name']}, the first Ready sandbox of claim "
        f"{d.claim['metadata']['namespace']}/{d.claim['metadata']['name']}, began to be deleted "
        f"at rv {d.rv} while the claim lived"
    )
    if deletes is None:
        return [f"{what}, and there is no audit log to tell who deleted it"]
    rec = deleter(deletes, d.sandbox)
    if rec is None:
        return [f"{what}, and the audit log has no record of the delete"]
    if not rec.ours or d.reported_expired or _expired(d.claim, d.sandbox, rec.at):
        return []
    return [f"{what} and had not expired: deleted by us ({rec.agent}, code {rec.code})"]


_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",
)


def _name_writer(obj: dict[str, Any]) -> str | None:
    """The field manager that wrote the claim's ``status.sandbox.name`` (None: not known)."""
    for entry in obj["metadata"].get("managedFields") or []:
        fields = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:sandbox") or {}
        if "f:name" in fields:
            return str(entry.get("manager", ""))
    return None


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """What the checks read of an object (an hour of soak keeps every version in memory)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = [
        c for c in status.get("conditions") or [] if c.get("type") in ("Ready", "Finished")
    ]
    return {
        "kind": obj.get("kind"),
        "metadata": {k: v for k, v in obj["metadata"].items() if k in _KEPT_METADATA},
        "spec": {k: spec[k] for k in ("lifecycle", "shutdownTime") if k in spec},
        "status": {"sandbox": status.get("sandbox") or {}, "conditions": conditions},
        "writer": _name_writer(obj),
    }


class _Watch:
    """One resource's versions, from a LIST and then a watch from the LIST's resourceVersion;
    resumed from the last resourceVersion seen when the connection breaks. A watch that cannot
    resume (410 Gone: the version is too old) is a gap in the history: recorded, then relisted."""

    def __init__(self, history: SandboxHistory, resource: Resource) -> None:
        self.history = history
        self.resource = resource
        self.rv = ""
        self.live: dict[str, str] = {}  # uid -> resourceVersion of every object now
        self.task: asyncio.Task[None] | None = None
        self.behind_since: float | None = None
        # for the message of a catch-up that timed out
        self.reopened = 0
        self.errors: list[str] = []  # the last few errors of the watch, newest last
        self.diff = ""

    @property
    def what(self) -> str:
        return f"{self.resource.plural} in {self.history.ns or 'every namespace'}"

    async def start(self) -> None:
        await self._list()
        self.task = asyncio.create_task(self._run(), name=f"history {self.what}")

    async def _list(self) -> None:
        listed = await self.history.client.list(self.resource, self.history.ns)
        self.live = {}  # after a gap: what was deleted meanwhile is not in the LIST
        for obj in listed.items:
            self.history._record(self, "LISTED", obj)
        self.rv = listed.resource_version

    async def _run(self) -> None:
        errors = 0
        try:
            while errors < 20:
                try:
                    async with self.history.client.watch(
                        self.resource, self.history.ns, resource_version=self.rv
                    ) as stream:
                        async for ev in stream:
                            errors = 0
                            if ev.type != "BOOKMARK":
                                self.history._record(self, ev.type, ev.object)
                            self.rv = stream.resource_version or self.rv
                except Gone as err:
                    self._error(err)
                    self.history.gaps.append(f"{self.what} from rv {self.rv} ({err})")
                    await self._reachable()
                    await self._list()
                except (ApiConnectionError, ApiError) as err:
                    self._error(err)
                    errors += 1
                    await self._reachable()
            self.history.gaps.append(f"{self.what}: the watch kept failing from rv {self.rv}")
        except AssertionError as err:  # the API unreachable for two minutes
            self.history.gaps.append(f"{self.what} from rv {self.rv}: {err}")

    def _error(self, err: BaseException) -> None:
        self.errors = [*self.errors[-4:], f"rv {self.rv}: {type(err).__name__}: {err}"[:300]]

    def state(self) -> str:
        """What a catch-up that timed out reports: how far behind, and what the watch met."""
        task = self.task
        if task is None:
            ran = "never started"
        elif not task.done():
            ran = "running"
        elif task.cancelled():
            ran = "cancelled"
        else:
            ran = f"ended ({task.exception()!r})"
        return (
            f"watch from rv {self.rv} {ran}, reopened {self.reopened} times; differs from the "
            f"LIST in {self.diff}; last errors: {self.errors or 'none'}"
        )

    async def _reachable(self) -> None:
        await eventually(
            lambda: self.history.client.list_page(self.resource, self.history.ns, limit=1),
            within=120,
            what=f"the API to answer again ({self.what})",
            interval=0.1,
            accept=lambda _: True,
            ignoring=(ApiConnectionError, ApiError),
        )

    async def caught_up(self) -> bool:
        """Whether the watch has delivered every change up to a LIST taken now: the same
        objects at the same resourceVersions."""
        listed = await self.history.client.list(self.resource, self.history.ns)
        now = {o["metadata"]["uid"]: o["metadata"]["resourceVersion"] for o in listed.items}
        if now == self.live:
            self.behind_since = None
            return True
        missing = [u for u in now if self.live.get(u) != now[u]]
        extra = [u for u in self.live if u not in now]
        self.diff = (
            f"{len(missing)} objects missing or older (e.g. "
            f"{[(u, self.live.get(u), now[u]) for u in missing[:2]]}), {len(extra)} deleted"
            f" in the LIST at rv {listed.resource_version}"
        )
        # a stream that stalled without a word (seen after an etcd compaction) is reopened
        # from the last resourceVersion it delivered: resumed, or a 410 and so a gap. The task
        # reading it is restarted (closing the stream alone may leave a read waiting)
        started = self.behind_since = self.behind_since or time.monotonic()
        if time.monotonic() - started > STALLED:
            self.behind_since = None
            self.reopened += 1
            await self.stop()
            self.task = asyncio.create_task(self._run(), name=f"history {self.what}")
        return False

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class SandboxHistory:
    """Every version of every SandboxClaim and Sandbox of a namespace (``ns``; None: all of
    them), from a LIST and then a watch from its resourceVersion (not an informer, which would
    relist over a gap without a word: a relist here fails ``check``), and the deletes of them
    in the control plane's audit log (``audit``, read from its size at the start).

    ``check`` asserts the claim rules of ``history_violations`` over it; ``created``, ``extra``
    and ``pool_born`` count the sandboxes it saw."""

    def __init__(self, client: Client, ns: str | None, *, audit: Path | None = None) -> None:
        self.client = client
        self.ns = ns
        self.audit = audit
        self.audit_offset = 0
        self.versions: list[Version] = []
        self.gaps: list[str] = []
        self.uids: dict[str, str] = {}  # sandbox uid -> name
        self.pool_born: set[str] = set()  # sandbox uids first seen controlled by a pool
        self.deleted: set[str] = set()
        self._watches = [_Watch(self, SANDBOX_CLAIMS), _Watch(self, SANDBOXES)]

    def _record(self, watch: _Watch, event: str, obj: dict[str, Any]) -> None:
        obj = _slim(obj)
        meta = obj["metadata"]
        self.versions.append(Version(int(meta["resourceVersion"]), event, obj))
        if event == "DELETED":
            watch.live.pop(meta["uid"], None)
        else:
            watch.live[meta["uid"]] = meta["resourceVersion"]
        if obj.get("kind") != SANDBOX_KIND:
            return
        if meta["uid"] not in self.uids:
            self.uids[meta["uid"]] = meta["name"]
            ref = _controller(obj)
            if ref is not None and ref.get("kind") == POOL_KIND:
                self.pool_born.add(meta["uid"])
        if event == "DELETED":
            self.deleted.add(meta["uid"])

    async def __aenter__(self) -> SandboxHistory:
        if self.audit is not None and self.audit.exists():
            self.audit_offset = self.audit.stat().st_size
        for watch in self._watches:
            await watch.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for watch in self._watches:
            await watch.stop()

    @property
    def created(self) -> int:
        return len(self.uids)

    @property
    def claims_of(self) -> dict[str, set[str]]:
        """Sandbox uid -> the uids of every claim that ever controlled it."""
        out: dict[str, set[str]] = {uid: set() for uid in self.uids}
        for v in self.versions:
            if v.kind == SANDBOX_KIND:
                out[v.uid].update(_claim_refs(v.obj))
        return out

    def adopted(self) -> set[str]:
        """Names of the sandboxes a claim ever controlled."""
        return {self.uids[uid] for uid, claims in self.claims_of.items() if claims}

    def extra(self, claims: int, replicas: int) -> int:
        """Sandboxes created beyond need: each claim needs one sandbox and each pool ends with
        its replicas, so anything more was over-created (and deleted again)."""
        return self.created - claims - replicas

    def deletes(self) -> list[AuditDelete] | None:
        """The audit log's deletes since the history started (None: no audit log)."""
        if self.audit is None or not self.audit.exists():
            return None
        return read_audit(self.audit, self.audit_offset)

    @property
    def violations(self) -> list[str]:
        return history_violations(self.versions, self.deletes(), self.gaps)

    def check(self) -> None:
        """AssertionError naming the first few violations of the claim rules, if any; with
        ``AGENTSANDBOX_HISTORY_DUMP`` set to a file, every version recorded is added to it then
        (one JSON line each: resourceVersion, event, object) to read the sequence."""
        found = self.violations
        dump = os.environ.get("AGENTSANDBOX_HISTORY_DUMP")
        if found and dump:
            _append(
                Path(dump),
                "".join(json.dumps([v.rv, v.event, v.obj]) + "\n" for v in self.versions),
            )
        assert not found, f"{len(found)} claim history violations: {found[:5]}"

    async def caught_up(self, within: float = 30.0) -> None:
        """Until every watch has delivered every change up to now (after a fault it may be
        behind the API for a few seconds); then until the audit log holds the record of every
        delete the check needs (it is written as the delete is answered: at once, as a rule)."""
        for watch in self._watches:
            await eventually(
                watch.caught_up,
                within=within,
                what=lambda w=watch: (
                    f"the history of {w.what} to catch up with a LIST: {w.state()}"
                ),
                interval=0.05,
            )
        if self.audit is not None and self.audit.exists():
            with contextlib.suppress(AssertionError):  # still missing: ``check`` says so
                await eventually(
                    lambda: not any("no record" in v for v in self.violations),
                    within=5.0,
                    what="the audit log to record every delete",
                    interval=0.05,
                )


@contextlib.asynccontextmanager
async def checked_history(
    cluster: DevCluster, test: str = "", *, kubeconfig: Path | None = None
) -> AsyncIterator[SandboxHistory]:
    """For an autouse fixture of every module whose tests make claims: the history of every
    claim and sandbox of ``cluster`` from the test's start to its end, checked at the end
    (after the watches caught up with a LIST) against the claim rules. The namespaces the test
    made after it started (``kill_in_flight``'s retries) are in it too. It reads through a
    client of its own (of ``kubeconfig``, default the cluster's).

    With ``AGENTSANDBOX_HISTORY_TIMES`` set to a file, a line is added to it per test: the
    ``test``'s name and the seconds the history took to start and to catch up and check."""
    audit = cluster.logs / "audit.log"
    t0 = time.monotonic()
    async with (
        Client.from_kubeconfig(str(kubeconfig or cluster.kubeconfig), qps=0) as client,
        SandboxHistory(client, None, audit=audit if audit.exists() else None) as history,
    ):
        started = time.monotonic() - t0
        yield history
        t1 = time.monotonic()
        await history.caught_up()
    history.check()
    times = os.environ.get("AGENTSANDBOX_HISTORY_TIMES")
    if times:
        _append(Path(times), f"{test} {started:.3f} {time.monotonic() - t1:.3f}\n")


def _append(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line)


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
