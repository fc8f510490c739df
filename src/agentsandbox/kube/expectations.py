"""Controller expectations: remember our own writes until the informer cache has seen them.

Reads come from the cache, which lags our writes. A controller that creates 5 children and is
reconciled again before the cache shows them would create 5 more. So before issuing writes it
records what it expects to observe (a count of creates, the UIDs it deletes), the informer's event
handlers lower those expectations as the events arrive, and the controller makes no new writes for
that key until ``satisfied`` is true.

A lost event must not stall a controller forever: a record older than ``timeout`` counts as
satisfied (client-go uses 5 minutes). Everything runs on one event loop, so a check followed by a
record with no ``await`` in between is atomic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["DEFAULT_TIMEOUT", "Expectations", "Pending"]

DEFAULT_TIMEOUT = 300.0


class Pending(NamedTuple):
    """What is still expected for a key: creates not yet observed, UIDs not yet seen deleted."""

    creates: int
    deletes: frozenset[str]


@dataclass
class _Record:
    creates: int = 0
    deletes: set[str] = field(default_factory=set)
    timestamp: float = 0.0

    def fulfilled(self) -> bool:
        return self.creates <= 0 and not self.deletes


class Expectations:
    """Pending creates (a count) and deletes (UIDs) per controller key, with a timeout."""

    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._timeout = timeout
        self._clock = clock
        self._records: dict[Hashable, _Record] = {}

    # --- raising (before issuing writes)

    def expect_creations(self, key: Hashable, count: int) -> None:
        """Add ``count`` creates that the informer has yet to show; call before creating."""
        if count < 0:
            raise ValueError("count must be >= 0")
        record = self._fresh(key)
        record.creates += count

    def expect_deletions(self, key: Hashable, uids: Iterable[str]) -> None:
        """Add the UIDs about to be deleted; call before deleting."""
        self._fresh(key).deletes.update(uids)

    # --- lowering (from event handlers, or when a write failed)

    def creation_observed(self, key: Hashable, count: int = 1) -> None:
        """The informer showed ``count`` new owned objects."""
        record = self._records.get(key)
        if record is not None:
            record.creates = max(0, record.creates - count)

    def creation_failed(self, key: Hashable, count: int = 1) -> None:
        """``count`` creates failed and will never be observed."""
        self.creation_observed(key, count)

    def deletion_observed(self, key: Hashable, uid: str) -> None:
        """The informer showed ``uid`` deleted (or carrying a deletionTimestamp)."""
        record = self._records.get(key)
        if record is not None:
            record.deletes.discard(uid)

    def deletion_failed(self, key: Hashable, uid: str) -> None:
        """Deleting ``uid`` failed, so its deletion will never be observed."""
        self.deletion_observed(key, uid)

    # --- reading

    def satisfied(self, key: Hashable) -> bool:
        """True when nothing is pending for ``key``, or its record has expired."""
        record = self._records.get(key)
        return record is None or record.fulfilled() or self._expired(record)

    def expired(self, key: Hashable) -> bool:
        """True when ``key`` has a record older than the timeout (its events were likely lost)."""
        record = self._records.get(key)
        return record is not None and self._expired(record)

    def pending(self, key: Hashable) -> Pending:
        record = self._records.get(key)
        if record is None:
            return Pending(0, frozenset())
        return Pending(record.creates, frozenset(record.deletes))

    def delete(self, key: Hashable) -> None:
        """Forget ``key`` (its owner is gone)."""
        self._records.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    # --- internals

    def _expired(self, record: _Record) -> bool:
        return self._clock() - record.timestamp > self._timeout

    def _fresh(self, key: Hashable) -> _Record:
        """The record to raise.

        An expired record starts again from zero: its leftovers are events we gave up on, and
        adding to them would keep the key unsatisfied for work that will never be observed. A
        fulfilled record starts a new timeout. A record with work still pending keeps its
        timestamp (client-go's ``RaiseExpectations``): otherwise regular new writes would keep
        pushing back the expiry of a lost event, and the key would never be satisfied.
        """
        record = self._records.get(key)
        if record is None or self._expired(record):
            record = self._records[key] = _Record(timestamp=self._clock())
        elif record.fulfilled():
            record.timestamp = self._clock()
        return record
