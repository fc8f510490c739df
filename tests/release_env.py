"""What the tests of a built release share (tests/registry_push, tests/release_artifacts): the
environment ``make release-check`` sets for them, and hack/release_check.py (the release's file
names and version forms)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

import release_check  # noqa: E402

__all__ = ["ROOT", "env", "release_check"]


def env(name: str) -> str:
    """The variable ``make release-check`` sets; the test fails when it is unset or empty."""
    value = os.environ.get(name, "")
    assert value, f"{name} is not set: run this through `make release-check`"
    return value
