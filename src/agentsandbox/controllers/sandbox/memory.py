"""What the Sandbox controller remembers between passes to save writes (act-step helpers).

- :class:`StatusMemory` — the status our last status write returned, until the cache shows that
  version. We are the only writer of a Sandbox's status, so it is what the apiserver holds: a pass
  started by another event (our own pod patch, say) before the cache caught up decides on it and
  does not write the same status a second time.
- :class:`FirstStatusHold` — after creating a Sandbox's pod, a *first* status that would only say
  ``DependenciesNotReady`` waits a moment for the pod to become Ready: one status write per new
  Sandbox instead of two (a deliberate deviation, docs/design/sandbox.md, "Writes").
- :class:`CreatedPods` — the pods this process created that the pod cache has not shown yet: a
  pass that runs before the cache catches up uses the create's answer instead of creating again.
- :class:`MigrationPace` — status writes that only bring an earlier release's status up to date
  take turns at a steady rate, so an upgrade over thousands of Sandboxes does not flood the API
  server (docs/design/sandbox.md, "Writes").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentsandbox.controllers.sandbox.status import is_first_pending_status, is_migration_only
from agentsandbox.kube.store import KubeObject

#: Seconds a new pod gets before a first "not ready yet" status is written anyway.
FIRST_STATUS_GRACE: Final = 1.0
#: Seconds a created pod may stay unseen by the cache before it is forgotten.
CREATED_POD_TTL: Final = 10.0
#: Seconds our last written status is trusted over a cache that has not shown it (an informer that
#: skipped our version, e.g. after a relist, must not pin it for longer).
STATUS_MEMORY: Final = 30.0
#: Migration-only status writes per second, and how many may go at once after a quiet spell.
MIGRATION_RATE: Final = 50.0
MIGRATION_BURST: Final = 50
_BOUND = 1024  # entries before the expired ones are swept

Key = tuple[str, str]  # (namespace, name)


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


@dataclass(frozen=True, slots=True)
class _Written:
    uid: str
    resource_version: str
    status: Mapping[str, Any]
    at: float


class StatusMemory:
    """The status each Sandbox's last status write returned, while the cache lags it."""

    def __init__(
        self, ttl: float = STATUS_MEMORY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._written: dict[Key, _Written] = {}

    def __len__(self) -> int:
        return len(self._written)

    # informer handlers
    def seen(self, obj: KubeObject) -> None:
        written = self._written.get(_key(obj))
        meta = obj.get("metadata") or {}
        if written is not None and (
            written.uid != meta.get("uid")
            or written.resource_version == meta.get("resourceVersion")
        ):
            del self._written[_key(obj)]  # the cache holds our write now (or another object)

    def seen_update(self, _old: KubeObject, new: KubeObject) -> None:
        self.seen(new)

    def seen_delete(self, obj: KubeObject) -> None:
        self._written.pop(_key(obj), None)

    def apply(self, sandbox: KubeObject) -> KubeObject:
        """``sandbox`` with the status our last write returned, if the cache has not shown it."""
        key = _key(sandbox)
        written = self._written.get(key)
        if written is None:
            return sandbox
        meta = sandbox["metadata"]
        if (
            written.uid != meta.get("uid")
            or written.resource_version == meta.get("resourceVersion")
            or self.clock() - written.at > self.ttl
        ):
            del self._written[key]
            return sandbox
        return {**sandbox, "status": written.status}

    def forget(self, sandbox: Mapping[str, Any]) -> None:
        self._written.pop(_key(sandbox), None)

    def remember(self, sandbox: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        """Our status write of ``sandbox`` was answered with ``answer`` (the whole object)."""
        meta, ameta = sandbox.get("metadata") or {}, answer.get("metadata") or {}
        if ameta.get("uid") != meta.get("uid") or not ameta.get("resourceVersion"):
            return
        now = self.clock()
        self._written[_key(sandbox)] = _Written(
            str(ameta["uid"]), str(ameta["resourceVersion"]), answer.get("status") or {}, now
        )
        if len(self._written) > _BOUND:
            for key in [k for k, w in self._written.items() if now - w.at > self.ttl]:
                del self._written[key]


class FirstStatusHold:
    """Sandboxes whose pod this process just created, and until when their first status waits."""

    def __init__(
        self, grace: float = FIRST_STATUS_GRACE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.grace = grace  # 0 turns the hold off
        self.clock = clock
        self._until: dict[Key, float] = {}

    def pod_created(self, namespace: str, sandbox: str) -> None:
        if self.grace <= 0:
            return
        now = self.clock()
        self._until[(namespace, sandbox)] = now + self.grace
        if len(self._until) > _BOUND:  # sandboxes never looked at again (deleted at once)
            for key in [k for k, t in self._until.items() if t < now]:
                del self._until[key]

    def left(self, sandbox: Mapping[str, Any], status: Mapping[str, Any]) -> float | None:
        """Seconds to hold this pass's ``status`` write back (None: write it now)."""
        key = _key(sandbox)
        until = self._until.get(key)
        if until is None:
            return None
        left = until - self.clock()
        if left <= 0 or not is_first_pending_status(sandbox.get("status") or {}, status):
            del self._until[key]
            return None
        return left


class CreatedPods:
    """Pods this process created, by (namespace, name), until the pod cache shows them.

    A pass that runs before the cache catches up decides on the create's answer instead of
    creating again (which the apiserver refuses with AlreadyExists, then a GET: a profile at 30
    claims/s saw 96 such pairs for 650 sandboxes, docs/benchmarks.md).
    """

    def __init__(
        self, ttl: float = CREATED_POD_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._pods: dict[Key, tuple[float, KubeObject]] = {}

    def remember(self, namespace: str, name: str, pod: KubeObject) -> None:
        now = self.clock()
        memory = self._pods
        memory[(namespace, name)] = (now, pod)
        if len(memory) > _BOUND:  # sandboxes never looked at again (deleted at once)
            for key in [k for k, (t, _) in memory.items() if now - t > self.ttl]:
                del memory[key]

    def forget(self, namespace: str, name: str) -> None:
        """Gone as far as we know (we deleted it): never stand in for it again."""
        self._pods.pop((namespace, name), None)

    def stand_in(self, namespace: str, name: str, cached: KubeObject | None) -> KubeObject | None:
        """The pod we created as ``name`` while the cache (``cached``) does not show it; it is
        forgotten once the cache has it, or when it never came within the TTL."""
        created = self._pods.get((namespace, name))
        if created is None:
            return None
        if cached is not None or self.clock() - created[0] > self.ttl:
            del self._pods[(namespace, name)]  # the cache has it now (or it never came)
            return None
        return created[1]


__all__ = [
    "CREATED_POD_TTL",
    "FIRST_STATUS_GRACE",
    "STATUS_MEMORY",
    "CreatedPods",
    "FirstStatusHold",
    "StatusMemory",
]


class MigrationPace:
    """Turns for migration-only status writes: one every ``1 / rate`` s, ``burst`` at once.

    A Sandbox whose write only adds what an earlier release did not write gets a turn (a time)
    the first time it asks, and keeps it: :meth:`wait` returns None once the turn has come (write
    now) and the seconds left before then (requeue, write nothing). Turns are handed out in
    order, so 10 000 such Sandboxes are written at ``rate`` per second, each pass once, and a
    Sandbox that asks again before its turn does not lose its place. A write that is not
    migration-only never waits, and gives its turn back.
    """

    def __init__(
        self,
        rate: float = MIGRATION_RATE,
        burst: int = MIGRATION_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the migration pace needs rate > 0 and burst >= 1")
        self.interval = 1.0 / rate
        self.burst = burst
        self.clock = clock
        self._next = float("-inf")  # the next free turn
        self._turns: dict[Key, float] = {}

    def wait(
        self, sandbox: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> float | None:
        key = _key(sandbox)
        if not is_migration_only(old, new):
            self._turns.pop(key, None)
            return None
        now = self.clock()
        turn = self._turns.get(key)
        if turn is None:
            turn = max(self._next, now - (self.burst - 1) * self.interval)
            self._next = turn + self.interval
            self._turns[key] = turn
        if turn <= now:
            del self._turns[key]
            return None
        return turn - now

    def forget(self, sandbox: Mapping[str, Any]) -> None:
        """The Sandbox is gone: its turn is not kept."""
        self._turns.pop(_key(sandbox), None)

    @property
    def waiting(self) -> int:
        return len(self._turns)
