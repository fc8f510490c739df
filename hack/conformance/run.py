#!/usr/bin/env python3
"""Run upstream agent-sandbox's own e2e tests (release v1.0.1, the binaries build.sh builds)
against our controller: ``make conformance``.

One private local control plane (3 kwok nodes, our CRDs from deploy/crds) for the whole run;
deploy/'s namespace, RBAC and controller Deployment applied; our controller run out of cluster by
the stand-in of environment.py with nothing but the deploy/ ServiceAccount's token. Then each test
of the required list (required.txt) in its own process, ``-test.run '^Name$' -test.v``, with
KUBECONFIG pointing at the private control plane (admin, as the tests create namespaces and
templates) and ARTIFACTS a fresh directory (<work>/artifacts, emptied at the start of each run).
The run fails when a test on the list is missing from its binary, skipped or failing, when the
controller crashed, or when the binaries' test lists differ from the committed results' (re-run
and commit them, see below).

    python hack/conformance/run.py                       # the required list; JSON to build/
    python hack/conformance/run.py --out hack/conformance/results.json   # the committed results
    python hack/conformance/run.py --only TestSimpleSandbox              # a subset (debugging)

The JSON: every test run (result pass/fail/skip/missing, seconds), each binary's ``-test.list``
output, the upstream release and Go version the binaries were built with, the controller's
process count and crashes. ``python hack/gen_compat.py`` turns the committed one into the table
in docs/compatibility.md, "Upstream's e2e suite".
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hack/: the conformance package

from agentsandbox.devcluster.cluster import DevCluster
from conformance import environment, gotest
from conformance.gotest import PACKAGES, Binaries, Outcome

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQUIRED = HERE / "required.txt"
COMMITTED = HERE / "results.json"
WORK = ROOT / "build" / "conformance"
NODES = 3  # as upstream's kwok runs
TEST_TIMEOUT = 600.0  # seconds per test (go test's own default is 10 minutes)


def read_list(path: Path) -> list[str]:
    """Test names, one a line; '#' starts a comment."""
    names = []
    for line in path.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


def listed(binaries: Binaries) -> dict[str, list[str]]:
    return {package: binaries.listed(package) for package in PACKAGES}


def stale_lists(binaries: Binaries, committed: Path) -> list[str]:
    """How the binaries' test lists differ from the committed results' (the doc's rows)."""
    if not committed.is_file():
        return [f"{committed} is missing"]
    old = json.loads(committed.read_text()).get("listed", {})
    problems = []
    for package, names in listed(binaries).items():
        before = old.get(package, [])
        added = sorted(set(names) - set(before))
        gone = sorted(set(before) - set(names))
        if added or gone:
            problems.append(f"{package}: new {added or '-'}, gone {gone or '-'}")
    return problems


def git_commit() -> str:
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or "unknown"


def run(tests: list[str], work: Path, binaries: Binaries, timeout: float) -> dict[str, Any]:
    """Start the environment, run ``tests`` one by one, stop everything; the results."""
    started = time.monotonic()
    for previous in ("cluster", "logs", "artifacts"):  # the last run's, kept until now
        shutil.rmtree(work / previous, ignore_errors=True)
    for log in work.glob("controller-*.log"):
        log.unlink()
    # the framework's per-test directories (ARTIFACTS): fresh for each run, kept with the logs
    artifacts = work / "artifacts"
    artifacts.mkdir(parents=True)
    cluster = DevCluster(
        work / "cluster",
        nodes=NODES,
        crd_paths=[environment.DEPLOY / "crds"],
        controllers=environment.CONTROLLERS,
    )
    outcomes: list[Outcome] = []
    setup_seconds = 0.0
    standin: environment.ControllerStandIn | None = None
    print(f"[conformance] starting a local control plane ({NODES} kwok nodes) in {work}")
    cluster.start()
    try:
        environment.install(cluster)
        standin = environment.ControllerStandIn(cluster, work)
        standin.start()
        assert cluster.bin_dir is not None
        env = gotest.go_test_env(cluster.kubeconfig, artifacts, [cluster.bin_dir])
        setup_seconds = round(time.monotonic() - started, 1)
        print(f"[conformance] ready in {setup_seconds}s; controller log: {standin.log}")
        for i, test in enumerate(tests, 1):
            if not standin.caught_up():
                # the previous test's clean-up (a restored Deployment) may still be rolling out
                deadline = time.monotonic() + 120
                while not standin.caught_up() and time.monotonic() < deadline:
                    time.sleep(0.5)
            outcome = gotest.run_one(
                binaries, test, env=env, log_dir=work / "logs", timeout=timeout
            )
            outcomes.append(outcome)
            print(
                f"[conformance] {i}/{len(tests)} {outcome.result.upper():7} {test} "
                f"({outcome.seconds}s)",
                flush=True,
            )
            if outcome.result != "pass":
                print(f"    {outcome.detail}; log: {outcome.log}")
                print("    " + outcome.tail(40).replace("\n", "\n    "), flush=True)
    finally:
        if standin is not None:
            standin.stop()
        cluster.stop(keep_logs=True)
    versions = binaries.versions()
    return {
        "upstream": {
            "module": versions.get("module"),
            "version": versions.get("version"),
            "go": versions.get("go"),
            "key": versions.get("key"),
        },
        "controller_commit": git_commit(),
        "run_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nodes": NODES,
        "setup_seconds": setup_seconds,
        "total_seconds": round(time.monotonic() - started, 1),
        "listed": listed(binaries),
        "required": read_list(REQUIRED),
        "tests": {
            o.test: {"package": o.package, "result": o.result, "seconds": o.seconds}
            for o in outcomes
        },
        "controller": {
            "processes": standin.starts if standin else 0,
            "crashes": standin.crashes if standin else [],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=WORK / "results.json", help="the JSON")
    parser.add_argument("--work", type=Path, default=WORK, help="cluster, logs (kept)")
    parser.add_argument("--only", action="append", default=[], help="run just this test")
    parser.add_argument("--timeout", type=float, default=TEST_TIMEOUT, help="seconds per test")
    args = parser.parse_args(argv)

    binaries = gotest.build()
    tests = args.only or read_list(REQUIRED)
    results = run(tests, args.work.resolve(), binaries, args.timeout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")

    problems = [
        f"{name}: {r['result']}" for name, r in results["tests"].items() if r["result"] != "pass"
    ]
    problems += [f"controller: {c}" for c in results["controller"]["crashes"]]
    stale = stale_lists(binaries, COMMITTED)
    problems += [f"test list changed since {COMMITTED.name}: {s}" for s in stale]
    passed = sum(r["result"] == "pass" for r in results["tests"].values())
    print(
        f"[conformance] {passed}/{len(tests)} passed in {results['total_seconds']}s "
        f"(upstream {results['upstream']['version']}); results: {args.out}"
    )
    for problem in problems:
        print(f"[conformance] FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
