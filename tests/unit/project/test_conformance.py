"""hack/conformance/ without a cluster: how a test's outcome is read from the Go binary's verbose
output, the table of docs/compatibility.md ("Upstream's e2e suite") against the committed run,
the required list against that run, the Deployment args made local, and the status the controller
stand-in writes for the placeholder Deployment."""

from __future__ import annotations

import copy
import io
import sys
import urllib.error
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))

from conformance import environment, gotest, report

ROOT = Path(__file__).resolve().parents[3]
REQUIRED = ROOT / "hack" / "conformance" / "required.txt"


def read_list(path: Path) -> list[str]:
    names = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [n for n in names if n]


# ------------------------------------------------------------------------------ verdicts
PASS = "=== RUN   TestA\n    a_test.go:1: ok\n--- PASS: TestA (1.20s)\nPASS\n"


@pytest.mark.parametrize(
    ("output", "code", "result"),
    [
        (PASS, 0, "pass"),
        (PASS, 1, "fail"),  # e.g. a cleanup that failed after the verdict line
        ("=== RUN   TestA\n--- FAIL: TestA (3.00s)\nFAIL\n", 1, "fail"),
        ("=== RUN   TestA\n    x.go:9: no flag\n--- SKIP: TestA (0.00s)\nPASS\n", 0, "skip"),
        ("=== RUN   TestA/sub\n    --- SKIP: TestA/sub (0.00s)\n--- PASS: TestA (1s)\n", 0, "skip"),
        ("=== RUN   TestA\npanic: test timed out after 10m0s\n", 2, "fail"),
        ("testing: warning: no tests to run\nPASS\n", 0, "fail"),
        ("--- PASS: TestAB (1.00s)\n", 0, "fail"),  # another test's verdict
    ],
)
def test_the_verdict_is_read_from_the_binarys_own_lines(
    output: str, code: int, result: str
) -> None:
    assert gotest.verdict("TestA", output, code)[0] == result


# ------------------------------------------------------------------------------ the table
def results(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "upstream": {"module": "sigs.k8s.io/agent-sandbox", "version": "v1.0.1", "go": "go1.26"},
        "controller_commit": "abc",
        "run_at": "2026-01-01T00:00:00Z",
        "nodes": 3,
        "total_seconds": 100.0,
        "listed": {"e2e": ["TestA", "TestRunChromeSandbox"], "extensions": ["TestB"]},
        "required": ["TestA", "TestB"],
        "tests": {
            "TestA": {"package": "e2e", "result": "pass", "seconds": 3.0},
            "TestB": {"package": "extensions", "result": "fail", "seconds": 9.0},
        },
    }
    base.update(over)
    return base


def test_every_listed_test_has_a_row_with_its_result_or_reason() -> None:
    rows = {r[0]: r for r in report.rows(results())}
    assert rows["TestA"][2] == "pass"
    assert rows["TestB"][2] == "**fail**"
    assert rows["TestRunChromeSandbox"][2].startswith("not run: images")
    text = report.section(results())
    assert "**1 of 2 required tests pass**" in text
    assert text.count(report.START) == 1 and text.rstrip().endswith(report.END)


def test_a_listed_test_with_neither_result_nor_reason_fails_the_render() -> None:
    data = results(listed={"e2e": ["TestA", "TestNewUpstream"], "extensions": ["TestB"]})
    with pytest.raises(report.ReportError, match="TestNewUpstream"):
        report.rows(data)


def test_a_required_test_no_binary_lists_is_a_missing_row() -> None:
    data = results(required=["TestA", "TestB", "TestGone"])
    rows = {r[0]: r for r in report.rows(data)}
    assert rows["TestGone"][2] == "**missing**"
    assert "**2 of 3 required tests pass**" not in report.section(data)


def test_reasons_are_the_named_ones_and_no_required_test_has_one() -> None:
    for name, (reasons, why) in report.NOT_HERE.items():
        assert set(reasons) <= set(report.REASONS), name
        assert why, name
    assert not set(read_list(REQUIRED)) & set(report.NOT_HERE)


def test_the_committed_run_ran_the_committed_list_and_every_reason_names_a_listed_test() -> None:
    committed = report.load()
    if committed is None:
        pytest.fail(
            "hack/conformance/results.json is missing: run make conformance with "
            "CONFORMANCE_OUT=hack/conformance/results.json"
        )
    required = read_list(REQUIRED)
    assert committed["required"] == required
    assert set(committed["tests"]) >= set(required)
    listed = {n for names in committed["listed"].values() for n in names}
    assert set(report.NOT_HERE) <= listed, set(report.NOT_HERE) - listed
    assert "TestWarmPoolSandboxWatcher" in listed
    report.rows(committed)  # every listed test has a row


def test_the_required_list_has_no_duplicates() -> None:
    names = read_list(REQUIRED)
    assert len(names) == len(set(names))
    assert all(n.startswith("Test") for n in names)


# ------------------------------------------------------------------------------ environment
def test_the_deployment_args_are_made_local() -> None:
    args = ["--leader-elect=true", "--extensions", "--metrics-bind-address=:8080"]
    args += ["--health-probe-bind-address=:8081", "--sandbox-concurrent-workers=10"]
    out = environment.local_args(args, 1111, 2222)
    assert out == [
        "--leader-elect=true",
        "--extensions",
        "--metrics-bind-address=127.0.0.1:1111",
        "--health-probe-bind-address=127.0.0.1:2222",
        "--sandbox-concurrent-workers=10",
        "--leader-election-namespace=agent-sandbox-system",
    ]
    bare = environment.local_args(["--extensions"], 1, 2)
    assert "--health-probe-bind-address=127.0.0.1:2" in bare
    assert "--metrics-bind-address=127.0.0.1:1" in bare


class FakeCluster:
    def __init__(self, conflict: bool = False) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.conflict = conflict

    def api(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, copy.deepcopy(body)))
        if self.conflict:
            raise urllib.error.HTTPError(path, 409, "Conflict", Message(), io.BytesIO())
        return body


class FakeProcess:
    def poll(self) -> int | None:
        return None


def standin(cluster: FakeCluster, *, running: bool, ready: bool) -> environment.ControllerStandIn:
    s = environment.ControllerStandIn.__new__(environment.ControllerStandIn)
    s.cluster = cluster  # type: ignore[assignment]
    s.proc = FakeProcess() if running else None  # type: ignore[assignment]
    s.ready = ready
    return s


def deployment(generation: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "agent-sandbox-controller",
            "generation": generation,
            "resourceVersion": "42",
        },
        "spec": {"replicas": 1},
        "status": status or {},
    }


def test_the_status_says_ready_only_for_a_ready_process_and_carries_the_resource_version() -> None:
    cluster = FakeCluster()
    standin(cluster, running=True, ready=False)._write_status(deployment(3), 3)
    standin(cluster, running=True, ready=True)._write_status(deployment(3), 3)
    standin(cluster, running=False, ready=False)._write_status(deployment(4), 4)
    (m1, p1, b1), (_, _, b2), (_, _, b3) = cluster.calls
    assert (m1, p1) == ("PUT", environment.DEPLOYMENT + "/status")
    assert b1["metadata"]["resourceVersion"] == "42"
    assert b1["status"] == {
        "observedGeneration": 3,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 0,
        "availableReplicas": 0,
    }
    assert b2["status"]["readyReplicas"] == 1 and b2["status"]["availableReplicas"] == 1
    assert b3["status"]["replicas"] == 0 and b3["status"]["observedGeneration"] == 4


def test_a_status_already_right_is_not_written_again_and_a_conflict_waits_for_the_next_pass() -> (
    None
):
    cluster = FakeCluster()
    done = {
        "observedGeneration": 3,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
    }
    standin(cluster, running=True, ready=True)._write_status(deployment(3, done), 3)
    assert cluster.calls == []
    conflicted = FakeCluster(conflict=True)
    standin(conflicted, running=True, ready=True)._write_status(deployment(4, done), 4)
    assert len(conflicted.calls) == 1  # 409 swallowed: the loop reads the Deployment again
