"""Timestamps as Kubernetes and Go write them."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["format_rfc3339", "format_rfc3339_nano", "parse_rfc3339"]


def format_rfc3339(when: datetime) -> str:
    """``metav1.Time`` JSON: UTC, whole seconds, ``Z`` (``2026-05-21T10:00:00Z``)."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_rfc3339_nano(when: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: fraction without trailing zeros, omitted when zero."""
    utc = _utc(when)
    base = utc.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{utc.microsecond:06d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (``Z`` or an offset, optional fraction) into aware UTC."""
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {text!r}")
    return parsed.astimezone(UTC)


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("naive datetime: pass an aware datetime (UTC)")
    return when.astimezone(UTC)
