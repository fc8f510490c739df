"""The demo's plot (``make demo``): the pool over time beside the claim latencies by launch type."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

__all__ = ["ClaimTimes", "percentile", "plot"]


class ClaimTimes(Protocol):
    """What the plot needs of the claim phase (``demo.ClaimRun``)."""

    started: float  # first claim sent (demo clock)
    all_ready: float  # last claim Ready (demo clock)

    def latencies_ms(self) -> dict[str, list[float]]: ...


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def plot(
    series: list[tuple[float, int, int]],
    marks: list[tuple[float, str]],
    run: ClaimTimes | None,
    out: Path,
) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s[0] for s in series]
    fig, (ax, lat) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [2.2, 1]})
    ax.plot(t, [s[1] for s in series], label="sandboxes (status.replicas)")
    ax.plot(t, [s[2] for s in series], label="Ready (status.readyReplicas)")
    for x, text in marks:
        ax.axvline(x, color="grey", linestyle=":")
        ax.annotate(text, (x, 0), rotation=90, fontsize=8, va="bottom", ha="right")
    if run is not None:
        ax.axvspan(
            run.started,
            run.all_ready,
            color="tab:green",
            alpha=0.12,
            label="claims: first sent → last Ready",
        )
    ax.set_xlabel("seconds")
    ax.set_ylabel("sandboxes")
    ax.set_title("SandboxWarmPool on the local control plane")
    ax.legend(loc="upper left", fontsize=8)
    if run is not None:
        import random

        rng = random.Random(1)
        data = run.latencies_ms()
        kinds = [k for k in ("warm", "cold") if data[k]]
        colours = {"warm": "tab:orange", "cold": "tab:blue"}
        lat.boxplot(
            [data[k] for k in kinds],
            positions=range(1, len(kinds) + 1),
            widths=0.5,
            showfliers=False,
        )
        for i, k in enumerate(kinds, start=1):
            xs = [i + rng.uniform(-0.15, 0.15) for _ in data[k]]
            lat.scatter(xs, data[k], s=18, alpha=0.8, color=colours[k], zorder=3)
        lat.set_xticks(range(1, len(kinds) + 1))
        lat.set_xticklabels(
            [f"{k} (n={len(data[k])})\np50 {percentile(data[k], 50):.0f} ms" for k in kinds]
        )
        lat.set_ylim(bottom=0)
        lat.set_ylabel("create → Ready event (ms)")
        lat.set_title("SandboxClaim latency by launch type")
        lat.grid(axis="y", alpha=0.3)
    else:
        lat.set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True
