"""The refill measurement of :class:`~agentsandbox.controllers.autoscaler.source.Windows` under
clock skew (autoscaler review finding 11).

The API server stamps ``creationTimestamp`` (its clock, whole seconds); the sandbox controller,
in the autoscaler's process, stamps the Ready condition's ``lastTransitionTime`` (the
controller's clock, whole seconds); the informer hands the windows each object when the
controller sees it (the controller's clock). The tests drive the windows with those objects for
a controller clock ``skew`` seconds off the API server's and a true create -> Ready of 0.3 s.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from agentsandbox.controllers.autoscaler.handlers import AutoscalerWatches
from agentsandbox.controllers.autoscaler.source import Windows
from tests.unit.fakes import FakeInformer

NS = "ns"
POOL = f"{NS}/p"
POOL_API = "extensions.agents.x-k8s.io/v1beta1"
EPOCH = 1_800_000_000.0  # API server time of the first create
REFILL = 0.3  # seconds: the true create -> Ready
WATCH_DELAY = 0.02  # seconds from a write to the informer's event
MEMBERS = 200


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stamp(t: float) -> str:
    """``metav1.Time``: whole seconds, truncated."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def member(uid: str, created: float) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": NS,
            "name": uid,
            "uid": uid,
            "creationTimestamp": stamp(created),
            "ownerReferences": [
                {
                    "apiVersion": POOL_API,
                    "kind": "SandboxWarmPool",
                    "name": "p",
                    "uid": "pool-uid",
                    "controller": True,
                }
            ],
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }


def ready(sb: dict[str, Any], at: float) -> dict[str, Any]:
    new = copy.deepcopy(sb)
    new["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(at)}]
    }
    return new


@pytest.mark.parametrize("skew", [-3.0, -1.5, -0.5, 0.0, 3.0])
def test_refill_samples_are_kept_and_unbiased_whatever_the_clock_skew(skew: float) -> None:
    """Every member created and made Ready while the controller watches gives one sample, and
    their mean is the true refill time, for a controller clock off the API server's by -3 to
    +3 s."""
    clock = Clock(EPOCH + skew)
    windows = Windows(3600.0, clock)
    for i in range(MEMBERS):
        created = EPOCH + i * 3.37  # API server time; every fraction of a second
        sb = member(f"s{i}", created)
        clock.now = created + WATCH_DELAY + skew  # the ADDED event, on the controller's clock
        windows.sandbox_added(sb)
        became_ready = created + REFILL + skew  # the sandbox controller stamps its own clock
        clock.now = became_ready + WATCH_DELAY  # the MODIFIED event showing it Ready
        windows.sandbox_updated(sb, ready(sb, became_ready))
    samples = windows.refills_for(POOL)
    assert len(samples) == MEMBERS
    assert sum(samples) / len(samples) == pytest.approx(REFILL, abs=0.02)


class Watched:
    """The windows fed through the autoscaler's handlers from fake informers."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.windows = Windows(3600.0, clock)
        self.informers = [FakeInformer() for _ in range(4)]
        self.sandboxes = self.informers[2]

    def start(self) -> None:
        autoscalers, claims, sandboxes, pools = self.informers
        AutoscalerWatches(self.windows, autoscalers, claims, sandboxes, pools)  # type: ignore[arg-type]


def test_members_already_there_at_start_give_no_refill_sample() -> None:
    """A restart's informers list the pool's members: one Ready long ago, one created 10 s
    before the start and still starting. Neither was seen created by this process, and the
    Ready condition is stamped by a controller clock the creationTimestamp does not share: no
    sample from either, even when the second turns Ready while watched."""
    clock = Clock(EPOCH + 10.0)
    rig = Watched(clock)
    old = member("old", EPOCH - 120.0)
    rig.sandboxes.store.add(ready(old, EPOCH - 116.0))
    starting = member("starting", EPOCH)
    rig.sandboxes.store.add(starting)
    rig.start()  # the handlers get an add for every cached member
    clock.now = EPOCH + 11.0
    rig.sandboxes.put(ready(starting, EPOCH + 11.0))
    assert rig.windows.refills_for(POOL) == []


def test_a_member_added_or_made_ready_by_a_relist_gives_no_refill_sample() -> None:
    """A relist after a watch gap shows members created, or turned Ready, during the gap: the
    time the controller sees them is not when it happened."""
    clock = Clock(EPOCH)
    rig = Watched(clock)
    rig.start()
    gap = member("gap", EPOCH)
    rig.sandboxes.listing = True  # the relist's ADDED
    rig.sandboxes.put(gap)
    rig.sandboxes.listing = False
    clock.now = EPOCH + 0.5
    rig.sandboxes.put(ready(gap, EPOCH + 0.5))
    live = member("live", EPOCH + 1.0)
    clock.now = EPOCH + 1.0
    rig.sandboxes.put(live)  # seen live
    clock.now = EPOCH + 9.0
    rig.sandboxes.listing = True  # its Ready transition shown by a relist
    rig.sandboxes.put(ready(live, EPOCH + 1.3))
    rig.sandboxes.listing = False
    assert rig.windows.refills_for(POOL) == []
    # the same member seen live at both ends is measured on the controller's clock
    fresh = member("fresh", EPOCH + 10.0)
    clock.now = EPOCH + 10.0
    rig.sandboxes.put(fresh)
    clock.now = EPOCH + 10.3
    rig.sandboxes.put(ready(fresh, EPOCH + 10.3))
    assert rig.windows.refills_for(POOL) == [pytest.approx(0.3)]
