"""Leader election pieces without a cluster: the Lease record, times, timing validation."""

from __future__ import annotations

import datetime
from typing import cast

import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.leaderelection import (
    LeaderElectionRecord,
    LeaderElector,
    default_identity,
    format_micro_time,
    parse_micro_time,
)


def test_micro_time_is_rfc3339_with_microseconds_in_utc() -> None:
    moment = datetime.datetime(2025, 3, 4, 5, 6, 7, 89, tzinfo=datetime.UTC)
    assert format_micro_time(moment) == "2025-03-04T05:06:07.000089Z"
    assert parse_micro_time("2025-03-04T05:06:07.000089Z") == moment
    assert parse_micro_time(None) is None and parse_micro_time("garbage") is None


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
