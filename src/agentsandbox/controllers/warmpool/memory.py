"""The SandboxWarmPool reconciler's memory of each pool between passes, and its refill bucket."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PoolMemory:
    """What the reconciler remembers about one pool between passes (lost on restart; each
    piece degrades to upstream's behaviour when empty; docs/design/warmpool.md, "What the
    reconciler remembers")."""

    uid: str
    held: frozenset[str] = frozenset()
    pod_missing_since: dict[str, float] = field(default_factory=dict)
    # the not-progressing reason last announced by an event (None: progressing)
    reported: str | None = None
    warned_strategy: str | None = None
    # replenish delay (see plan.Snapshot): members kept by the last pass, when a
    # departure was last first seen, replacements still waiting
    members: frozenset[str] | None = None
    missing_since: float | None = None
    owed: int = 0
    refill: RefillBucket | None = None


@dataclass
class RefillBucket:
    """``--sandbox-warm-pool-max-refill-rate``: a pool's token bucket. It refills at ``rate``
    tokens per second up to ``max(1, rate)``, starts full, and each create takes one token. The
    time comes from the reconciler's (injectable) clock."""

    rate: float
    tokens: float
    last: float

    @classmethod
    def full(cls, rate: float, now: float) -> RefillBucket:
        return cls(rate, max(1.0, rate), now)

    @property
    def capacity(self) -> float:
        return max(1.0, self.rate)

    def available(self, now: float) -> float:
        if now > self.last:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
            self.last = now
        return self.tokens

    def take(self, n: int) -> None:
        self.tokens -= n


__all__ = ["PoolMemory", "RefillBucket"]
