"""Leader election without a cluster: the Lease record, identities, timing validation, and every
write the elector makes (create, take over, renew, release), each through a fake Lease API that
enforces resourceVersion preconditions as the API server does, on an injected clock.

The elector's only real-time waits are its pauses between attempts (``_sleep``); the loop tests
replace them by a script that advances the injected clock instead and runs one step of the test
(another replica's write, a failure) at each pause, so nothing here waits on real time.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import logging
from collections.abc import Callable
from typing import Any, cast

import pytest

from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import (
    AlreadyExists,
    ApiConnectionError,
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    ServiceUnavailable,
)
from agentsandbox.kube.leaderelection import LeaderElectionRecord, LeaderElector, default_identity
from agentsandbox.kube.resources import LEASES, Resource
from agentsandbox.kube.timefmt import format_micro_time

Obj = dict[str, Any]
NAME, NS = "lock", "ns"
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_record_round_trips_through_a_lease_spec() -> None:
    record = LeaderElectionRecord(
        "me", 15, "2025-01-01T00:00:00.000000Z", "2025-01-01T00:00:01.000000Z", 3
    )
    lease = {"spec": record.to_spec()}
    assert LeaderElectionRecord.from_lease(lease) == record
    assert LeaderElectionRecord.from_lease({}) == LeaderElectionRecord()
    assert LeaderElectionRecord().to_spec() == {
        "holderIdentity": "",
        "leaseDurationSeconds": 0,
        "leaseTransitions": 0,
    }


def test_identities_are_unique_per_process_start() -> None:
    assert default_identity() != default_identity()


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10, 10, 2), (15, 2, 2), (15, 10, 0)],
)
def test_timings_must_leave_room_for_renewal(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            cast(Client, None),
            name="x",
            namespace="ns",
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )


def test_a_lease_needs_a_name_and_a_namespace() -> None:
    with pytest.raises(ValueError):
        LeaderElector(cast(Client, None), name="", namespace="ns")
    with pytest.raises(ValueError):
        LeaderElector(cast(Client, None), name="x", namespace="")


# --- the fakes


class Clock:
    """Both of the elector's clocks, moved only by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=self.now)

    def stamp(self) -> str:
        return format_micro_time(self.wall())


class LeaseApi:
    """Leases as the API server keeps them: every write gets a new resourceVersion, a create
    for a taken name is AlreadyExists, an update whose ``metadata.resourceVersion`` is not the
    stored one is a Conflict and leaves the stored Lease as it was.

    ``calls`` lists every request in order (verb and, for writes, the body as sent);
    ``fail[verb]`` scripts errors for the next requests of that verb; ``before[verb]`` runs
    once just before the next request of that verb is served (another replica's write racing
    ours)."""

    def __init__(self) -> None:
        self.leases: dict[str, Obj] = {}
        self.calls: list[tuple[str, Obj | None]] = []
        self.fail: dict[str, list[BaseException]] = {}
        self.before: dict[str, Callable[[], None]] = {}
        self._rv = itertools.count(1)

    def writes(self) -> list[tuple[str, Obj]]:
        return [(verb, body) for verb, body in self.calls if body is not None]

    def stored(self) -> Obj:
        return copy.deepcopy(self.leases[NAME])

    def spec(self) -> Obj:
        return dict(self.leases[NAME]["spec"])

    def other_writes(self, spec: Obj) -> Obj:
        """Another replica's successful write of the whole spec (it read the latest first)."""
        lease = self.leases.get(NAME) or {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": NAME, "namespace": NS},
        }
        lease = copy.deepcopy(lease)
        lease["spec"] = dict(spec)
        lease["metadata"]["resourceVersion"] = str(next(self._rv))
        self.leases[NAME] = lease
        return copy.deepcopy(lease)

    def _serve(
        self, verb: str, resource: Resource, namespace: str | None, body: Obj | None
    ) -> None:
        assert resource is LEASES and namespace == NS
        self.calls.append((verb, copy.deepcopy(body) if body is not None else None))
        hook = self.before.pop(verb, None)
        if hook is not None:
            hook()
        queue = self.fail.get(verb)
        if queue:
            raise queue.pop(0)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        self._serve("get", resource, namespace, None)
        if name not in self.leases:
            raise NotFound(404, "NotFound", f'leases "{name}" not found')
        return copy.deepcopy(self.leases[name])

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        self._serve("create", resource, namespace, body)
        name = body["metadata"]["name"]
        if name in self.leases:
            raise AlreadyExists(409, "AlreadyExists", f'leases "{name}" already exists')
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        self.leases[name] = stored
        return copy.deepcopy(stored)

    async def update(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        self._serve("update", resource, namespace, body)
        name = body["metadata"]["name"]
        if name not in self.leases:
            raise NotFound(404, "NotFound", f'leases "{name}" not found')
        if body["metadata"].get("resourceVersion") != self.leases[name]["metadata"].get(
            "resourceVersion"
        ):
            raise Conflict(409, "Conflict", "the object has been modified")
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        self.leases[name] = stored
        return copy.deepcopy(stored)


class Seen:
    """The elector's callbacks, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def kwargs(self) -> dict[str, Any]:
        return {
            "on_started_leading": lambda: self.events.append("started"),
            "on_stopped_leading": lambda: self.events.append("stopped"),
            "on_new_leader": lambda who: self.events.append(f"leader={who}"),
        }


def make_elector(
    api: LeaseApi, clock: Clock, identity: str = "me", **options: Any
) -> LeaderElector:
    timing: dict[str, Any] = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}
    return LeaderElector(
        cast(Client, api),
        name=NAME,
        namespace=NS,
        identity=identity,
        clock=clock.monotonic,
        wall_clock=clock.wall,
        **{**timing, **options},
    )


def held_by(holder: str, clock: Clock, *, duration: int = 15, transitions: int = 3) -> Obj:
    stamp = clock.stamp()
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def slowpath() -> float:
    return metrics.REGISTRY.get_sample_value("leader_election_slowpath_total", {"name": NAME}) or 0


# --- one attempt: acquire, take over, renew, and what each failure leaves behind


async def test_a_missing_lease_is_created_with_us_as_holder() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, lease_duration=14.2, **seen.kwargs())
    assert await elector._try_acquire_or_renew()
    assert [verb for verb, _ in api.calls] == ["get", "create"]
    (_, body) = api.writes()[0]
    assert body == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "holderIdentity": "me",
            "leaseDurationSeconds": 15,  # whole seconds, rounded up
            "acquireTime": clock.stamp(),
            "renewTime": clock.stamp(),
            "leaseTransitions": 0,
        },
    }
    assert elector.leader == "me" and seen.events == ["leader=me"]


async def test_losing_the_create_race_writes_nothing_more_and_leaves_the_winner() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, **seen.kwargs())
    api.before["create"] = lambda: api.other_writes(held_by("other", clock))
    assert not await elector._try_acquire_or_renew()
    assert [verb for verb, _ in api.calls] == ["get", "create"]
    assert api.spec()["holderIdentity"] == "other"
    assert elector.leader == "" and seen.events == []
    # the next attempt reads the winner's Lease and, as it is fresh, leaves it alone
    assert not await elector._try_acquire_or_renew()
    assert [verb for verb, _ in api.calls] == ["get", "create", "get"]
    assert elector.leader == "other" and seen.events == ["leader=other"]


@pytest.mark.parametrize(
    "error",
    [Forbidden(403, "Forbidden", "no"), ApiConnectionError("refused"), Conflict()],
    ids=["forbidden", "connection", "conflict"],
)
async def test_a_failed_create_is_a_failed_attempt(error: KubeError) -> None:
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    api.fail["create"] = [error]
    assert not await elector._try_acquire_or_renew()
    assert api.leases == {} and elector.leader == ""
    assert elector._lease is None  # nothing to release later


async def test_an_unreadable_lease_is_a_failed_attempt_without_a_write() -> None:
    api, clock = LeaseApi(), Clock()
    api.other_writes(held_by("other", clock))
    elector = make_elector(api, clock)
    api.fail["get"] = [ServiceUnavailable(503, "ServiceUnavailable", "etcd is away")]
    assert not await elector._try_acquire_or_renew()
    assert api.writes() == [] and elector.leader == ""


async def test_a_held_lease_is_taken_over_only_after_it_went_unchanged_for_its_duration() -> None:
    """Expiry is measured on our own clock from when we saw the current record first, never by
    reading the holder's renewTime: the other replica's wall clock may be anywhere."""
    api, clock, seen = LeaseApi(), Clock(), Seen()
    far_future = held_by("other", clock, duration=15, transitions=3)
    far_future["renewTime"] = "2099-01-01T00:00:00.000000Z"
    api.other_writes(far_future)
    elector = make_elector(api, clock, **seen.kwargs())
    assert not await elector._try_acquire_or_renew()
    assert elector.leader == "other" and seen.events == ["leader=other"]
    clock.now += 10
    api.other_writes({**far_future, "renewTime": "2099-01-01T00:00:10.000000Z"})  # it renews
    assert not await elector._try_acquire_or_renew()  # we see the change now
    clock.now += 14.9  # 24.9 s after we first saw it, but 14.9 s after we saw it change
    assert not await elector._try_acquire_or_renew()
    assert api.writes() == []
    read_version = api.stored()["metadata"]["resourceVersion"]
    clock.now += 0.2
    assert await elector._try_acquire_or_renew()
    (verb, body) = api.writes()[0]
    assert verb == "update"
    assert body["metadata"]["resourceVersion"] == read_version  # compare-and-swap on what we read
    assert body["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": clock.stamp(),
        "renewTime": clock.stamp(),
        "leaseTransitions": 4,
    }
    assert api.spec() == body["spec"]
    assert elector.leader == "me" and seen.events == ["leader=other", "leader=me"]


async def test_a_held_lease_without_a_duration_expires_after_ours() -> None:
    api, clock = LeaseApi(), Clock()
    api.other_writes(held_by("other", clock, duration=0))
    elector = make_elector(api, clock)
    assert not await elector._try_acquire_or_renew()
    clock.now += 14.9
    assert not await elector._try_acquire_or_renew()
    clock.now += 0.2
    assert await elector._try_acquire_or_renew()
    assert api.spec()["holderIdentity"] == "me"


async def test_a_released_lease_is_taken_at_once() -> None:
    """An empty holder (a clean release) is free: no waiting out any duration."""
    api, clock = LeaseApi(), Clock()
    api.other_writes({**held_by("", clock, transitions=5), "leaseDurationSeconds": 1})
    elector = make_elector(api, clock)
    assert await elector._try_acquire_or_renew()
    assert api.spec()["holderIdentity"] == "me" and api.spec()["leaseTransitions"] == 6


async def test_an_update_conflict_leaves_the_other_writer_in_place() -> None:
    """Between our read and our write another replica takes the (expired) Lease: the API
    server refuses our stale resourceVersion, the attempt fails and the Lease is theirs."""
    api, clock, seen = LeaseApi(), Clock(), Seen()
    api.other_writes(held_by("old", clock))
    elector = make_elector(api, clock, **seen.kwargs())
    assert not await elector._try_acquire_or_renew()
    clock.now += 16
    theirs = held_by("rival", clock, transitions=4)
    api.before["update"] = lambda: api.other_writes(theirs)
    assert not await elector._try_acquire_or_renew()
    assert [verb for verb, _ in api.calls] == ["get", "get", "update"]
    assert api.spec() == theirs
    assert elector._lease is None and not elector.is_leader
    assert seen.events == ["leader=old"]  # the rival is seen at the next read, not before
    assert not await elector._try_acquire_or_renew()
    assert elector.leader == "rival" and seen.events == ["leader=old", "leader=rival"]


@pytest.mark.parametrize(
    "error",
    [Forbidden(403, "Forbidden", "no"), ApiConnectionError("reset"), NotFound()],
    ids=["forbidden", "connection", "deleted-meanwhile"],
)
async def test_a_failed_update_is_a_failed_attempt(error: KubeError) -> None:
    api, clock = LeaseApi(), Clock()
    released = {**held_by("", clock), "leaseDurationSeconds": 1}
    api.other_writes(released)
    elector = make_elector(api, clock)
    api.fail["update"] = [error]
    assert not await elector._try_acquire_or_renew()
    assert api.spec() == released and elector._lease is None


async def test_a_renewal_keeps_the_acquire_time_and_transitions_and_counts_a_slow_path() -> None:
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    elector.start()  # takes the free Lease at once, then waits retry_period before renewing
    await elector.wait_leading()
    acquired = api.spec()
    before = slowpath()
    clock.now += 2
    assert await elector._try_acquire_or_renew()
    assert slowpath() == before + 1
    (verb, body) = api.writes()[-1]
    assert verb == "update"
    assert body["spec"] == {**acquired, "renewTime": clock.stamp()}
    assert acquired["acquireTime"] != clock.stamp()
    await elector.stop()


# --- release


async def test_stopping_a_leader_releases_the_lease_with_an_empty_holder_for_one_second() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, **seen.kwargs())
    elector.start()
    await elector.wait_leading()
    held = api.stored()
    clock.now += 1
    await elector.stop()
    (verb, body) = api.writes()[-1]
    assert verb == "update"
    assert body["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
    assert body["spec"] == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": clock.stamp(),
        "renewTime": clock.stamp(),
        "leaseTransitions": held["spec"]["leaseTransitions"],
    }
    assert api.spec() == body["spec"]
    assert seen.events == ["leader=me", "started", "stopped"]
    assert not elector.is_leader and elector._lease is None and not elector.lost
    assert elector.done


async def test_no_release_without_release_on_cancel() -> None:
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock, release_on_cancel=False)
    elector.start()
    await elector.wait_leading()
    held = api.stored()
    await elector.stop()
    assert api.stored() == held and [verb for verb, _ in api.calls] == ["get", "create"]


async def test_a_release_that_conflicts_leaves_the_new_holder_in_place(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another replica wrote the Lease since our last renewal (we are partitioned, say): the
    release's compare-and-swap fails and must not clear their hold."""
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    elector.start()
    await elector.wait_leading()
    theirs = api.other_writes(held_by("rival", clock, transitions=1))
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.leaderelection"):
        await elector.stop()
    assert [verb for verb, _ in api.calls] == ["get", "create", "update"]
    assert api.stored() == theirs
    assert "could not release lease" in caplog.text
    assert elector._lease is not None  # not released: a later release may try again


async def test_a_failed_release_is_logged_and_writes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    elector.start()
    await elector.wait_leading()
    held = api.stored()
    api.fail["update"] = [ApiConnectionError("refused")]
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.leaderelection"):
        await elector.stop()
    assert api.stored() == held and "could not release lease" in caplog.text


async def test_release_without_a_lease_of_ours_writes_nothing() -> None:
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    await elector._release()  # never held one
    api.other_writes(held_by("other", clock))
    elector._lease = api.stored()  # a last write that is not ours cannot be released by us
    await elector._release()
    assert api.writes() == []


# --- the loops, with the waits scripted on the injected clock


class Waits:
    """Replaces the elector's pauses: each advances the injected clock by its length, then runs
    the next step; once the steps are used up, the next pause asks the elector to stop (as
    ``stop()`` from another task does) and ends it."""

    def __init__(
        self, elector: LeaderElector, clock: Clock, steps: list[Callable[[], None]]
    ) -> None:
        self.elector, self.clock, self.steps = elector, clock, list(steps)
        self.lengths: list[float] = []
        self.stopped = False
        elector._sleep = self.sleep  # type: ignore[method-assign]

    async def sleep(self, seconds: float) -> bool:
        if self.stopped:
            return False
        self.lengths.append(seconds)
        self.clock.now += max(0.0, seconds)
        if self.steps:
            self.steps.pop(0)()
            return True
        self.stopped = True
        await self.elector.stop()  # run() was called directly: this only tells it to stop
        return False


async def test_a_candidate_retries_until_the_holder_lets_the_lease_expire() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    api.other_writes(held_by("other", clock))
    elector = make_elector(api, clock, **seen.kwargs())
    waits = Waits(elector, clock, [lambda: None] * 8)
    acquired_after: list[list[float]] = []
    elector._on_started = lambda: acquired_after.append(list(waits.lengths))
    await elector.run()
    (retries,) = acquired_after
    # retries at retry_period stretched by up to 20 %, until 15 s passed with no change
    assert all(2.0 <= length <= 2.4 for length in retries)
    assert 15 <= sum(retries) < 15 + 2.4
    assert seen.events == ["leader=other", "leader=me", "stopped"]
    ((_, takeover),) = api.writes()[:1]
    assert takeover["spec"]["holderIdentity"] == "me"
    assert takeover["spec"]["leaseTransitions"] == 4
    assert api.spec()["holderIdentity"] == ""  # stopped at the end of the script: released


async def test_a_candidate_that_is_stopped_while_waiting_writes_nothing() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    api.other_writes(held_by("other", clock))
    elector = make_elector(api, clock, **seen.kwargs())
    Waits(elector, clock, [lambda: None])
    await elector.run()
    assert [verb for verb, _ in api.calls] == ["get", "get"]
    assert seen.events == ["leader=other"] and not elector.is_leader


async def test_a_leader_that_sees_another_holder_stops_leading_without_releasing() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, **seen.kwargs())

    def stolen() -> None:
        api.other_writes(held_by("intruder", clock, duration=60))

    waits = Waits(elector, clock, [lambda: None, stolen])
    await elector.run()
    assert elector.lost and not elector.is_leader and not waits.stopped
    assert seen.events == ["leader=me", "started", "leader=intruder", "stopped"]
    # created, renewed once, then one read that found the intruder: no write after it
    assert [verb for verb, _ in api.calls] == ["get", "create", "get", "update", "get"]
    assert api.spec()["holderIdentity"] == "intruder"
    assert metrics.REGISTRY.get_sample_value("leader_election_master_status", {"name": NAME}) == 0


async def test_a_leader_that_cannot_renew_within_the_deadline_stops_leading() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, **seen.kwargs())
    down = [ServiceUnavailable(503, "ServiceUnavailable", "down")] * 20

    def outage() -> None:
        api.fail["get"] = list(down)

    waits = Waits(elector, clock, [outage] + [lambda: None] * 20)
    await elector.run()
    assert elector.lost and seen.events == ["leader=me", "started", "stopped"]
    assert not waits.stopped  # it ended by itself, nobody stopped it
    # renewals retried every retry_period until the renew deadline, 10 s after the last renewal
    assert waits.lengths == [2.0, 2.0, 2.0, 2.0, 2.0]
    assert [verb for verb, _ in api.calls] == ["get", "create"] + ["get"] * 4
    assert api.spec()["holderIdentity"] == "me"  # lost, not released: it expires on its own


async def test_a_renewal_that_fails_once_and_then_succeeds_keeps_leading() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, **seen.kwargs())

    def blip() -> None:
        api.fail["update"] = [ServiceUnavailable(503, "ServiceUnavailable", "blip")]

    waits = Waits(elector, clock, [blip, lambda: None, lambda: None])
    await elector.run()
    assert waits.stopped and not elector.lost
    assert seen.events == ["leader=me", "started", "stopped"]
    verbs = [verb for verb, _ in api.calls]
    # created; a renewal that failed, retried after retry_period; one more renewal; the release
    assert verbs == ["get", "create", "get", "update", "get", "update", "get", "update", "update"]
    assert api.spec()["holderIdentity"] == "" and api.spec()["leaseDurationSeconds"] == 1


async def test_a_leader_stopped_while_retrying_a_renewal_releases_and_is_not_lost() -> None:
    api, clock, seen = LeaseApi(), Clock(), Seen()
    elector = make_elector(api, clock, **seen.kwargs())

    def blip() -> None:
        api.fail["update"] = [ServiceUnavailable(503, "ServiceUnavailable", "blip")]

    waits = Waits(elector, clock, [blip])  # the retry's pause is where it is stopped
    await elector.run()
    assert waits.stopped and not elector.lost
    assert [verb for verb, _ in api.calls] == ["get", "create", "get", "update", "update"]
    assert api.spec()["holderIdentity"] == ""
    assert seen.events == ["leader=me", "started", "stopped"]


async def test_start_is_idempotent_and_wait_done_returns_once_stopped() -> None:
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    assert elector.done
    await elector.wait_done()  # never started: nothing to wait for
    elector.start()
    task = elector._task
    elector.start()
    assert elector._task is task and not elector.done
    await elector.wait_leading()
    stopping = asyncio.create_task(elector.stop())
    await elector.wait_done()  # stop() has not run yet: waits for the loop to end anyway
    await stopping
    assert elector.done and [verb for verb, _ in api.calls] == ["get", "create", "update"]


async def test_a_callback_that_raises_does_not_stop_the_election(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, clock = LeaseApi(), Clock()

    def boom(*_: object) -> None:
        raise RuntimeError("callback bug")

    elector = make_elector(
        api, clock, on_started_leading=boom, on_stopped_leading=boom, on_new_leader=boom
    )
    elector.start()
    await elector.wait_leading()
    assert elector.is_leader
    await elector.stop()
    assert api.spec()["holderIdentity"] == ""  # still released
    assert caplog.text.count("callback failed") == 3
