"""Kubernetes time formats: ``metav1.MicroTime`` written and read."""

from __future__ import annotations

import datetime

__all__ = ["format_micro_time", "parse_micro_time"]


def format_micro_time(moment: datetime.datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
