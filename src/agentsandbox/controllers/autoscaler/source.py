"""The SandboxWarmPoolAutoscaler's observations: claim arrivals and pool refill times, recorded
by informer handlers into in-memory windows (see :mod:`.controller` for what counts as an arrival
and as a refill time). A restart refills the windows from the objects' timestamps."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from agentsandbox.api.conditions import find_condition, is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.kube.store import KubeObject

LIVE_SLACK = 2.0  # seconds: a first sight this close to creationTimestamp is "live"
MAX_REFILL_SAMPLES = 500


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parse_rfc3339(text).timestamp()
    except ValueError:
        return None


def claim_keys(claim: KubeObject) -> list[str]:
    """The pools (``<ns>/pool/<name>``) or templates (``<ns>/template/<name>``) a claim may take
    a warm sandbox from; none for a claim that is always served cold."""
    meta = claim.get("metadata") or {}
    spec = claim.get("spec") or {}
    ns = meta.get("namespace", "")
    if spec.get("env") or spec.get("volumeClaimTemplates") or spec.get("additionalPodMetadata"):
        return []
    pool = (spec.get("warmPoolRef") or {}).get("name")
    if pool:
        return [f"{ns}/pool/{pool}"]
    template = (spec.get("sandboxTemplateRef") or {}).get("name")
    choice = spec.get("warmpool") or "default"
    if not template or choice == "none":
        return []
    if choice == "default":
        return [f"{ns}/template/{template}"]
    return [f"{ns}/pool/{choice}"]


def _pool_of(sb: KubeObject) -> str | None:
    """``<ns>/<pool>`` of the SandboxWarmPool controlling ``sb``."""
    ref = controller_of(sb)
    if ref is None or ref.get("kind") != SANDBOX_WARM_POOL.kind:
        return None
    if not str(ref.get("apiVersion", "")).startswith(SANDBOX_WARM_POOL.group + "/"):
        return None
    return f"{(sb.get('metadata') or {}).get('namespace', '')}/{ref.get('name')}"


class Windows:
    """Claim arrivals by pool/template key and refill samples by pool, within a time window.
    Fed by informer handlers; read by the passes."""

    def __init__(self, window: float, clock: Callable[[], float]) -> None:
        self.window = window
        self.clock = clock
        self.arrivals: dict[str, dict[str, float]] = {}  # key -> claim uid -> time
        self.refills: dict[str, deque[tuple[float, float]]] = {}  # pool -> (when, seconds)
        self._first_seen: dict[str, float] = {}  # sandbox uid -> first sight (not Ready yet)
        self._sampled: set[str] = set()  # sandbox uids already measured

    # ------------------------------------------------------------------ claims
    def claim_added(self, claim: KubeObject) -> list[str]:
        keys = claim_keys(claim)
        if not keys:
            return []
        meta = claim.get("metadata") or {}
        now = self.clock()
        created = _ts(meta.get("creationTimestamp"))
        when = now if created is None or 0 <= now - created < LIVE_SLACK else created
        if when < now - self.window:
            return []
        uid = str(meta.get("uid") or meta.get("name"))
        horizon = now - self.window
        for key in keys:
            seen = self.arrivals.setdefault(key, {})
            seen.setdefault(uid, when)
            # bounded whether or not an autoscaler reads this key: drop the oldest (insertion
            # order is nearly time order) while they are out of the window
            while len(seen) > 1:
                oldest = next(iter(seen))
                if seen[oldest] >= horizon:
                    break
                del seen[oldest]
        return keys

    def arrivals_for(self, keys: Iterable[str]) -> list[float]:
        horizon = self.clock() - self.window
        out: dict[str, float] = {}
        for key in keys:
            seen = self.arrivals.get(key)
            if not seen:
                continue
            for uid in [u for u, t in seen.items() if t < horizon]:
                del seen[uid]
            out.update(seen)
        return sorted(out.values())

    # ------------------------------------------------------------------ sandboxes
    def sandbox_added(self, sb: KubeObject) -> str | None:
        pool = _pool_of(sb)
        if pool is None:
            return None
        uid = str(sb["metadata"].get("uid", ""))
        if is_sandbox_ready(sb):
            return self._sample(sb, pool, uid, live=False)
        self._first_seen.setdefault(uid, self.clock())
        return None

    def sandbox_updated(self, old: KubeObject, new: KubeObject) -> str | None:
        if not is_sandbox_ready(new) or is_sandbox_ready(old):
            return None
        pool = _pool_of(new)
        if pool is None:
            return None
        return self._sample(new, pool, str(new["metadata"].get("uid", "")), live=True)

    def sandbox_deleted(self, sb: KubeObject) -> None:
        uid = str((sb.get("metadata") or {}).get("uid", ""))
        self._first_seen.pop(uid, None)
        self._sampled.discard(uid)

    def _sample(self, sb: KubeObject, pool: str, uid: str, *, live: bool) -> str | None:
        if uid in self._sampled:
            return None
        self._sampled.add(uid)
        now = self.clock()
        meta = sb["metadata"]
        created = _ts(meta.get("creationTimestamp"))
        first = self._first_seen.pop(uid, None)
        seconds: float | None = None
        when = now
        if live and first is not None and created is not None and 0 <= first - created < LIVE_SLACK:
            seconds = now - first
        else:
            cond = find_condition((sb.get("status") or {}).get("conditions"), "Ready")
            ready = _ts((cond or {}).get("lastTransitionTime"))
            if ready is not None and created is not None and ready >= created:
                seconds, when = ready - created, ready
        if seconds is None or when < now - self.window:
            return None
        samples = self.refills.setdefault(pool, deque(maxlen=MAX_REFILL_SAMPLES))
        samples.append((when, seconds))
        return pool

    def refills_for(self, pool: str) -> list[float]:
        samples = self.refills.get(pool)
        if not samples:
            return []
        horizon = self.clock() - self.window
        while samples and samples[0][0] < horizon:
            samples.popleft()
        return [s for _, s in samples]
