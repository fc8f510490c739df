"""The simulator's speed-up: the warm pool's plan, run as is, redoes on every pass work whose
result never changes within a simulation (the one template's hashes, the pool's blueprint,
timestamp parsing); :func:`fast_plan` memoises it while a simulation runs."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from agentsandbox.controllers.warmpool import plan as warmpool_plan

__all__ = ["fast_plan"]


@contextlib.contextmanager
def fast_plan() -> Iterator[None]:
    """Memoise the template hashes and timestamp parsing that plan() redoes on every pass."""
    names = ("pod_template_hash", "sandbox_blueprint_hash", "parse_rfc3339", "build_blueprint")
    saved = {n: getattr(warmpool_plan, n) for n in names}
    memo: dict[tuple[str, int], Any] = {}

    def hashed(name: str) -> Any:
        real = saved[name]

        def wrapper(obj: Any) -> Any:
            key = (name, id(obj))  # the one template, never changed while simulating
            if key not in memo:
                memo[key] = real(obj)
            return memo[key]

        return wrapper

    blueprints: dict[tuple[str, str, str, str | None], dict[str, Any]] = {}

    def blueprint(
        pool: Any, template: Any, pod_hash: str, blueprint_hash: str | None = None
    ) -> dict[str, Any]:
        # the pool's metadata and the template never change within a simulation
        key = (pool["metadata"]["uid"], template["metadata"]["uid"], pod_hash, blueprint_hash)
        if key not in blueprints:
            blueprints[key] = saved["build_blueprint"](pool, template, pod_hash, blueprint_hash)
        return blueprints[key]

    fast = {
        "build_blueprint": blueprint,
        "pod_template_hash": hashed("pod_template_hash"),
        "sandbox_blueprint_hash": hashed("sandbox_blueprint_hash"),
        "parse_rfc3339": functools.lru_cache(maxsize=65536)(saved["parse_rfc3339"]),
    }
    for n, f in fast.items():
        setattr(warmpool_plan, n, f)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(warmpool_plan, n, f)
