"""Leader election pieces without a cluster: the Lease record, identities, timing validation."""

from __future__ import annotations

from typing import cast

import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.leaderelection import LeaderElectionRecord, LeaderElector, default_identity


def test_record_round_trips_through_a_lease_spec() -> None:
    record = LeaderElectionRecord(
        "me", 15, "2025-01-01T00:00:00.000000Z", "2025-01-01T00:00:01.000000Z", 3
    )
    lease = {"spec": record.to_spec()}
    assert LeaderElectionRecord.from_lease(lease) == record
    assert LeaderElectionRecord.from_lease({}) == LeaderElectionRecord()


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
