"""The SandboxWarmPool controller's act step: the writes a plan asks for, in upstream's order.

:class:`PoolWriter` holds them (the reconciler in :mod:`.controller` holds one): adopt and release
first, then stale and stuck deletes, creates (slow-start batches, expectations raised before
each is sent, a lost answer sent again under the same name, the batch cancelled when the pool
goes) or excess deletes, then the status (server-side apply) and its transition event. Every
error is aggregated into the pass's :class:`Outcome` instead of stopping at the first; a
precondition failure (409) is a lost race: look again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_WARM_POOL
from agentsandbox.api.owners import (
    AlreadyOwnedError,
    controller_of,
    controller_reference,
    with_controller_reference,
)
from agentsandbox.api.resources import SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.common.batch import BatchCancelled, slow_start_batch
from agentsandbox.controllers.warmpool.memory import PoolMemory
from agentsandbox.controllers.warmpool.metrics import (
    ADOPTIONS,
    CREATES,
    CURRENT,
    DELETES,
    DELETES_BEFORE_READY,
    DESIRED,
    READY,
)
from agentsandbox.controllers.warmpool.plan import (
    REASON_CREATE_FAILED,
    Plan,
    not_progressing_reason,
    pool_replicas,
    transition_event,
)
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import (
    AlreadyExists,
    ApiConnectionError,
    ApiError,
    Conflict,
    KubeError,
    NotFound,
)
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.store import KubeObject

log = logging.getLogger("agentsandbox.warmpool")

FIELD_MANAGER = "warmpool-controller"
EVENT_RELEASED = "SandboxReleased"
# pool sandboxes are named here, in generateName's format (see named())
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's util/rand alphabet
NAME_SUFFIX = 5
MAX_GENERATED_PREFIX = 63 - NAME_SUFFIX  # apimachinery's maxGeneratedNameLength
NAME_ATTEMPTS = 3
# a create whose answer a connection error lost is sent again with the same name, this often
LOST_ANSWER_RETRIES = 3
LOST_ANSWER_BACKOFF = 0.5  # seconds, doubled each time


def named(blueprint: Mapping[str, Any]) -> dict[str, Any]:
    """The blueprint with a name chosen here, as the apiserver would from its ``generateName``
    (prefix cut to 58 characters + 5 random characters of the same alphabet), and the Sandbox's
    ``agents.x-k8s.io/pod-name`` annotation already naming its pod. Upstream lets the apiserver
    pick the name, so the Sandbox controller has to write the annotation in a second request
    after the pod exists; naming it here saves that write for every pool sandbox (the API
    writes per warm claim, docs/benchmarks.md; docs/design/warmpool.md, "The blueprint").
    ``generateName`` stays in the body (the apiserver stores it, as for upstream's sandboxes)."""
    meta = blueprint["metadata"]
    prefix = str(meta.get("generateName") or "")[:MAX_GENERATED_PREFIX]
    suffix = "".join(secrets.choice(NAME_ALPHABET) for _ in range(NAME_SUFFIX))
    name = prefix + suffix
    annotations = {**(meta.get("annotations") or {}), keys.ANNOTATION_POD_NAME: name}
    return {**blueprint, "metadata": {**meta, "name": name, "annotations": annotations}}


# What a delete came to. A Conflict means the sandbox changed (a claim adopting it, a status
# write) or is no longer the object we saw: the normal case of a race, so look again.
DELETED, GONE, CONFLICT, FAILED = "deleted", "gone", "conflict", "failed"
CONFLICT_RECHECK = 1.0  # seconds: look again this soon after a write lost a race
LOST_EVENT_RECHECK = 30.0  # seconds: look again this soon while our writes are unobserved


@dataclass
class Outcome:
    """What acting on one plan came to."""

    errors: list[BaseException] = field(default_factory=list)
    create_error: BaseException | None = None
    conflicts: int = 0


class PoolWriter:
    """The act step of the warm pool reconciler, which holds one: every write a pool's plan
    asks for. ``expectations`` are shared with the reconciler (raised here before each write,
    lowered by its event handlers); ``sandboxes`` is the cache :meth:`resolve_doubts` looks in
    first."""

    def __init__(
        self,
        client: Client,
        recorder: EventRecorder | None,
        expectations: Expectations,
        sandboxes: Informer,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.expectations = expectations
        self.sandboxes = sandboxes
        # pool UID -> set once the pool is deleted (or being deleted): its create batch stops
        self._gone: dict[str, asyncio.Event] = {}
        # pool UID -> names of creates a connection error left unknown (see resolve_doubts)
        self._in_doubt: dict[str, set[str]] = {}

    def pool_gone(self, uid: str) -> None:
        """The pool is deleted (or being deleted): its running create batch stops at once."""
        gone = self._gone.pop(uid, None)
        if gone is not None:
            gone.set()

    def forget(self, uid: str) -> None:
        """Drop the creates in doubt of a pool that is gone."""
        self._in_doubt.pop(uid, None)

    async def adopt(
        self, pool: KubeObject, orphans: Iterable[Mapping[str, Any]], outcome: Outcome
    ) -> frozenset[str]:
        """Make the pool the controller of each vetted orphan (PUT with its resourceVersion).
        Returns the UIDs whose adoption did not happen: they are not counted this pass."""
        meta = pool["metadata"]
        ns, name = meta["namespace"], meta["name"]
        skipped: set[str] = set()
        for sb in orphans:
            try:
                adopted = with_controller_reference(
                    sb, controller_reference(pool, SANDBOX_WARM_POOL)
                )
                await self.client.update(SANDBOXES, adopted, ns)
            except (NotFound, Conflict, AlreadyOwnedError):
                outcome.conflicts += 1  # gone or changed (another owner?): look again
            except KubeError as err:
                outcome.errors.append(err)
            else:
                ADOPTIONS.labels(ns, name).inc()
                continue
            skipped.add(sb["metadata"]["uid"])
        return frozenset(skipped)

    async def release(
        self, pool: KubeObject, sandboxes: Iterable[Mapping[str, Any]], outcome: Outcome
    ) -> None:
        """Let go of sandboxes the pool controls but no longer labels (another writer removed
        the label): a merge patch dropping the pool's owner reference, preconditioned on the
        resourceVersion we decided on; a 409 or 404 means look again."""
        pmeta = pool["metadata"]
        ns, name, uid = pmeta["namespace"], pmeta["name"], pmeta.get("uid", "")
        for sb in sandboxes:
            meta = sb["metadata"]
            refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != uid]
            body = {
                "metadata": {"resourceVersion": meta["resourceVersion"], "ownerReferences": refs}
            }
            try:
                await self.client.patch(SANDBOXES, meta["name"], body, ns)
            except (NotFound, Conflict):
                outcome.conflicts += 1
                continue
            except KubeError as err:
                outcome.errors.append(err)
                continue
            log.info(
                "released a sandbox that no longer carries the pool label",
                extra={"pool": f"{ns}/{name}", "sandbox": meta["name"]},
            )
            if self.recorder is not None:
                self.recorder.event(
                    pool,
                    "Normal",
                    EVENT_RELEASED,
                    f'Released sandbox "{meta["name"]}": it no longer carries the pool label',
                    action="Release",
                )

    async def act(
        self,
        pool: KubeObject,
        p: Plan,
        outcome: Outcome | None = None,
        *,
        stop: asyncio.Event | None = None,
    ) -> Outcome:
        """Stale deletes, stuck deletes, then creates or excess deletes (adoptions come first,
        in :meth:`adopt`). Every delete carries the UID and resourceVersion we decided on.
        ``stop`` (set when the controller shuts down) ends slow-start batches between two
        batches."""
        outcome = outcome if outcome is not None else Outcome()
        meta = pool["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        key = f"{ns}/{name}"

        for reason, group in (("stale", p.delete_stale), ("stuck", p.delete_stuck)):
            for sb in group:
                if reason == "stuck":
                    log.info(
                        "deleting sandbox not Ready after the grace period",
                        extra={"pool": key, "sandbox": sb["metadata"]["name"]},
                    )
                await self._delete(pool, sb, reason, outcome)

        if p.create and p.blueprint is not None:
            await self._create(pool, p.create, p.blueprint, outcome, stop)

        if p.delete_excess:
            victims = p.delete_excess
            self.expectations.expect_deletions(uid, [v["metadata"]["uid"] for v in victims])
            attempted: set[int] = set()

            async def delete(i: int) -> None:
                attempted.add(i)
                if await self._delete(pool, victims[i], "excess", outcome, record=False) == FAILED:
                    raise _BatchStop()

            try:
                await slow_start_batch(len(victims), 1, delete, stop=stop)
            finally:  # also on cancellation: what was never sent will never be observed
                for i, v in enumerate(victims):
                    if i not in attempted:
                        self.expectations.deletion_failed(uid, v["metadata"]["uid"])
        return outcome

    async def _create(
        self,
        pool: KubeObject,
        count: int,
        blueprint: Mapping[str, Any],
        outcome: Outcome,
        stop: asyncio.Event | None,
    ) -> None:
        meta = pool["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        self.expectations.expect_creations(uid, count)
        ok = doubtful = 0

        async def create(_: int) -> None:
            nonlocal ok, doubtful
            try:
                for attempt in range(NAME_ATTEMPTS):
                    body = named(blueprint)
                    try:
                        await self._create_named(body, ns, uid)
                        break
                    except AlreadyExists:  # a generated name taken: another one
                        if attempt == NAME_ATTEMPTS - 1:
                            raise
                    except ApiConnectionError:
                        # maybe done, maybe not: still expected until the next pass knows
                        self._in_doubt.setdefault(uid, set()).add(body["metadata"]["name"])
                        doubtful += 1
                        raise
            except Exception:
                CREATES.labels(ns, name, "error").inc()
                raise
            ok += 1
            CREATES.labels(ns, name, "success").inc()

        error: BaseException | None = None
        gone = self._gone.setdefault(uid, asyncio.Event())
        try:
            # the batch (its creates wait in the client's rate limiter) is cancelled the moment
            # the pool is deleted: nothing is created for a pool that is gone
            _, error = await _unless(gone, slow_start_batch(count, 1, create, stop=stop))
        finally:  # failed, never sent, or cancelled: those creates will never be observed
            if ok + doubtful < count:
                self.expectations.creation_failed(uid, count - ok - doubtful)
        if isinstance(error, BatchCancelled):
            return  # shutting down, or the pool is gone: the next leader carries on
        if error is not None:
            outcome.create_error = error
            outcome.errors.append(error)

    async def resolve_doubts(self, pool: KubeObject) -> None:
        """Settle the creates whose outcome a connection error left unknown (their expectations
        are still raised): one the cache shows, or a GET finds, was done (its ADDED event lowers
        the expectation); one the apiserver does not have failed (lowered here). Still
        unreachable: asked again next pass (the expectations expire after 5 minutes anyway)."""
        meta = pool["metadata"]
        uid, ns = meta.get("uid", ""), meta["namespace"]
        names = self._in_doubt.get(uid)
        if not names:
            return
        for name in sorted(names):
            if self.sandboxes.get(name, ns) is None:
                try:
                    await self.client.get(SANDBOXES, name, ns)
                except NotFound:
                    self.expectations.creation_failed(uid, 1)
                except KubeError:
                    continue  # still unknown
            names.discard(name)
        if not names:
            del self._in_doubt[uid]

    async def _create_named(self, body: Mapping[str, Any], ns: str, pool_uid: str) -> None:
        """POST one named pool sandbox. A connection error may have lost the answer of a create
        that was done: the same name is sent again (after 0.5, 1, 2 s), and ``AlreadyExists``
        for a sandbox this pool controls then means the first try made it. Without that, the
        next pass (whose cache cannot show a sandbox while the apiserver is unreachable) would
        create another under a new name, and one would be trimmed later."""
        name = body["metadata"]["name"]
        for attempt in range(LOST_ANSWER_RETRIES + 1):
            try:
                await self.client.create(SANDBOXES, body, ns)
                return
            except ApiConnectionError as err:
                if attempt == LOST_ANSWER_RETRIES:
                    raise
                log.info(
                    "pool sandbox create got no answer (%s); sending it again",
                    err,
                    extra={"namespace": ns, "sandbox": name},
                )
                await asyncio.sleep(LOST_ANSWER_BACKOFF * 2**attempt)
            except AlreadyExists:
                if attempt == 0:
                    raise  # the name was taken before we sent it: the caller picks another
                existing = await self.client.get(SANDBOXES, name, ns)
                if (controller_of(existing) or {}).get("uid") == pool_uid:
                    return  # ours: an earlier try whose answer was lost
                raise

    async def _delete(
        self,
        pool: KubeObject,
        sb: Mapping[str, Any],
        reason: str,
        outcome: Outcome,
        *,
        record: bool = True,
    ) -> str:
        """Delete one sandbox if it is still exactly the object we decided on.

        Only the pool's own sandboxes raise expectations (an orphan's deletion is not counted,
        so nothing needs to wait for it)."""
        meta = sb["metadata"]
        pmeta = pool["metadata"]
        ns, name, pool_uid = pmeta["namespace"], pmeta["name"], pmeta.get("uid", "")
        ref = controller_of(sb)
        mine = ref is not None and ref.get("uid") == pool_uid
        if record and mine:
            self.expectations.expect_deletions(pool_uid, [meta["uid"]])
        try:
            await self.client.delete(
                SANDBOXES,
                meta["name"],
                meta["namespace"],
                uid=meta["uid"],
                resource_version=meta.get("resourceVersion"),
                propagation_policy="Background",
            )
        except NotFound:
            self.expectations.deletion_observed(pool_uid, meta["uid"])
            return GONE
        except Conflict:
            # changed since we looked (adopted by a claim, a status write) or replaced: not an
            # error, look again
            self.expectations.deletion_failed(pool_uid, meta["uid"])
            outcome.conflicts += 1
            log.debug(
                "sandbox changed before its delete; looking again",
                extra={"pool": f"{ns}/{name}", "sandbox": meta["name"], "reason": reason},
            )
            return CONFLICT
        except KubeError as err:
            self.expectations.deletion_failed(pool_uid, meta["uid"])
            outcome.errors.append(err)
            return FAILED
        except asyncio.CancelledError:
            self.expectations.deletion_failed(pool_uid, meta["uid"])
            raise
        DELETES.labels(ns, name, reason).inc()
        if mine and not is_sandbox_ready(sb):
            DELETES_BEFORE_READY.labels(ns, name).inc()  # churn: made, then deleted unused
        return DELETED

    async def write_status(
        self,
        pool: KubeObject,
        p: Plan,
        create_error: BaseException | None = None,
        memory: PoolMemory | None = None,
    ) -> None:
        """Write status when it changed (including counts going back to 0); then, once it is
        written, announce a transition with an event (once, however often the pass repeats)."""
        meta = pool["metadata"]
        ns, name = meta["namespace"], meta["name"]
        status = p.status
        if create_error is not None:
            status = _with_create_failure(status, create_error)
        old = pool.get("status") or {}
        DESIRED.labels(ns, name).set(pool_replicas(pool))
        CURRENT.labels(ns, name).set(status["replicas"])
        READY.labels(ns, name).set(status["readyReplicas"])
        DELETES_BEFORE_READY.labels(ns, name)  # at 0 from the first pass: a churn ratio exists
        if not all(old.get(k) == v for k, v in status.items()):
            body = {
                "apiVersion": SANDBOX_WARM_POOL.api_version,
                "kind": SANDBOX_WARM_POOL.kind,
                "metadata": {"name": name, "namespace": ns},
                "status": status,
            }
            await self.client.apply(
                SANDBOX_WARM_POOLS,
                body,
                field_manager=FIELD_MANAGER,
                force=True,
                namespace=ns,
                subresource="status",
            )
        reported = memory.reported if memory else not_progressing_reason(old)
        event = transition_event(reported, status)
        if memory is not None:
            memory.reported = not_progressing_reason(status)
        if event is not None and self.recorder is not None:
            kind, reason, note = event
            self.recorder.event(pool, kind, reason, note, action="Reconciling")


async def _unless(
    gone: asyncio.Event, work: Coroutine[Any, Any, tuple[int, BaseException | None]]
) -> tuple[int, BaseException | None]:
    """Run a slow-start batch ``work``; cancel it when ``gone`` is set first."""
    if gone.is_set():
        work.close()
        return 0, BatchCancelled()
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return 0, BatchCancelled()
    return task.result()


class _BatchStop(Exception):
    """Ends a slow-start batch after a failed delete (the error is already in the outcome)."""


def _with_create_failure(status: Mapping[str, Any], err: BaseException) -> dict[str, Any]:
    out = dict(status)
    message = err.message if isinstance(err, ApiError) and err.message else str(err)
    conditions = []
    for cond in status.get("conditions", []):
        if cond.get("type") == "Ready":
            cond = {
                **cond,
                "status": "False",
                "reason": REASON_CREATE_FAILED,
                "message": f"creating sandboxes failed: {message}",
            }
        conditions.append(cond)
    out["conditions"] = conditions
    return out


__all__ = [
    "CONFLICT_RECHECK",
    "EVENT_RELEASED",
    "FIELD_MANAGER",
    "LOST_EVENT_RECHECK",
    "Outcome",
    "PoolWriter",
    "named",
]
