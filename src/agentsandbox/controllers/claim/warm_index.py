"""The warm queue: pool sandboxes a claim may adopt, per namespace and pool, in arrival order.

Upstream 35b9757f keeps one FIFO per template-name hash, shared by every namespace (a bug: a
claim in one namespace could pop a sandbox of another, then has to put it back). Here a queue
belongs to one ``(namespace, pool)``; a claim naming a template looks at the queues of every pool
of that template in its namespace (docs/design/claim.md, "Candidates and the warm queue").

The queue is only a fast index of what the Sandbox cache says: a Sandbox event handler adds a
sandbox when it becomes adoptable and removes it when it stops being adoptable or goes away, and
the informer's initial list (synthetic adds) rebuilds it after a restart. Whatever a claim takes
from it is re-checked against the cache, and the adoption write itself carries the sandbox's
resourceVersion, so a stale entry costs one failed attempt, never a sandbox given twice.
Everything runs on one event loop: a look-and-take with no ``await`` in between is atomic.
"""

from __future__ import annotations

from collections.abc import Iterator

QueueKey = tuple[str, str]  # (namespace, pool name)


class WarmQueue:
    """FIFO sets of sandbox names keyed by ``(namespace, pool)``."""

    def __init__(self) -> None:
        self._queues: dict[QueueKey, dict[str, None]] = {}
        self._where: dict[tuple[str, str], QueueKey] = {}  # (namespace, sandbox) -> its queue

    def add(self, key: QueueKey, name: str) -> None:
        """Append ``name`` to ``key``'s queue unless it is already there (position unchanged).
        A sandbox is in at most one queue: adding it elsewhere moves it."""
        where = (key[0], name)
        current = self._where.get(where)
        if current == key:
            return
        if current is not None:
            self.remove(key[0], name)
        self._queues.setdefault(key, {})[name] = None
        self._where[where] = key

    def remove(self, namespace: str, name: str) -> None:
        """Forget the sandbox ``namespace/name`` wherever it is queued (no-op if absent)."""
        key = self._where.pop((namespace, name), None)
        if key is None:
            return
        queue = self._queues.get(key)
        if queue is not None:
            queue.pop(name, None)
            if not queue:
                del self._queues[key]

    def take(self, key: QueueKey, name: str) -> bool:
        """Remove ``name`` from ``key``'s queue; False if it was not there (someone took it)."""
        if self._where.get((key[0], name)) != key:
            return False
        self.remove(key[0], name)
        return True

    def drop_queue(self, key: QueueKey) -> None:
        """Forget a whole queue (its pool is gone)."""
        for name in self._queues.pop(key, {}):
            self._where.pop((key[0], name), None)

    def names(self, key: QueueKey) -> Iterator[str]:
        """The queued sandbox names of ``key``, oldest first (a snapshot: safe to take while
        iterating)."""
        return iter(list(self._queues.get(key, ())))

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item: object) -> bool:
        return item in self._where

    def size(self, key: QueueKey) -> int:
        return len(self._queues.get(key, ()))
