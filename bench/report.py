"""The generated parts of the report pages, from the committed JSON in ``bench/results/``.

    python bench/report.py --write     # rewrite every generated block in the docs
    python bench/report.py --check     # exit 1 when a doc differs from its data (the unit test)
    python bench/report.py --show p1   # print one block (``--results DIR``: from another dir)

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- end -->`` in
``docs/benchmarks.md`` (``make bench``: ``bench/results/P1.json`` ... ``P7.json``),
``docs/reliability.md`` (``make soak``: ``soak.json``) and ``docs/autoscaling.md``
(``bench/sim_tables.py``: ``sim-*.json``; ``bench/autoscale_real.py``: ``autoscale_real.json``).
Every goal keeps its row, met or missed, with the measured value; a block whose JSON is missing
says so and how to measure it, and shows no number.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import RESULTS, ROOT

DOCS = ROOT / "docs"
BENCH_ORDER = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8")
START = re.compile(r"<!-- generated: ([a-z0-9-]+) -->\n")
END = "<!-- end -->"


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def not_measured(what: str, command: str) -> str:
    return (
        f"Not measured since the data became committed: run `{command}` (it writes "
        f"{what}.json into `bench/results/`), then `python bench/report.py --write`."
    )


def _num(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


def _pct(x: float) -> str:
    return f"{x * 100:.2f} %"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def provenance(r: dict[str, Any]) -> str:
    """One line: where, when and how the numbers were measured."""
    m = r.get("machine") or r.get("run") or {}
    cp = m.get("control_plane") or {}
    versions = ", ".join(
        f"{k} {cp[k]}" for k in ("kubernetes", "etcd", "kwok") if isinstance(cp, dict) and k in cp
    )
    parts = [
        f"commit `{m.get('commit', 'unknown')}`" + (" (with changes)" if m.get("dirty") else "")
    ]
    if r.get("date"):
        parts.append(str(r["date"]))
    if m.get("cpus"):
        parts.append(f"{m['cpus']} CPUs" + (f" ({m['cpu_model']})" if m.get("cpu_model") else ""))
    if m.get("python"):
        parts.append(f"Python {m['python']}")
    if versions:
        parts.append(versions)
    if m.get("kwok_nodes"):
        parts.append(f"{m['kwok_nodes']} kwok nodes")
    if m.get("load_average"):
        parts.append(f"load average at the end {m['load_average']}")
    command = r.get("command") or m.get("command")
    if command:
        parts.append(f"`{command}`")
    seconds = r.get("seconds_total") or r.get("total_seconds") or m.get("seconds")
    if seconds:
        parts.append(f"{seconds} s")
    return "Measured: " + "; ".join(parts) + "."


# --------------------------------------------------------------------------- benchmarks.md
def _scenario(key: str) -> Any:
    from run import load as load_module

    return load_module(key)


def bench_goals(results: Path) -> str:
    lines = ["| goal | target | measured | result |", "|---|---|---|---|"]
    for key in BENCH_ORDER:
        mod = _scenario(key)
        r = load(results, key)
        if r is None:
            for name, target in mod.GOALS:
                lines.append(
                    f"| {name} | {target} | not measured since the data became committed "
                    f"(`make bench SCENARIO={key}`) | — |"
                )
            continue
        for name, target, measured, ok in mod.goals(r):
            lines.append(f"| {name} | {target} | {measured} | {_met(ok)} |")
    return "\n".join(lines)


def bench_scenario(key: str) -> Callable[[Path], str]:
    def render(results: Path) -> str:
        r = load(results, key)
        if r is None:
            return not_measured(key, f"make bench SCENARIO={key}")
        mod = _scenario(key)
        lines = [provenance(r), "", "| figure | measured | goal |", "|---|---|---|"]
        for figure, measured, goal in mod.rows(r):
            lines.append(f"| {figure} | {measured} | {goal} |")
        return "\n".join(lines)

    return render


def _writes_table(writes: list[Any]) -> list[str]:
    lines = ["| # | write | why |", "|---|---|---|"]
    for i, (resource, verb, why) in enumerate(writes, 1):
        lines.append(f"| {i} | `{verb} {resource}` | {why} |")
    return lines


def p1_ceiling_writes(results: Path) -> str:
    """The contract's writes per warm claim as ``bench/p1_ceiling.py`` makes them now; when the
    committed P1 run made a different list, that list too, so no figure is read against writes
    it was not measured with."""
    from p1_ceiling import WRITES

    lines = _writes_table([list(w) for w in WRITES])
    r = load(results, "P1")
    measured = None if r is None else r.get("ceiling", {}).get("writes_per_claim")
    if measured is not None and [list(w) for w in measured] != [list(w) for w in WRITES]:
        lines += [
            "",
            f"The committed P1 run (commit `{r['machine'].get('commit', '?')}`) measured the "
            f"ceiling with {len(measured)} writes per claim, before this list changed; its "
            "figures are for these, until `make bench SCENARIO=P1` runs again:",
            "",
            *_writes_table(measured),
        ]
    return "\n".join(lines)


def p1_cpu(results: Path) -> str:
    """Where the CPU went during each P1 step (medians over the runs)."""
    r = load(results, "P1")
    if r is None:
        return not_measured("P1", "make bench SCENARIO=P1")
    procs = ("kube-apiserver", "etcd", "controller", "kwok", "kube-scheduler", "bench")
    head = " | ".join(procs)
    lines = [
        f"| step | machine busy | {head} (cores) |",
        "|---|---|" + "---|" * len(procs),
    ]

    def med(values: list[Any]) -> str:
        have = [float(v) for v in values if v is not None]
        return f"{statistics.median(have):.2f}" if have else "-"

    groups: list[tuple[str, list[dict[str, Any]]]] = []
    rates = [s["rate"] for s in r["sweeps"][0]["steps"]]
    for rate in rates:
        at = [s for sw in r["sweeps"] for s in sw["steps"] if s["rate"] == rate]
        groups.append((f"ours {rate:g}/s", at))
    crates = [s["rate"] for s in r["ceiling"]["sweeps"][0]["steps"]]
    for rate in crates:
        at = [s for sw in r["ceiling"]["sweeps"] for s in sw["steps"] if s["rate"] == rate]
        groups.append((f"ceiling {rate:g}/s", at))
    groups.append((f"gate {r['gate']['rate']:g}/s x {r['gate']['claims']}", [r["gate"]]))
    for label, at in groups:
        busy = med([s["cpu_claims"]["machine_busy_share"] for s in at])
        cells = [
            med([(s["cpu_claims"]["processes"].get(p) or {}).get("cores") for s in at])
            for p in procs
        ]
        lines.append(f"| {label} | {busy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- reliability.md
def soak_block(results: Path) -> str:
    r = load(results, "soak")
    if r is None:
        return not_measured("soak", "make soak")
    slope = r["leader_rss_slope_mb_per_10min"]
    served = r["claims_served"]
    created = r["claims_created"]
    late = r["claims_not_served_within_30s"]
    inv = {k: v for k, v in r["invariants"].items() if k != "sandboxes_seen"}
    inv_ok = all(v == "ok" for v in inv.values())
    leader = bool(r["leader_unrestarted_and_leading"])
    minutes = r["duration_s"] / 60
    lines = [
        provenance(r),
        "",
        f"| goal ({minutes:g}-minute run) | measured | result |",
        "|---|---|---|",
        f"| every claim served within 30 s | {served} of {created} served, {late} not within "
        f"30 s | {_met(late == 0 and served == created)} |",
        f"| every invariant ok | {', '.join(f'{k}: {v}' for k, v in inv.items())} "
        f"| {_met(inv_ok)} |",
        f"| the leader never changed | un-restarted and leading at the end: {leader} "
        f"| {_met(leader)} |",
        f"| leader RSS flat (< 2 MB per 10 min after minute {r['slope_from_s'] / 60:g}) "
        f"| {slope} MB per 10 min | {_met(slope is not None and slope < 2.0)} |",
        "",
        f"Standby restarts: {r['standby_restarts']}; sandboxes seen: "
        f"{r['invariants'].get('sandboxes_seen')}.",
        "",
        "| window | served | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for w in r["windows"]:
        lines.append(
            f"| {w['from_s'] / 60:g}-{w['to_s'] / 60:g} min | {w['served']} | {w['p50_ms']} "
            f"| {w['p90_ms']} | {w['p99_ms']} | {w['max_ms']} |"
        )
    lines += ["", "| minute | leader RSS MiB | standby RSS MiB |", "|---|---|---|"]
    for row in r["rss_every_minute"][:: max(1, len(r["rss_every_minute"]) // 12)]:
        lines.append(
            f"| {row['t'] / 60:.1f} | {row.get('leader_rss_mib')} | {row.get('standby_rss_mib')} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- autoscaling.md
SIM_GOAL_SAVING = 0.30
SIM_TRACES = ("burst", "diurnal", "burst-instant")


def _sim_cmd(name: str) -> str:
    return f"python bench/sim_tables.py {name}"


def _saving(c: dict[str, Any]) -> float | None:
    return None if c["idle_ratio"] is None else 1.0 - c["idle_ratio"]


def _sim_ok(c: dict[str, Any]) -> bool:
    saving = _saving(c)
    return (
        saving is not None
        and c["autoscaled"]["warm_share"] >= c["target"]
        and saving >= SIM_GOAL_SAVING
    )


def _fewer(saving: float) -> str:
    return f"{saving:.0%} fewer" if saving >= 0 else f"{-saving:.0%} more"


def _lat(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1.0 else f"{seconds:.1f} s"


def sim_table(name: str, goal: bool = True) -> Callable[[Path], str]:
    """The full table of one simulator run; ``goal``: its comparisons are judged against the
    goal (the steady sanity check is not)."""

    def render(results: Path) -> str:
        r = load(results, f"sim-{name}")
        if r is None:
            return not_measured(f"sim-{name}", _sim_cmd(name))
        lines = [
            f"`{r['run']['command']}` (commit `{r['run']['commit']}`"
            + (", with changes" if r["run"].get("dirty") else "")
            + f"): {r['description']}; {_num(r['claims'])} claims over "
            f"{r['duration_s'] / 3600:g} h.",
            "",
            "| create → Ready | pool | warm | warm (whole run) | p99 / max latency "
            "| idle sandbox-s | Ready idle sandbox-s | mean pool | peak replicas |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in r["comparisons"]:
            for res in (c["autoscaled"], c["static"]):
                if res is None:
                    continue
                lat = res["latency_s"]
                lines.append(
                    f"| {c['latency']} | {res['pool']} | {_pct(res['warm_share'])} "
                    f"| {_pct(res['warm_share_whole_run'])} | {_lat(lat['p99'])} / "
                    f"{_lat(lat['max'])} | {_num(res['idle_sandbox_seconds'])} "
                    f"| {_num(res['ready_idle_sandbox_seconds'])} | {res['mean_pool']:.1f} "
                    f"| {res['peak_replicas']} |"
                )
        lines.append("")
        for c in r["comparisons"]:
            tried = ", ".join(
                f"{k} → {_pct(v)}"
                for k, v in sorted(c["static_sizes_tried"].items(), key=lambda kv: int(kv[0]))
            )
            saving = _saving(c)
            if saving is None:
                lines.append(f"- {c['latency']}: no static pool reached {_pct(c['target'])}.")
                continue
            ready = 1.0 - (c["ready_idle_ratio"] or 0.0)
            verdict = (
                f" — goal (≥ {c['target']:.0%} warm, ≥ {SIM_GOAL_SAVING:.0%} fewer) "
                f"{_met(_sim_ok(c))}"
                if goal
                else ""
            )
            lines.append(
                f"- {c['latency']}: idle ratio autoscaled / static {c['static_size']} "
                f"**{c['idle_ratio']:.2f}** ({_fewer(saving)} idle sandbox-seconds; Ready idle "
                f"{_fewer(ready)}); autoscaled {_pct(c['autoscaled']['warm_share'])} warm"
                f"{verdict}. Static sizes tried: {tried}."
            )
        return "\n".join(lines)

    return render


def sim_goals(results: Path) -> str:
    lines = [
        "| trace | create → Ready | autoscaled warm | idle: autoscaled / static | fewer | goal |",
        "|---|---|---|---|---|---|",
    ]
    for name in SIM_TRACES:
        r = load(results, f"sim-{name}")
        if r is None:
            lines.append(
                f"| {name} | — | not measured since the data became committed "
                f"(`{_sim_cmd(name)}`) | | | — |"
            )
            continue
        for c in r["comparisons"]:
            saving = _saving(c)
            verdict = _met(_sim_ok(c))
            if name == "burst-instant":
                verdict = f"({verdict}, informational)"
            lines.append(
                f"| {name} | {c['latency']} | {_pct(c['autoscaled']['warm_share'])} "
                f"| {_num(c['autoscaled']['idle_sandbox_seconds'])} / "
                f"{_num(c['static']['idle_sandbox_seconds']) if c['static'] else '—'} "
                f"(static {c['static_size']}) | "
                f"{'—' if saving is None else _fewer(saving)} | {verdict} |"
            )
    return "\n".join(lines)


def autoscaling_goals(results: Path) -> str:
    lines = ["| goal | result |", "|---|---|"]
    texts = {
        "burst": "simulator, burst trace: ≥ 99 % warm and ≥ 30 % fewer idle sandbox-seconds "
        "than the smallest static pool reaching 99 %",
        "diurnal": "simulator, diurnal trace: the same",
        "burst-instant": "simulator, burst-instant trace (informational): the same",
    }
    for name in SIM_TRACES:
        r = load(results, f"sim-{name}")
        if r is None:
            result = f"not measured since the data became committed (`{_sim_cmd(name)}`)"
        else:
            parts = []
            for c in r["comparisons"]:
                saving = _saving(c)
                fewer = (
                    "no static pool reached the target"
                    if saving is None
                    else (f"{saving:.0%} fewer")
                )
                parts.append(f"{_met(_sim_ok(c))} with {c['latency']} ({fewer})")
            result = "; ".join(parts)
        lines.append(f"| {texts[name]} | {result} |")
    r = load(results, "autoscale_real")
    goal = (
        "real cluster: ≥ 97 % warm and ≥ 15 % fewer idle sandbox-seconds than the smallest "
        "static pool reaching the same share"
    )
    if r is None:
        lines.append(
            f"| {goal} | not measured since the data became committed "
            "(`python bench/autoscale_real.py`) |"
        )
    else:
        f = r["figures"]
        lines.append(
            f"| {goal} | {_met(bool(f['goal_met']))}: {f['autoscaled_warm_share'] * 100:.1f} % "
            f"warm, {f['fewer_idle_percent']} % fewer than static {f['static_size']} "
            f"({r['trace_params'].get('seed')} as the random seed) |"
        )
    return "\n".join(lines)


def autoscale_real_block(results: Path) -> str:
    r = load(results, "autoscale_real")
    if r is None:
        return not_measured("autoscale_real", "python bench/autoscale_real.py")
    from autoscale_real import md_table

    return provenance(r) + "\n\n" + f"{r['trace']}\n\n" + md_table(r).rstrip("\n")


def sim_local_latency(results: Path) -> str:
    from agentsandbox.sim.latency import LOCAL_SAMPLES

    xs = sorted(LOCAL_SAMPLES)
    p99 = xs[max(0, -(-99 * len(xs) // 100) - 1)]
    return (
        f"{len(xs)} samples, mean {statistics.fmean(xs):.2f} s, median "
        f"{statistics.median(xs):.2f} s, p99 {p99:.2f} s (computed from "
        "`LOCAL_SAMPLES` in `src/agentsandbox/sim/latency.py`)."
    )


def autoscale_set(name: str) -> Callable[[Path], str]:
    """Every row of one scenario set of ``bench/autoscale/evaluate.py`` (both refill
    distributions), judged by the goal rule its JSON records."""

    def render(results: Path) -> str:
        r = load(results, f"autoscale-{name}")
        if r is None:
            return not_measured(
                f"autoscale-{name}",
                f"python bench/autoscale/evaluate.py --set {name} --out build/autoscale-eval",
            )
        lines = [
            f"`python bench/autoscale/evaluate.py --set {name}` (commit `{r['commit'][:7]}`, "
            f"{r['machine']['cpus']} CPUs, Python {r['machine']['python']}, "
            f"{r['elapsed_s'] / 60:.1f} min with {r['jobs']} jobs): goal met in **{r['met']} of "
            f"{r['judged']}** judged runs.",
            "",
            "| scenario | refill | warm | idle sandbox-s: autoscaled / smallest static "
            "reaching the target | ratio (allowed) | deleted before Ready | goal |",
            "|---|---|---|---|---|---|---|",
        ]
        for e in r["results"]:
            auto = e["autoscaled"]
            g = e["goal"]
            if e["static"] is None:
                growth = (e.get("pool_after_warmup") or {}).get("growth")
                own = f"own goal: growth after the warm-up {growth}"
                if g["met"] is not None:  # judged (runs from the breaker's own rule on)
                    own = (
                        f"{'met' if g['met'] else '**missed**'} (own goal: {g['trips']} trip"
                        f"{'s' if g['trips'] != 1 else ''}"
                    )
                    if g["trips"]:
                        own += (
                            f" {g['tripped_after_s']:.0f} s after the first stuck member "
                            f"(≤ {g['limit_s']:.0f} s), growth after it "
                            f"{g['growth_after_trip']}"
                        )
                    own += ")"
                lines.append(
                    f"| {e['scenario']} | {e['latency']} | {_pct(auto['warm_share'])} "
                    f"| {_num(auto['idle_sandbox_seconds'])} / no static pool reaches it "
                    f"| — | {auto['deletes_before_ready']} | {own} |"
                )
                continue
            verdict = "met" if g["met"] else "**missed**"
            why = []
            if not g["warm_ok"]:
                why.append("warm")
            if not g["idle_ok"]:
                why.append("idle")
            lines.append(
                f"| {e['scenario']} | {e['latency']} | {_pct(auto['warm_share'])} "
                f"| {_num(auto['idle_sandbox_seconds'])} / "
                f"{_num(e['static']['idle_sandbox_seconds'])} (static {e['static_size']}) "
                f"| {e['idle_ratio']:.2f} ({g['allowance']:.2f}) "
                f"| {auto['deletes_before_ready']} "
                f"| {verdict}{' (' + ', '.join(why) + ')' if why else ''} |"
            )
        return "\n".join(lines)

    return render


def autoscale_realisations(results: Path) -> str:
    """``bench/autoscale/realisations.py``: per scenario and refill, the share of realisations
    of its trace's process on which the autoscaler meets the goal, and the best fixed size's."""
    r = load(results, "autoscale-realisations")
    if r is None:
        return not_measured(
            "autoscale-realisations",
            "python bench/autoscale/realisations.py --only NAME --out build/realisations",
        )
    lines = [
        f"`{r['command']}` (commit `{r['commit'][:7]}`, {r['machine']['cpus']} CPUs, "
        f"{r['elapsed_s'] / 60:.0f} min with {r['jobs']} jobs; the {r['set']} set's scenarios, "
        f"seeds from {r['seed_base']}):",
        "",
        "| scenario | refill | realisations | autoscaler meets the goal | best fixed size "
        "meets it | best fixed sizes | hindsight static size (min / median / max) | "
        "autoscaler idle ÷ static (min / median / max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in r["summaries"]:
        n = s["realisations"]
        best = s["best_fixed_met"]
        if best is None:  # --judge-only: the fixed sizes were not searched
            fixed, shown = "not searched", "—"
        else:
            fixed = f"{best} ({best / n:.0%})"
            shown = ", ".join(str(n) for n in s["best_fixed_sizes"])
        h, q = s["hindsight_static_size"], s["idle_ratio"]
        lines.append(
            f"| {s['scenario']} | {s['latency']} | {n} "
            f"| {s['autoscaler_met']} ({s['autoscaler_met'] / n:.0%}) "
            f"| {fixed} | {shown} "
            f"| {h['min']} / {h['median']:g} / {h['max']} "
            f"| {q['min']:.2f} / {q['median']:.2f} / {q['max']:.2f} |"
        )
    return "\n".join(lines)


#: the realisation studies of one family of processes at two lengths (docs/autoscaling.md)
LENGTH_STUDIES = ("autoscale-lengths-short", "autoscale-lengths-long")


#: the same study of round 15's design (its tuning evidence), at 12 hours
LENGTH_STUDY_FLOORLESS = ("autoscale-lengths-floorless",)


def autoscale_lengths(stems: tuple[str, ...]) -> Callable[[Path], str]:
    """A table of the realisation studies ``stems``, each in its own rows."""
    return lambda results: _lengths(results, stems)


def _lengths(results: Path, stems: tuple[str, ...]) -> str:
    """Per trace length and shape (the scenario name's last part), the autoscaler's draws met
    over every process of that shape, with the warm share needed, and its idle time over the
    hindsight static pool's."""
    studies = _every(results, stems)
    if studies is None:
        return not_measured(
            stems[-1],
            "python bench/autoscale/realisations.py --set tuning --only 'r*-grouped-*' "
            "--judge-only --hours H --out build/rz",
        )
    lines = [_ran(r) for r in studies]
    lines += [
        "",
        "| trace length | shape | refill | processes | draws | autoscaler meets the goal | "
        "reaches the warm share needed | autoscaler idle ÷ static (median / max) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def shape(e: dict[str, Any]) -> str:
        return str(e["scenario"]).rsplit("-", 1)[-1]  # grouped-8 -> 8

    for r in studies:
        entries = _judged(r)
        for size in sorted({shape(e) for e in entries}, key=int):
            for latency in sorted({e["latency"] for e in entries}):
                mine = [e for e in entries if shape(e) == size and e["latency"] == latency]
                hours = sorted({e["duration_s"] / 3600 for e in mine})
                met, warm, median, top = _pooled(mine)
                lines.append(
                    f"| {' / '.join(f'{h:g}' for h in hours)} h | groups of {size} | {latency} "
                    f"| {len({e['scenario'] for e in mine})} | {len(mine)} "
                    f"| {met} ({met / len(mine):.0%}) | {warm} "
                    f"| {median:.2f} / {top:.2f} |"
                )
    return "\n".join(lines)


def _every(results: Path, stems: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """The studies of ``stems``, all of them, or None when one is not committed."""
    studies = [r for stem in stems if (r := load(results, stem)) is not None]
    return studies if len(studies) == len(stems) else None


def _judged(r: dict[str, Any]) -> list[dict[str, Any]]:
    """A study's runs with a verdict (``goal.met`` is not None)."""
    return [e for e in r["results"] if e["goal"]["met"] is not None]


def _ran(r: dict[str, Any]) -> str:
    """A study's provenance line: its command, commit, CPUs, time and jobs (and seeds, for
    draws)."""
    seeds = f"; seeds from {r['seed_base']}" if "seed_base" in r else ""
    return (
        f"- `{r['command']}` (commit `{r['commit'][:7]}`, {r['machine']['cpus']} CPUs, "
        f"{r['elapsed_s'] / 60:.0f} min with {r['jobs']} jobs{seeds})"
    )


def _pooled(draws: list[dict[str, Any]]) -> tuple[int, int, float, float]:
    """Of judged draws: how many meet the goal, how many reach the warm share needed, and the
    median and largest autoscaler idle time over the hindsight static pool's."""
    ratios = [e["idle_ratio"] for e in draws]
    met = sum(1 for e in draws if e["goal"]["met"])
    warm = sum(1 for e in draws if e["goal"]["warm_ok"])
    return met, warm, statistics.median(ratios), max(ratios)


#: round 17's tuning evidence: draws of the tuning set's irregular-burst processes, the design
#: before the round's tuning commit, then after it (bench/autoscale/realisations.py)
IRREGULAR_STUDIES = ("autoscale-irregular-before", "autoscale-irregular")


def autoscale_irregular(results: Path) -> str:
    """Per study (one design), the draws of every irregular-burst process pooled: how many meet
    the goal, reach the warm share needed and hold no more idle time than the hindsight static
    pool; and, where searched, how many the best fixed size of each process meets."""
    studies = _every(results, IRREGULAR_STUDIES)
    if studies is None:
        return not_measured(
            IRREGULAR_STUDIES[-1],
            "python bench/autoscale/realisations.py --set tuning --only '*bursts-irregular' "
            "--latency lognormal --out build/rz",
        )
    lines = [_ran(r) for r in studies]
    lines += [
        "",
        "| commit | processes | draws | autoscaler meets the goal | reaches the warm share "
        "needed | idle ≤ static | autoscaler idle ÷ static (median / max) | best fixed size "
        "meets it |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in studies:
        mine = _judged(r)
        met, warm, median, top = _pooled(mine)
        idle = sum(1 for e in mine if e["idle_ratio"] <= 1.0 + 1e-12)
        best = [s["best_fixed_met"] for s in r["summaries"]]
        fixed = "not searched" if None in best else f"{sum(best)} ({sum(best) / len(mine):.0%})"
        lines.append(
            f"| `{r['commit'][:7]}` | {len({e['scenario'] for e in mine})} | {len(mine)} "
            f"| {met} ({met / len(mine):.0%}) | {warm} | {idle} "
            f"| {median:.2f} / {top:.2f} | {fixed} |"
        )
    return "\n".join(lines)


#: round 17's check on the tuning set: its r14..r16 rows replayed with the round's design,
#: against the whole set's replay before it (autoscale-tuning)
TUNING_CHECKS = ("autoscale-tuning-check", "autoscale-tuning-check-stationary")


def autoscale_tuning_check(results: Path) -> str:
    """Per replay of part of the tuning set: its runs judged and met, and against the same runs
    of the whole set's replay (``autoscale-tuning``): how many give the same idle time, how
    many hold less or more, and how many verdicts changed."""
    whole = load(results, "autoscale-tuning")
    checks = [r for stem in TUNING_CHECKS if (r := load(results, stem)) is not None]
    if whole is None or len(checks) < len(TUNING_CHECKS):
        return not_measured(
            TUNING_CHECKS[0],
            "python bench/autoscale/evaluate.py --set tuning --only NAME --out build/check",
        )
    before = {(e["scenario"], e["latency"]): e for e in whole["results"]}
    lines = [
        "| replay | runs judged | met | met before (`" + whole["commit"][:7] + "`) | same "
        "idle time | less idle | more idle | gained | lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in checks:
        runs = _judged(r)
        pairs = [(e, before[(e["scenario"], e["latency"])]) for e in runs]
        idle = [
            (e["autoscaled"]["idle_sandbox_seconds"], o["autoscaled"]["idle_sandbox_seconds"])
            for e, o in pairs
        ]
        same = sum(1 for a, b in idle if abs(a - b) <= 1e-6 * max(b, 1.0))
        less = sum(1 for a, b in idle if a < b - 1e-6 * max(b, 1.0))
        gained = sum(1 for e, o in pairs if e["goal"]["met"] and not o["goal"]["met"])
        lost = sum(1 for e, o in pairs if o["goal"]["met"] and not e["goal"]["met"])
        lines.append(
            f"| `{r['commit'][:7]}`, {r['elapsed_s'] / 60:.0f} min with {r['jobs']} jobs "
            f"| {len(runs)} | {sum(1 for e, _ in pairs if e['goal']['met'])} "
            f"| {sum(1 for _, o in pairs if o['goal']['met'])} | {same} | {less} "
            f"| {len(runs) - same - less} | {gained} | {lost} |"
        )
    return "\n".join(lines)


#: round 18's tuning evidence: the tuning set's quiet-then-burst rows, the design before the
#: round's tuning commit, then at it (bench/autoscale/evaluate.py)
QUIET_STUDIES = ("autoscale-quiet-before", "autoscale-quiet")


#: round 21's tuning evidence: the tuning set's grouped rows of 8, 16 and 32 claims with the
#: 90 s refill, before the round's tuning commit, then at it (bench/autoscale/evaluate.py)
PANIC_STUDIES = ("autoscale-panic-before", "autoscale-panic")
#: round 22's: the tuning set's step and diurnal rows with the 90 s refill (the diurnal ones with
#: and without restarts), before the round's tuning commit, then at it
RISE_STUDIES = ("autoscale-rise-before", "autoscale-rise")
#: round 23's: the tuning set's quiet-then-burst and x5 step rows with the 90 s refill, before the
#: round's tuning commit, then at it
HOLD_STUDIES = ("autoscale-hold-before", "autoscale-hold")


def autoscale_rows(names: tuple[str, str], only: str) -> Callable[[Path], str]:
    """Per row and refill of a study pair: the warm share, the idle time over the hindsight
    static pool's and the verdict, before the round's tuning commit and at it."""

    def block(results: Path) -> str:
        return _rows(results, names, only)

    return block


def _rows(results: Path, names: tuple[str, str], only: str) -> str:
    studies = _every(results, names)
    if studies is None:
        return not_measured(
            names[-1],
            f"python bench/autoscale/evaluate.py --set tuning --only <each {only} row> "
            "--out build/rows",
        )
    before, after = ({(e["scenario"], e["latency"]): e for e in r["results"]} for r in studies)
    lines = [_ran(r) for r in studies]
    b, a = (f"`{r['commit'][:7]}`" for r in studies)
    lines += [
        "",
        f"| scenario | refill | warm {b} | idle ÷ static {b} | {b} | warm {a} "
        f"| idle ÷ static {a} | {a} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, e in after.items():
        o = before[key]
        cells = [
            f"{_pct(x['autoscaled']['warm_share'])} | {x['idle_ratio']:.2f} "
            f"| {_met(x['goal']['met'])}"
            for x in (o, e)
        ]
        lines.append(f"| {key[0]} | {key[1]} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "| commit | refill | rows | at the warm share needed | idle ÷ static (median / max) "
        "| met |",
        "|---|---|---|---|---|---|",
    ]
    for r in studies:
        runs = _judged(r)
        for refill in sorted({e["latency"] for e in runs}):
            mine = [e for e in runs if e["latency"] == refill]
            met, warm, median, top = _pooled(mine)
            lines.append(
                f"| `{r['commit'][:7]}` | {refill} | {len(mine)} | {warm} "
                f"| {median:.2f} / {top:.2f} | {met} |"
            )
    return "\n".join(lines)


#: round 19's tuning evidence: draws of the tuning set's minReplicas 0 processes, the design
#: before the round's tuning commit, then at it (bench/autoscale/realisations.py)
SPARSE_STUDIES = ("autoscale-sparse-before", "autoscale-sparse")
#: round 20's: the same processes' draws of their own length, then drawn 12 hours long (the
#: design before the round's tuning commit, then at it, for each)
SPARSE_STEP_STUDIES = (
    "autoscale-sparse-weighed-before",
    "autoscale-sparse-weighed",
    "autoscale-sparse-weighed-long-before",
    "autoscale-sparse-weighed-long",
)


def autoscale_sparse(names: tuple[str, ...]) -> Callable[[Path], str]:
    """Per study (one design) and refill, the draws of every sparse process pooled: how many
    meet the goal, reach the warm share needed and hold no more idle time than allowed."""

    def block(results: Path) -> str:
        studies = _every(results, names)
        if studies is None:
            return not_measured(
                names[-1],
                "python bench/autoscale/realisations.py --set tuning --only '*sparse-min-*' "
                "--judge-only --out build/rz",
            )
        lines = [_ran(r) for r in studies]
        lines += [
            "",
            "| commit | hours | refill | processes | draws | autoscaler meets the goal "
            "| reaches the warm share needed | idle within the allowance "
            "| autoscaler idle ÷ static (median / max) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in studies:
            runs = _judged(r)
            hours = "trace's" if r.get("hours") is None else f"{r['hours']:g}"
            for refill in sorted({e["latency"] for e in runs}):
                mine = [e for e in runs if e["latency"] == refill]
                met, warm, median, top = _pooled(mine)
                idle = sum(1 for e in mine if e["goal"]["idle_ok"])
                lines.append(
                    f"| `{r['commit'][:7]}` | {hours} | {refill} "
                    f"| {len({e['scenario'] for e in mine})} "
                    f"| {len(mine)} | {met} ({met / len(mine):.0%}) | {warm} | {idle} "
                    f"| {median:.2f} / {top:.2f} |"
                )
        return "\n".join(lines)

    return block


#: the quiet-then-burst families of the evaluation and the tuning set (bench/autoscale/family.py)
FAMILY_STUDIES = ("autoscale-family", "autoscale-family-tuning")


def autoscale_family(results: Path) -> str:
    """Per quiet-then-burst scenario: the members its pool must hold when the burst comes, and the
    least idle time that costs on the trace without the burst, against that trace's smallest
    static pool."""
    studies = _every(results, FAMILY_STUDIES)
    if studies is None:
        return not_measured(
            FAMILY_STUDIES[0], "python bench/autoscale/family.py --out build/family"
        )
    lines = [
        f"- `{r['command']}` (commit `{r['commit'][:7]}`, {r['machine']['cpus']} CPUs, "
        f"{r['elapsed_s']:.0f} s)"
        for r in studies
    ]
    lines += [
        "",
        "| set | scenario | refill | burst | members needed at it (cold allowed) | quiet span "
        "| least idle sandbox-s without the burst: mean refill / 1st percentile "
        "| smallest static pool without the burst | no autoscaler meets the family "
        "| the design without the burst |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in studies:
        for e in r["results"]:
            b, bound, none = (
                e["without_burst"],
                e["bound_idle_sandbox_seconds"],
                e["no_autoscaler_meets_family"],
            )
            t1, t2 = e["quiet_span_s"]
            design = b["design"]
            verdict = {(True, True): "yes", (True, False): "with the mean refill only"}.get(
                (none["mean"], none["p1"]), "not shown"
            )
            lines.append(
                f"| {r['set']} | {e['scenario']} | {e['latency']} | {e['burst']['size']} in "
                f"{e['burst']['spread_s']:g} s | {e['members_needed']} "
                f"({e['with_burst']['cold_allowed']}) | {(t2 - t1) / 3600:.2f} h "
                f"| {_num(bound['mean'])} / {_num(bound['p1'])} "
                f"| {_num(b['static_idle_sandbox_seconds'])} (static {b['static_size']}) "
                f"| {verdict} | {_pct(design['warm_share'])}, "
                f"{_met(b['design_goal']['met'])} |"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the blocks
@dataclass(frozen=True)
class Block:
    doc: str
    render: Callable[[Path], str]
    source: tuple[str, ...]  # the JSON files (stems) it reads; () when none


BLOCKS: dict[str, Block] = {
    "bench-goals": Block("benchmarks.md", bench_goals, BENCH_ORDER),
    "p1-ceiling-writes": Block("benchmarks.md", p1_ceiling_writes, ()),
    "p1-cpu": Block("benchmarks.md", p1_cpu, ("P1",)),
    **{key.lower(): Block("benchmarks.md", bench_scenario(key), (key,)) for key in BENCH_ORDER},
    "soak": Block("reliability.md", soak_block, ("soak",)),
    "autoscaling-goals": Block(
        "autoscaling.md",
        autoscaling_goals,
        (*(f"sim-{t}" for t in SIM_TRACES), "autoscale_real"),
    ),
    "sim-local-latency": Block("autoscaling.md", sim_local_latency, ()),
    "sim-goals": Block("autoscaling.md", sim_goals, tuple(f"sim-{t}" for t in SIM_TRACES)),
    **{
        f"sim-{name}": Block("autoscaling.md", sim_table(name), (f"sim-{name}",))
        for name in SIM_TRACES
    },
    **{
        f"sim-{name}": Block("autoscaling.md", sim_table(name, goal=False), (f"sim-{name}",))
        for name in ("steady",)
    },
    "autoscale-real": Block("autoscaling.md", autoscale_real_block, ("autoscale_real",)),
    "autoscale-evaluation": Block(
        "autoscaling.md", autoscale_set("evaluation"), ("autoscale-evaluation",)
    ),
    "autoscale-tuning": Block("autoscaling.md", autoscale_set("tuning"), ("autoscale-tuning",)),
    "autoscale-realisations": Block(
        "autoscaling.md", autoscale_realisations, ("autoscale-realisations",)
    ),
    "autoscale-lengths": Block("autoscaling.md", autoscale_lengths(LENGTH_STUDIES), LENGTH_STUDIES),
    "autoscale-lengths-floorless": Block(
        "autoscaling.md", autoscale_lengths(LENGTH_STUDY_FLOORLESS), LENGTH_STUDY_FLOORLESS
    ),
    "autoscale-family": Block("autoscaling.md", autoscale_family, FAMILY_STUDIES),
    "autoscale-irregular": Block("autoscaling.md", autoscale_irregular, IRREGULAR_STUDIES),
    "autoscale-tuning-check": Block(
        "autoscaling.md", autoscale_tuning_check, ("autoscale-tuning", *TUNING_CHECKS)
    ),
    "autoscale-quiet": Block(
        "autoscaling.md", autoscale_rows(QUIET_STUDIES, "quiet-then-burst"), QUIET_STUDIES
    ),
    "autoscale-panic": Block(
        "autoscaling.md", autoscale_rows(PANIC_STUDIES, "grouped"), PANIC_STUDIES
    ),
    "autoscale-rise": Block(
        "autoscaling.md", autoscale_rows(RISE_STUDIES, "step and diurnal"), RISE_STUDIES
    ),
    "autoscale-hold": Block(
        "autoscaling.md",
        autoscale_rows(HOLD_STUDIES, "quiet-then-burst and fivefold step"),
        HOLD_STUDIES,
    ),
    "autoscale-sparse": Block("autoscaling.md", autoscale_sparse(SPARSE_STUDIES), SPARSE_STUDIES),
    "autoscale-sparse-steps": Block(
        "autoscaling.md", autoscale_sparse(SPARSE_STEP_STUDIES), SPARSE_STEP_STUDIES
    ),
}


def render(name: str, results: Path = RESULTS) -> str:
    return BLOCKS[name].render(results).rstrip("\n")


def regenerate(text: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """``text`` with every generated block rendered again; and the names of the blocks seen."""
    out: list[str] = []
    seen: list[str] = []
    pos = 0
    for m in START.finditer(text):
        if m.start() < pos:
            raise ValueError(f"block {m.group(1)!r} starts inside another block")
        name = m.group(1)
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r}")
        end = text.find(END, m.end())
        if end < 0:
            raise ValueError(f"block {name!r} has no {END}")
        out.append(text[pos : m.end()])
        out.append(render(name, results) + "\n")
        pos = end
        seen.append(name)
    out.append(text[pos:])
    return "".join(out), seen


def check(results: Path = RESULTS, write: bool = False) -> list[str]:
    """The docs whose generated blocks differ from the data (rewritten when ``write``); also
    every block must appear exactly once, in the doc it belongs to."""
    problems: list[str] = []
    found: dict[str, list[str]] = {}
    for doc in sorted({b.doc for b in BLOCKS.values()}):
        path = DOCS / doc
        text = path.read_text()
        new, seen = regenerate(text, results)
        for name in seen:
            found.setdefault(name, []).append(doc)
        if new != text:
            if write:
                path.write_text(new)
            else:
                problems.append(f"docs/{doc}: generated blocks differ from bench/results")
    for name, block in BLOCKS.items():
        if found.get(name) != [block.doc]:
            problems.append(
                f"block {name!r} must appear once in docs/{block.doc}: {found.get(name)}"
            )
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the blocks in the docs")
    mode.add_argument("--check", action="store_true", help="exit 1 when a doc has drifted")
    mode.add_argument("--show", choices=sorted(BLOCKS), help="print one block")
    args = p.parse_args()
    if args.show:
        print(render(args.show, args.results))
        return 0
    problems = check(args.results, write=args.write)
    for line in problems:
        print(line, file=sys.stderr)
    if args.write:
        print("docs rewritten from", args.results)
    return 1 if problems and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
