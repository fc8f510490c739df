"""The section "Upstream's e2e suite" of docs/compatibility.md, rendered from the committed run
(hack/conformance/results.json): one row for every top-level test and benchmark that upstream
v1.0.1's two e2e test binaries list (their ``-test.list`` output, kept in the JSON), with the
run's result, or, for a test that is not on the required list, the reason it cannot run here.

``hack/gen_compat.py`` includes the section; rendering fails when a listed test has neither a
result nor a reason below (a new upstream test must be run or explained), so the doc cannot
silently drop one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
NAME = "upstream-e2e"
START = f"<!-- generated: {NAME} -->"
END = "<!-- end -->"
UPSTREAM_TREE = "https://github.com/kubernetes-sigs/agent-sandbox/tree/v1.0.1/test/e2e"

# The only reasons a listed test may give for not running here.
RUNTIME = "container runtime"
IMAGES = "images"
PORT_FORWARD = "port-forward"
PV = "PV provisioner"
UPSTREAM_FAILS = "upstream's own controller fails it on kwok"
RACES_US = "flaky against ours"
REASONS = (RUNTIME, IMAGES, PORT_FORWARD, PV, UPSTREAM_FAILS, RACES_US)

#: test or benchmark -> (its reasons, what it needs, in our words)
NOT_HERE: dict[str, tuple[tuple[str, ...], str]] = {
    "TestRunChromeSandbox": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "starts a real Chrome image and times its DevTools endpoint through kubectl port-forward",
    ),
    "BenchmarkChromeSandboxStartup": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "benchmark of TestRunChromeSandbox's Chrome start-up",
    ),
    "BenchmarkChromeSandboxClaimStartup": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "benchmark of Chrome start-up through a warm pool claim",
    ),
    "TestSandboxVolumeClaimTemplates": (
        (PV,),
        "the sandbox's PVC must bind before its pod can be scheduled; no storage provisioner "
        "runs on the local control plane",
    ),
    "TestSandboxVolumeClaimTemplatesImmutable": (
        (RACES_US,),
        "the CRD rule it checks holds (tests/integration/test_crds.py), but it reads a new "
        "Sandbox and updates it at once, so any controller write in between (a status write) "
        "turns the update into a 409 instead of the rule's message. Our `pod-name` annotation "
        "patch ~15 ms after the create did that in 3 of 6 runs; that write is gone (upstream "
        "v1.0.1 does not make it either) and the test then passed 3 of 3, too few runs to "
        "require it",
    ),
    "BenchmarkWarmPoolParallelClaim": (
        (),
        "a benchmark (`-test.bench`) of the body of TestWarmPoolParallelClaim, which is required",
    ),
    "TestChromeSandboxDensity": (
        (IMAGES, RUNTIME),
        "density of real Chrome pods on one node (skips itself unless `-run-perf-load-test`)",
    ),
    "TestPythonSandboxDensity": (
        (IMAGES, RUNTIME),
        "density of real Python runtime pods, running code in them with exec (skips itself "
        "unless `-run-perf-load-test`)",
    ),
    "TestRunPythonRuntimeSandbox": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "runs upstream's Python runtime image and calls its HTTP API through port-forward",
    ),
    "TestRunPythonRuntimeSandboxClaim": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "the same through a claim",
    ),
    "TestRunPythonRuntimeSandboxWarmpool": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "the same through a warm pool",
    ),
    "TestRunSandboxdSandbox": (
        (IMAGES, RUNTIME, PORT_FORWARD),
        "runs upstream's sandboxd image and calls its gRPC API through port-forward",
    ),
    "TestRuntimeClassLifecycle": (
        (RUNTIME,),
        "measures a sandboxing runtime (gVisor, Kata) named by SANDBOX_RUNTIME_CLASS; skips "
        "itself without one",
    ),
    "TestRuntimeClassStartupComparison": (
        (RUNTIME,),
        "that runtime's start-up against runc; skips itself without SANDBOX_RUNTIME_CLASS",
    ),
    "TestRuntimeClassBurstRecovery": (
        (RUNTIME,),
        "bursts of claims on a sandboxing runtime named by SANDBOX_RUNTIME_CLASS; skips itself "
        "without one",
    ),
    "BenchmarkRuntimeClassColdStart": (
        (RUNTIME,),
        "cold starts on the SANDBOX_RUNTIME_CLASS runtime",
    ),
    "BenchmarkRuntimeClassWarmClaim": (
        (RUNTIME,),
        "warm claims on the SANDBOX_RUNTIME_CLASS runtime",
    ),
    "TestCreateSandboxClaimVolumeClaimTemplates": (
        (PV,),
        "most of its cases need the claim's PVCs bound (warm pools fill only once their pods "
        "schedule)",
    ),
    "TestWarmPoolSandboxWatcher": (
        (UPSTREAM_FAILS,),
        "waits for the adopted Sandbox to report not-Ready after its pod is deleted; on kwok the "
        "pod is gone and its replacement Ready before the test looks",
    ),
}

#: not Go tests, so no binary lists them: named below the table
CLIENT_SUITES = (
    (
        "test/e2e/clients/python",
        "pytest",
        "upstream's Python SDK through its sandbox router",
    ),
    (
        "test/e2e/clients/typescript",
        "vitest",
        "upstream's TypeScript SDK through the same router",
    ),
)


class ReportError(ValueError):
    """The results cannot be rendered (a listed test with neither result nor reason)."""


def load(path: Path = RESULTS) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ReportError(f"{path} holds no object")
    return data


def _cell(result: str) -> str:
    return result if result == "pass" else f"**{result}**"


def rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(test, package, result or "not run: <reasons>", note) for every listed name, in the
    binaries' order, then required tests that no binary lists."""
    ran: dict[str, Any] = results.get("tests", {})
    required = set(results.get("required", []))
    out: list[tuple[str, str, str, str]] = []
    seen: set[str] = set()
    packages = {"e2e": "test/e2e", "extensions": "test/e2e/extensions"}
    for package, names in results.get("listed", {}).items():
        for name in names:
            seen.add(name)
            where = packages.get(package, package)
            if name in ran:
                r = ran[name]
                note = f"{r['seconds']:.0f} s" + ("; required" if name in required else "")
                out.append((name, where, _cell(r["result"]), note))
            elif name in NOT_HERE:
                reasons, why = NOT_HERE[name]
                bad = [r for r in reasons if r not in REASONS]
                if bad:
                    raise ReportError(f"{name}: unknown reason {bad}")
                label = "not run: " + ", ".join(reasons) if reasons else "not run: benchmark"
                out.append((name, where, label, why))
            else:
                raise ReportError(
                    f"{name} ({where}) has no result in the run and no reason in "
                    "hack/conformance/report.py NOT_HERE: run it or say why it cannot run here"
                )
    for name in sorted(required - seen):
        out.append((name, "—", "**missing**", "required, but no binary lists it"))
    return out


def block(results: dict[str, Any] | None) -> str:
    """What sits between the markers."""
    if results is None:
        return (
            "Not measured since the data became committed: run `python hack/conformance/run.py "
            "--out hack/conformance/results.json`, then `python hack/gen_compat.py`.\n"
        )
    up = results.get("upstream", {})
    required = results.get("required", [])
    ran = results.get("tests", {})
    passed = sum(1 for n in required if ran.get(n, {}).get("result") == "pass")
    lines = [
        f"Upstream {up.get('version')} (`{up.get('module')}`, built with {up.get('go')}), "
        f"our controller at commit `{results.get('controller_commit')}`, run "
        f"{results.get('run_at')} on {results.get('nodes')} kwok nodes: "
        f"**{passed} of {len(required)} required tests pass**; the whole run took "
        f"{results.get('total_seconds', 0):.0f} s.",
        "",
        "| test | package | here | note |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{t}` | {p} | {r} | {n} |" for t, p, r, n in rows(results)]
    lines += [""]
    for path, runner, what in CLIENT_SUITES:
        lines.append(
            f"`{path}` ({runner}, not a Go test: neither binary lists it) drives {what}: "
            f"not run: {IMAGES}, {RUNTIME}, {PORT_FORWARD}."
        )
        lines.append("")
    return "\n".join(lines)


def section(results: dict[str, Any] | None) -> str:
    """The whole ``## `` section, markers included."""
    intro = [
        "## Upstream's e2e suite",
        "",
        f"`make conformance` builds upstream v1.0.1's own e2e test binaries ([test/e2e]"
        f"({UPSTREAM_TREE}) and test/e2e/extensions, `go test -c` from the pinned module in "
        "`hack/conformance/go.mod`) and runs every test of `hack/conformance/required.txt` "
        "against our controller, each in its own process, on a private local control plane "
        "(kwok nodes; our CRDs, RBAC and controller Deployment from `deploy/`; the controller "
        "itself out of cluster with the deploy/ ServiceAccount's token: "
        "`hack/conformance/environment.py`). A required test that is missing, skipped or "
        "failing fails the target. The table is generated from the committed run, "
        "`hack/conformance/results.json`; every test and benchmark the two binaries list has a "
        "row.",
        "",
        START,
    ]
    return "\n".join(intro) + "\n" + block(results).rstrip("\n") + "\n" + END + "\n"
