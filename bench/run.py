"""``make bench``: the performance scenarios P1-P8 of ``docs/benchmarks.md`` on one private
local control plane (10 kwok nodes, audit log of writes on), each with the controller in its own
process, each from a fresh namespace once the previous scenario's namespaces are gone (not with
``--smoke``: ``Bench.wait_namespaces_gone``), each under its own time cap.

    make bench                    # every scenario, full size (about an hour on 2 cores)
    make bench SCENARIO=P1        # one (P1..P8, comma-separated for several)
    python bench/run.py --smoke --out /tmp/x   # tiny sizes (the smoke test in `make test`)

Writes ``<out>/<P>.json`` (figures, machine facts, versions, flags, commit, the command) and
prints one table. ``<out>`` is ``bench/results/`` by default: those files are committed, each
overwritten by the next full run of its scenario, and ``python bench/report.py --write`` renders
the tables of ``docs/benchmarks.md`` from them. The cluster, the controllers' logs, ``<P>.png``
and ``summary.json`` go to the work directory (``bench/work/``, not committed; ``<out>`` itself
when ``--out`` is given). A smoke run never writes into ``bench/results/``: it needs ``--out``.
Benchmarks report numbers; they are not tests: the exit code is non-zero only when a scenario
could not run (an error or its cap).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, WORK, Bench, BenchError, machine_facts
from results import SmokeInResults, is_results_dir, refuse_smoke_in_results

# run order: P4 and P2 on an empty cluster, P1 (its gate shape leaves the burst P3 refills),
# P3, then P5 (own controller, the Deployment's flags), P6, P7 (10 000 sandboxes), and P8 (the
# status migration of 10 000) last
ORDER = ("P4", "P2", "P1", "P3", "P5", "P6", "P7", "P8")
MODULES = {
    "P1": "p1_claims",
    "P2": "p2_fill",
    "P3": "p3_refill",
    "P4": "p4_overcreate",
    "P5": "p5_cost",
    "P6": "p6_writes",
    "P7": "p7_scale",
    "P8": "p8_migration",
}


def load(key: str) -> ModuleType:
    return importlib.import_module(MODULES[key])


def table(rows: list[tuple[str, str, str, str]]) -> str:
    head = ("scenario", "figure", "measured", "goal")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


async def run_one(b: Bench, key: str, mod: ModuleType, shared: dict[str, Any]) -> dict[str, Any]:
    size = dict(mod.SMOKE if b.smoke else mod.FULL)
    cap = float(size.pop("cap_seconds"))
    await b.check_healthy()
    await b.wait_namespaces_gone()
    t0 = time.monotonic()
    try:
        result = await asyncio.wait_for(mod.run(b, size, shared), cap)
    except TimeoutError:
        raise BenchError(f"{key} passed its cap of {cap:.0f} s") from None
    result.setdefault("size", size)
    result["seconds_total"] = round(time.monotonic() - t0, 1)
    result["cap_seconds"] = cap
    result["smoke"] = b.smoke
    return result


async def main_async(b: Bench, keys: list[str]) -> int:
    await b.connect()
    shared: dict[str, Any] = {}
    summary: dict[str, Any] = {"machine": machine_facts(b.cluster), "scenarios": {}}
    rows: list[tuple[str, str, str, str]] = []
    failed = 0
    try:
        for key in keys:
            mod = load(key)
            print(f"\n=== {key}: {mod.TITLE}", flush=True)
            try:
                result = await run_one(b, key, mod, shared)
            except Exception as err:
                failed += 1
                traceback.print_exc()
                summary["scenarios"][key] = {"error": f"{type(err).__name__}: {err}"}
                rows.append((key, "error", f"{type(err).__name__}: {err}"[:80], ""))
                continue
            shared[key] = result
            result["machine"] = machine_facts(b.cluster)
            result["command"] = " ".join(["python", "bench/run.py", *sys.argv[1:]])
            b.write(key, result)
            try:
                mod.plot(result, b.work / f"{key}.png")
            except Exception:  # a plot never loses the numbers
                traceback.print_exc()
            summary["scenarios"][key] = result.get("figures", {})
            for figure, measured, goal in mod.rows(result):
                rows.append((key, figure, measured, goal))
            print(table([r for r in rows if r[0] == key]), flush=True)
    finally:
        await b.close()
    (b.work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print("\n" + table(rows))
    print(f"\nresults in {b.out} (logs, plots and the summary in {b.work})")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="", help="P1..P8, comma-separated; default all")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    keys = [k.strip().upper() for k in args.scenario.split(",") if k.strip()] or list(ORDER)
    unknown = [k for k in keys if k not in MODULES]
    if unknown:
        parser.error(f"unknown scenario {unknown}; pick from {', '.join(ORDER)}")
    keys = [k for k in ORDER if k in keys]
    try:
        refuse_smoke_in_results(args.out, smoke=args.smoke)
    except SmokeInResults as err:
        parser.error(str(err))
    work = WORK if is_results_dir(args.out) else args.out
    b = Bench(args.out, smoke=args.smoke, work=work)
    b.start()
    try:
        return asyncio.run(main_async(b, keys))
    finally:
        b.stop()


if __name__ == "__main__":
    sys.exit(main())
