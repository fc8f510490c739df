"""P3 — refill after the claim burst: P1's gate shape (750 claims at 75/s against a Ready pool of
1050) adopts 750 pool sandboxes; how long until the pool is back at 1050 Ready, beside the
ceiling for the same number of sandboxes.

The refill is timed from the first claim's scheduled send (replacements can start with the first
adoption) to the watch event that shows the pool back at full; the time after the last claim was
Ready is reported beside it. The **ceiling** is P2's: a bare async loop creating that many
Sandbox objects (the pool's blueprint, no owner) at concurrency 16, 64 and 300, with the same
controller process running, the best of the three. When P1 ran in this invocation its gate step
is used; otherwise the gate shape is run here first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import p1_claims
from ceiling import ceiling
from harness import GATE_FLAGS, Bench

TITLE = "refill after the gate-shaped claim burst, against the ceiling"
GOAL_RATIO = 1.15
FULL: dict[str, Any] = {
    "gate": {"rate": 75, "claims": 750, "pool": 1050},
    "concurrencies": [16, 64, 300],
    "cap_seconds": 600,
}
SMOKE: dict[str, Any] = {
    "gate": {"rate": 5, "claims": 5, "pool": 7},
    "concurrencies": [4],
    "cap_seconds": 180,
}


async def run(b: Bench, size: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    g = size["gate"]
    with b.controller("P3") as proc:
        await proc.wait_ready()
        p1 = shared.get("P1")
        if p1 is not None and p1["gate"]["claims"] == g["claims"]:
            gate, source = p1["gate"], "P1 of this run"
        else:
            gate = await p1_claims.step(b, float(g["rate"]), int(g["claims"]), int(g["pool"]))
            source = "run here"
            await b.wait_namespaces_gone()
        refilled = int(gate["warm_hits"])
        ceil = await ceiling(b, max(refilled, 1), list(size["concurrencies"]), 300.0)
        proc.check()
    seconds = gate["refill_seconds_from_first_claim"]
    best = ceil["seconds"]
    ratio = round(seconds / best, 3) if seconds is not None and best else None
    return {
        "flags": list(GATE_FLAGS),
        "gate_source": source,
        "figures": {
            "refill_seconds": seconds,
            "refilled_sandboxes": refilled,
            "ceiling_seconds": best,
            "ratio": ratio,
            "refill_seconds_after_last_claim_ready": gate["refill_seconds_after_last_claim_ready"],
        },
        "gate": {k: v for k, v in gate.items() if k != "latencies_ms"},
        "ceiling": ceil,
    }


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    f = result["figures"]
    return [
        (
            f"refill of {f['refilled_sandboxes']} (from the first claim)",
            f"{f['refill_seconds']} s vs ceiling {f['ceiling_seconds']} s = {f['ratio']} x",
            f"<= {GOAL_RATIO} x ceiling",
        ),
        (
            "refill after the last claim Ready",
            f"{f['refill_seconds_after_last_claim_ready']} s",
            "",
        ),
    ]


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    series = result["gate"]["pool_series"]
    ax.plot([p[0] for p in series], [p[1] for p in series], label="pool Ready (gate shape)")
    for run in result["ceiling"].get("runs") or []:
        s = run.get("series") or []
        ax.plot(
            [p[0] for p in s],
            [p[1] for p in s],
            linestyle="--",
            label=f"ceiling c={run['concurrency']}",
        )
    ax.set_xlabel("seconds (pool: from the first claim; ceiling: from its first create)")
    ax.set_ylabel("Ready sandboxes")
    f = result["figures"]
    ax.set_title(f"P3 refill of {f['refilled_sandboxes']}: {f['ratio']} x ceiling")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


GOALS = (("P3 refill of 750 after the gate shape", "<= 1.15 x ceiling"),)


def goals(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    f = result["figures"]
    ratio = f["ratio"]
    return [
        (
            f"P3 refill of {f['refilled_sandboxes']} after the gate shape",
            f"<= {GOAL_RATIO} x ceiling",
            f"{ratio} x: {f['refill_seconds']} s vs {f['ceiling_seconds']} s",
            ratio is not None and ratio <= GOAL_RATIO,
        )
    ]
