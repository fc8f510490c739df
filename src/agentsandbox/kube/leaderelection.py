"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's timing rules.

Only the replica holding the Lease runs controllers. The holder renews the Lease every
``retry_period``; if it cannot renew for ``renew_deadline`` it stops leading (its work must stop)
before the others may take over, which they do once the Lease has not changed for
``lease_duration`` *as measured by their own clock* (never by comparing wall clocks across
machines). Every write is a compare-and-swap on the Lease's resourceVersion, so when two
candidates race, the API server picks one and the other gets a Conflict.

On a clean shutdown the holder releases the Lease (empty holder, duration 1 s) so that another
replica takes over at its next retry instead of waiting out the lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import math
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import metrics
from .client import Client
from .errors import AlreadyExists, Conflict, KubeError, NotFound
from .resources import LEASES
from .timefmt import format_micro_time

__all__ = [
    "JITTER_FACTOR",
    "LeaderElectionRecord",
    "LeaderElector",
    "default_identity",
]

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
"""Candidates retry after ``retry_period`` stretched by up to 20 % at random, as in client-go."""


def default_identity() -> str:
    """``hostname_uuid``, unique per process, as controller-runtime names its candidates."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """The fields of a Lease's spec that leader election uses."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaderElectionRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=spec.get("holderIdentity") or "",
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class LeaderElector:
    """Campaigns for Lease ``namespace/name`` as ``identity`` and keeps it while it can.

    Callbacks are synchronous and should only signal (set an event, start a task):
    ``on_started_leading()`` once the Lease is ours; ``on_stopped_leading()`` when we stop holding
    it — lost (renewal failed) or given up on :meth:`stop`; ``on_new_leader(identity)`` whenever
    a different holder is observed.
    """

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        namespace: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_on_cancel: bool = True,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        if not name or not namespace:
            raise ValueError("leader election needs a lease name and namespace")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError("renew_deadline must be greater than retry_period * 1.2")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        self._client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._wall_clock = wall_clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._leading = False
        self._leading_event = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._observed: LeaderElectionRecord | None = None
        self._observed_time = 0.0
        self._observed_leader = ""
        self._lease: dict[str, Any] | None = None  # our last successful write
        self._last_renew = 0.0
        self._lost = False
        self._m_status = metrics.LEADER_ELECTION_STATUS.labels(name)
        self._m_slowpath = metrics.LEADER_ELECTION_SLOWPATH.labels(name)
        self._m_status.set(0)

    def __repr__(self) -> str:
        return f"LeaderElector({self.namespace}/{self.name} as {self.identity})"

    # --- state

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def leader(self) -> str:
        """The holder we last observed ("" if none)."""
        return self._observed_leader

    @property
    def lost(self) -> bool:
        """True if we stopped leading because renewal failed (not because we were stopped)."""
        return self._lost

    def healthy(self, tolerance: float = 20.0) -> bool:
        """The ``/healthz`` check: False when leading without a renewal for the lease duration
        plus ``tolerance`` (kube-controller-manager's leader healthz adaptor), or when the
        election loop ended while nobody stopped it (a standby that silently stopped
        campaigning, or a loss the manager has not acted on)."""
        task = self._task
        if task is not None and task.done() and not self._stopping.is_set():
            return False
        if self._leading:
            return self._clock() - self._last_renew <= self.lease_duration + tolerance
        return True

    async def wait_leading(self) -> None:
        await self._leading_event.wait()

    # --- lifecycle

    def start(self) -> None:
        if self._task is not None and not self._task.done():
            return
        self._stopping.clear()
        self._lost = False
        self._task = asyncio.create_task(self.run(), name=f"leader election {self.name}")

    async def stop(self) -> None:
        """Stop campaigning; if leading, stop leading and (``release_on_cancel``) release."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            await task

    @property
    def done(self) -> bool:
        """True when the election loop has ended (stopped, or leadership lost)."""
        return self._task is None or self._task.done()

    async def wait_done(self) -> None:
        task = self._task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def run(self) -> None:
        """Acquire, then renew until stopped or lost; returns when no longer leading."""
        try:
            if not await self._acquire():
                return
            await self._renew()
        finally:
            if self._leading:
                self._set_leading(False)
                if not self._lost and self.release_on_cancel:
                    await self._release()

    # --- the loops

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped meanwhile; True if we should go on."""
        if self._stopping.is_set():
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=max(0.0, seconds))
        return not self._stopping.is_set()

    async def _attempt(self, limit: float) -> bool:
        try:
            return await asyncio.wait_for(self._try_acquire_or_renew(), timeout=limit)
        except TimeoutError:
            log.info("%r: lease request timed out after %.1fs", self, limit)
            return False

    async def _acquire(self) -> bool:
        log.info("%r: attempting to acquire lease", self)
        while not self._stopping.is_set():
            if await self._attempt(self.renew_deadline):
                self._last_renew = self._clock()
                self._set_leading(True)
                log.info("%r: acquired lease", self)
                return True
            jitter = 1.0 + random.random() * (JITTER_FACTOR - 1.0)
            if not await self._sleep(self.retry_period * jitter):
                break
        return False

    async def _renew(self) -> None:
        while await self._sleep(self.retry_period):
            deadline = self._last_renew + self.renew_deadline
            renewed = False
            while not self._stopping.is_set():
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                if await self._attempt(remaining):
                    renewed = True
                    break
                if self._observed_leader not in ("", self.identity):
                    break  # someone else holds a valid lease: we are not the leader any more
                if not await self._sleep(min(self.retry_period, deadline - self._clock())):
                    break
            if self._stopping.is_set():
                return
            if not renewed:
                self._lost = True
                log.error(
                    "%r: failed to renew lease (holder now %r); leadership lost",
                    self,
                    self._observed_leader,
                )
                return
            self._last_renew = self._clock()

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._m_status.set(1 if leading else 0)
        callback = self._on_started if leading else self._on_stopped
        if leading:
            self._leading_event.set()
        else:
            self._leading_event.clear()
        if callback is not None:
            try:
                callback()
            except Exception:
                log.exception("%r: leader election callback failed", self)

    # --- one attempt

    def _observe(self, record: LeaderElectionRecord) -> None:
        if record != self._observed:
            self._observed = record
            self._observed_time = self._clock()
        if record.holder_identity != self._observed_leader:
            self._observed_leader = record.holder_identity
            if record.holder_identity and record.holder_identity != self.identity:
                log.info("%r: new leader observed: %s", self, record.holder_identity)
            if self._on_new_leader is not None and record.holder_identity:
                try:
                    self._on_new_leader(record.holder_identity)
                except Exception:
                    log.exception("%r: on_new_leader callback failed", self)

    def _record(self, previous: LeaderElectionRecord | None) -> LeaderElectionRecord:
        now = format_micro_time(self._wall_clock())
        duration = max(1, math.ceil(self.lease_duration))
        if previous is not None and previous.holder_identity == self.identity:
            return replace(previous, lease_duration_seconds=duration, renew_time=now)
        transitions = 0 if previous is None else previous.lease_transitions + 1
        return LeaderElectionRecord(self.identity, duration, now, now, transitions)

    async def _try_acquire_or_renew(self) -> bool:
        try:
            lease = await self._client.get(LEASES, self.name, self.namespace)
        except NotFound:
            return await self._create()
        except KubeError as err:
            log.info("%r: cannot read lease: %s", self, err)
            return False
        current = LeaderElectionRecord.from_lease(lease)
        self._observe(current)
        holder = current.holder_identity
        if holder and holder != self.identity:
            duration = current.lease_duration_seconds or self.lease_duration
            if self._observed_time + duration > self._clock():
                return False  # held by someone else and not expired
        if self._leading:
            # client-go counts a leader's renewal that reads the Lease before writing it. We
            # have no optimistic write-only fast path, so every renewal takes this slow path.
            self._m_slowpath.inc()
        new = self._record(current)
        body = dict(lease)
        body["spec"] = {**(lease.get("spec") or {}), **new.to_spec()}
        try:
            updated = await self._client.update(LEASES, body, self.namespace)
        except Conflict:
            return False  # someone else wrote it first
        except KubeError as err:
            log.info("%r: cannot update lease: %s", self, err)
            return False
        self._lease = updated
        self._observe(LeaderElectionRecord.from_lease(updated))
        return True

    async def _create(self) -> bool:
        record = self._record(None)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        }
        try:
            created = await self._client.create(LEASES, body, self.namespace)
        except (AlreadyExists, Conflict):
            return False
        except KubeError as err:
            log.info("%r: cannot create lease: %s", self, err)
            return False
        self._lease = created
        self._observe(LeaderElectionRecord.from_lease(created))
        return True

    async def _release(self) -> None:
        """Give the Lease up (empty holder, 1 s duration) so a standby takes over at once."""
        lease = self._lease
        if lease is None:
            return
        record = LeaderElectionRecord.from_lease(lease)
        if record.holder_identity != self.identity:
            return
        now = format_micro_time(self._wall_clock())
        released = LeaderElectionRecord("", 1, now, now, record.lease_transitions)
        body = dict(lease)
        body["spec"] = {**(lease.get("spec") or {}), **released.to_spec()}
        try:
            await asyncio.wait_for(
                self._client.update(LEASES, body, self.namespace), timeout=self.retry_period
            )
        except (KubeError, TimeoutError) as err:
            log.info("%r: could not release lease: %s", self, err)
            return
        self._lease = None
        log.info("%r: released lease", self)
