"""The SandboxWarmPoolAutoscaler's observations: claim arrivals and pool refill times, recorded
by informer handlers into in-memory windows (see :mod:`.controller` for what counts as an arrival
and as a refill time). A restart refills the arrival window from the claims' timestamps; refill
times are measured again from the members created after it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.autoscaler.plan import ArrivalBins
from agentsandbox.kube.store import KubeObject

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


def pool_of(sb: KubeObject) -> str | None:
    """``<ns>/<pool>`` of the SandboxWarmPool controlling ``sb``."""
    ref = controller_of(sb)
    if ref is None or ref.get("kind") != SANDBOX_WARM_POOL.kind:
        return None
    if not str(ref.get("apiVersion", "")).startswith(SANDBOX_WARM_POOL.group + "/"):
        return None
    return f"{(sb.get('metadata') or {}).get('namespace', '')}/{ref.get('name')}"


class Windows:
    """Claim arrivals by pool/template key and refill samples by pool, within a time window.
    Fed by informer handlers; read by the passes.

    ``clock`` is the controller's wall clock (the window's horizon, arrival times); a refill is
    timed on ``monotonic`` (``clock`` if none is given) from this process's first sight of a
    pool member (an ADDED event from the watch) to the watch event showing it Ready. Both ends
    are the controller's own, so a controller clock off the API server's changes nothing. A
    member this process did not see created — listed at start, replayed to a handler added
    late, or added or turned Ready by a relist after a watch gap (``listed``) — gives no
    sample: its only other times are ``creationTimestamp`` (the API server's clock) and the
    Ready condition's ``lastTransitionTime`` (the sandbox controller's clock), never both on
    one clock."""

    def __init__(
        self,
        window: float,
        clock: Callable[[], float],
        monotonic: Callable[[], float] | None = None,
        bin_width: float = 10.0,
        group_gap: float = 0.05,
    ) -> None:
        self.window = window
        self.bin_width = bin_width
        self.group_gap = group_gap
        self.bins: dict[str, ArrivalBins] = {}  # key -> the arrivals per bin
        self.spans: dict[str, float] = {}  # key -> seconds its claims' occupancy is counted over
        self.clock = clock
        self.monotonic = monotonic or clock
        self.arrivals: dict[str, dict[str, float]] = {}  # key -> claim uid -> time
        self.refills: dict[str, deque[tuple[float, float]]] = {}  # pool -> (when, seconds)
        self._first_seen: dict[str, float] = {}  # sandbox uid -> live first sight (monotonic)
        self._sampled: set[str] = set()  # sandbox uids already measured (or never to be)
        self._last_ready: dict[str, float] = {}  # pool -> a member last seen turning Ready

    # ------------------------------------------------------------------ claims
    def claim_added(self, claim: KubeObject, *, listed: bool = False) -> list[str]:
        """A claim the informer shows for the first time. Seen by the watch as it is created, its
        time is this process's first sight (the controller's clock, precise to the event);
        shown by a (re)list or a replay of the cache (``listed``), its ``creationTimestamp``
        (the API server's clock, whole seconds), which takes no part in grouping."""
        keys = claim_keys(claim)
        if not keys:
            return []
        meta = claim.get("metadata") or {}
        now = self.clock()
        created = _ts(meta.get("creationTimestamp"))
        precise = not listed or created is None
        when = now if precise else created
        if when is None or when < now - self.window:
            return []
        uid = str(meta.get("uid") or meta.get("name"))
        horizon = now - self.window
        for key in keys:
            seen = self.arrivals.setdefault(key, {})
            if uid not in seen:
                seen[uid] = when
                bins = self.bins.setdefault(key, ArrivalBins(self.bin_width))
                bins.span = self.spans.get(key, 0.0)
                bins.add(when, self.group_gap if precise else -1.0)
                bins.trim(now, self.window)
            # bounded whether or not an autoscaler reads this key: drop the oldest (insertion
            # order is nearly time order) while they are out of the window
            while len(seen) > 1:
                oldest = next(iter(seen))
                if seen[oldest] >= horizon:
                    break
                del seen[oldest]
        return keys

    def set_span(self, keys: Iterable[str], seconds: float) -> None:
        """Count the occupancy of the claims of ``keys`` over ``seconds`` from now on (the
        pool's refill time, from its autoscaler's decision; ArrivalBins)."""
        for key in keys:
            if seconds > 0:
                self.spans[key] = seconds
            else:
                self.spans.pop(key, None)

    def bins_for(self, keys: Iterable[str]) -> ArrivalBins:
        """The arrivals of ``keys`` per bin (a claim is under one key), the window's only."""
        now = self.clock()
        parts = []
        for key in keys:
            bins = self.bins.get(key)
            if bins is not None:
                bins.trim(now, self.window)
                parts.append(bins)
        return ArrivalBins.summed(parts, self.bin_width)

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
    def sandbox_added(self, sb: KubeObject, *, listed: bool = False) -> str | None:
        """A sandbox the informer shows for the first time; ``listed``: by a (re)list or a
        replay of the cache, not by a watch event as it was created."""
        if pool_of(sb) is None:
            return None
        uid = str(sb["metadata"].get("uid", ""))
        if listed or is_sandbox_ready(sb):
            self._sampled.add(uid)  # not seen created: never measured
            self._first_seen.pop(uid, None)
        elif uid not in self._sampled:
            self._first_seen.setdefault(uid, self.monotonic())
        return None

    def sandbox_updated(
        self, old: KubeObject, new: KubeObject, *, listed: bool = False
    ) -> str | None:
        """``listed``: the change shown by a relist (it happened some time before)."""
        if not is_sandbox_ready(new) or is_sandbox_ready(old):
            return None
        pool = pool_of(new)
        if pool is None:
            return None
        # any Ready transition is progress for the circuit breaker, measured or not
        self._last_ready[pool] = self.monotonic()
        uid = str(new["metadata"].get("uid", ""))
        first = self._first_seen.pop(uid, None)
        if listed or first is None or uid in self._sampled:
            self._sampled.add(uid)
            return None
        self._sampled.add(uid)
        samples = self.refills.setdefault(pool, deque(maxlen=MAX_REFILL_SAMPLES))
        samples.append((self.clock(), self.monotonic() - first))
        return pool

    def sandbox_deleted(self, sb: KubeObject) -> None:
        uid = str((sb.get("metadata") or {}).get("uid", ""))
        self._first_seen.pop(uid, None)
        self._sampled.discard(uid)

    def last_ready_age(self, pool: str) -> float | None:
        """Seconds since a member of ``pool`` was last seen turning Ready (None: not seen)."""
        last = self._last_ready.get(pool)
        return None if last is None else max(0.0, self.monotonic() - last)

    def refills_for(self, pool: str) -> list[float]:
        samples = self.refills.get(pool)
        if not samples:
            return []
        horizon = self.clock() - self.window
        while samples and samples[0][0] < horizon:
            samples.popleft()
        return [s for _, s in samples]
