"""Controller expectations: pending creates and deletes per key, lowered by events, with expiry."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agentsandbox.kube.expectations import DEFAULT_TIMEOUT, Expectations, Pending


class FakeClock:
    def __init__(self, now: float = 5000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_key_without_expectations_is_satisfied() -> None:
    exp = Expectations()
    assert exp.satisfied("ns/pool")
    assert exp.pending("ns/pool") == Pending(0, frozenset())


def test_expected_creations_block_until_each_is_observed() -> None:
    exp = Expectations()
    exp.expect_creations("ns/pool", 2)
    assert not exp.satisfied("ns/pool")
    exp.creation_observed("ns/pool")
    assert exp.pending("ns/pool").creates == 1
    assert not exp.satisfied("ns/pool")
    exp.creation_observed("ns/pool")
    assert exp.satisfied("ns/pool")


def test_expected_creations_add_up() -> None:
    exp = Expectations()
    exp.expect_creations("k", 2)
    exp.expect_creations("k", 3)
    assert exp.pending("k").creates == 5


def test_failed_creation_lowers_the_expectation() -> None:
    exp = Expectations()
    exp.expect_creations("k", 3)
    exp.creation_failed("k", 2)
    exp.creation_observed("k")
    assert exp.satisfied("k")


def test_observations_never_make_counts_negative() -> None:
    exp = Expectations()
    exp.expect_creations("k", 1)
    for _ in range(3):
        exp.creation_observed("k")
    assert exp.pending("k").creates == 0
    exp.expect_creations("k", 1)
    assert not exp.satisfied("k"), "surplus observations must not pre-pay future creates"


def test_observation_for_a_key_without_record_is_ignored() -> None:
    exp = Expectations()
    exp.creation_observed("k")
    exp.deletion_observed("k", "uid")
    assert "k" not in exp
    assert exp.satisfied("k")


def test_negative_expectation_is_rejected() -> None:
    with pytest.raises(ValueError):
        Expectations().expect_creations("k", -1)


def test_expected_deletions_block_until_each_uid_is_observed() -> None:
    exp = Expectations()
    exp.expect_deletions("k", ["u1", "u2"])
    assert exp.pending("k") == Pending(0, frozenset({"u1", "u2"}))
    exp.deletion_observed("k", "u1")
    exp.deletion_observed("k", "u1")  # DELETE after the deletionTimestamp update
    exp.deletion_observed("k", "unrelated")
    assert not exp.satisfied("k")
    exp.deletion_observed("k", "u2")
    assert exp.satisfied("k")


def test_failed_deletion_lowers_the_expectation() -> None:
    exp = Expectations()
    exp.expect_deletions("k", ["u1"])
    exp.deletion_failed("k", "u1")
    assert exp.satisfied("k")


def test_creates_and_deletes_must_both_be_observed() -> None:
    exp = Expectations()
    exp.expect_creations("k", 1)
    exp.expect_deletions("k", ["u1"])
    exp.creation_observed("k")
    assert not exp.satisfied("k")
    exp.deletion_observed("k", "u1")
    assert exp.satisfied("k")


def test_keys_are_independent() -> None:
    exp = Expectations()
    exp.expect_creations("a", 1)
    assert exp.satisfied("b")
    exp.creation_observed("b")
    assert exp.pending("a").creates == 1


def test_expired_expectations_are_satisfied() -> None:
    clock = FakeClock()
    exp = Expectations(timeout=300.0, clock=clock)
    exp.expect_creations("k", 5)
    clock.now += 300.0
    assert not exp.satisfied("k")
    assert not exp.expired("k")
    clock.now += 0.001
    assert exp.satisfied("k")
    assert exp.expired("k")


def test_default_timeout_is_five_minutes() -> None:
    clock = FakeClock()
    exp = Expectations(clock=clock)
    exp.expect_deletions("k", ["u"])
    clock.now += DEFAULT_TIMEOUT - 1
    assert not exp.satisfied("k")
    clock.now += 2
    assert exp.satisfied("k")


def test_raising_a_pending_record_keeps_its_timeout() -> None:
    """client-go semantics: adding to unobserved work does not push its expiry back, so a lost
    create cannot be held off forever by regular later writes (docs/design/runtime.md,
    "Expectations")."""
    clock = FakeClock()
    exp = Expectations(timeout=10.0, clock=clock)
    exp.expect_creations("k", 1)  # this create's event is lost
    for _ in range(2):
        clock.now += 4
        exp.expect_deletions("k", [f"u{clock.now}"])
        assert exp.pending("k").creates == 1
    clock.now += 2.5
    assert exp.satisfied("k"), "10.5 s after the first raise the record has expired"


def test_raising_a_fulfilled_record_starts_a_new_timeout() -> None:
    clock = FakeClock()
    exp = Expectations(timeout=10.0, clock=clock)
    exp.expect_creations("k", 1)
    exp.creation_observed("k")
    clock.now += 8
    exp.expect_creations("k", 1)
    clock.now += 8
    assert not exp.satisfied("k")
    assert exp.pending("k").creates == 1


def test_raising_after_expiry_starts_from_zero() -> None:
    clock = FakeClock()
    exp = Expectations(timeout=10.0, clock=clock)
    exp.expect_creations("k", 4)
    exp.expect_deletions("k", ["lost"])
    clock.now += 11
    exp.expect_creations("k", 1)
    assert exp.pending("k") == Pending(1, frozenset())
    exp.creation_observed("k")
    assert exp.satisfied("k")


def test_delete_forgets_the_key() -> None:
    exp = Expectations()
    exp.expect_creations("k", 3)
    exp.delete("k")
    assert "k" not in exp
    assert len(exp) == 0
    assert exp.satisfied("k")


def test_pending_deletions_are_a_snapshot() -> None:
    exp = Expectations()
    exp.expect_deletions("k", ["u1"])
    snapshot = exp.pending("k").deletes
    exp.deletion_observed("k", "u1")
    assert snapshot == frozenset({"u1"})


# --- model-based ----------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b"])
UIDS = st.sampled_from(["u1", "u2", "u3"])
TIMEOUT = 10.0


class ExpectationsMachine(RuleBasedStateMachine):
    """Random raises, observations, failures and clock jumps against a simple model."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.exp = Expectations(timeout=TIMEOUT, clock=self.clock)
        self.creates: dict[str, int] = {}
        self.deletes: dict[str, set[str]] = {}
        self.raised_at: dict[str, float] = {}

    def _expired(self, key: str) -> bool:
        return key in self.raised_at and self.clock.now - self.raised_at[key] > TIMEOUT

    def _fresh(self, key: str) -> None:
        if key not in self.raised_at or self._expired(key):
            self.creates[key] = 0
            self.deletes[key] = set()
            self.raised_at[key] = self.clock.now
        elif self.creates[key] == 0 and not self.deletes[key]:
            self.raised_at[key] = self.clock.now  # fulfilled: a new timeout

    @rule(key=KEYS, n=st.integers(0, 5))
    def expect_creations(self, key: str, n: int) -> None:
        self.exp.expect_creations(key, n)
        self._fresh(key)
        self.creates[key] += n

    @rule(key=KEYS, uids=st.sets(UIDS, max_size=3))
    def expect_deletions(self, key: str, uids: set[str]) -> None:
        self.exp.expect_deletions(key, uids)
        self._fresh(key)
        self.deletes[key] |= uids

    @rule(key=KEYS, n=st.integers(1, 3), failed=st.booleans())
    def lower_creations(self, key: str, n: int, failed: bool) -> None:
        if failed:
            self.exp.creation_failed(key, n)
        else:
            self.exp.creation_observed(key, n)
        if key in self.creates:
            self.creates[key] = max(0, self.creates[key] - n)

    @rule(key=KEYS, uid=UIDS, failed=st.booleans())
    def lower_deletions(self, key: str, uid: str, failed: bool) -> None:
        if failed:
            self.exp.deletion_failed(key, uid)
        else:
            self.exp.deletion_observed(key, uid)
        self.deletes.get(key, set()).discard(uid)

    @rule(seconds=st.sampled_from([0.5, 3.0, 9.9, 10.0, 10.5, 60.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.exp.delete(key)
        self.creates.pop(key, None)
        self.deletes.pop(key, None)
        self.raised_at.pop(key, None)

    @invariant()
    def counts_never_go_negative(self) -> None:
        for key in ("a", "b"):
            assert self.exp.pending(key).creates >= 0

    @invariant()
    def pending_matches_the_model(self) -> None:
        for key in ("a", "b"):
            expected = Pending(self.creates.get(key, 0), frozenset(self.deletes.get(key, set())))
            assert self.exp.pending(key) == expected

    @invariant()
    def satisfied_iff_nothing_pending_or_expired(self) -> None:
        for key in ("a", "b"):
            nothing_pending = self.creates.get(key, 0) == 0 and not self.deletes.get(key)
            assert self.exp.satisfied(key) == (nothing_pending or self._expired(key))
            if self._expired(key):
                assert self.exp.satisfied(key), "expiry must unblock the controller"


ExpectationsMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None
)
test_expectations_follow_the_model = ExpectationsMachine.TestCase
