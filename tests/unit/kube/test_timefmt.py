"""Kubernetes time formats: ``metav1.MicroTime``."""

from __future__ import annotations

import datetime

from agentsandbox.kube.timefmt import format_micro_time, parse_micro_time


def test_micro_time_is_rfc3339_with_microseconds_in_utc() -> None:
    moment = datetime.datetime(2025, 3, 4, 5, 6, 7, 89, tzinfo=datetime.UTC)
    assert format_micro_time(moment) == "2025-03-04T05:06:07.000089Z"
    assert parse_micro_time("2025-03-04T05:06:07.000089Z") == moment
    assert parse_micro_time(None) is None and parse_micro_time("garbage") is None
