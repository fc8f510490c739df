"""What every test run shares: the session's local control plane, and the skip guard.

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) is
started by the project itself, at most once per session, for whichever tests ask for it
(``cluster``, ``namespace``, ``kubeconfig``, ``client``): tests/integration and tests/faults
share it. If it cannot be started the tests FAIL; they never skip. Set
AGENTSANDBOX_CLUSTER_DIR=.cluster to reuse a cluster started by ``make cluster``.

No skip without a declared reason: every skip (and xfail) of the run is listed at the end, and a
skip whose reason is not in ``DECLARED_SKIPS`` fails the run.

Modules whose every test is heavy are marked ``slow`` here (``SLOW_MODULES``), with the pytest
timeout they need instead of pyproject.toml's (tests/unit/project/test_timeouts.py checks that no
test waits on a subprocess longer than pytest lets it run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.devcluster.binaries import BinariesError, repo_root
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.process import ClusterStartError
from agentsandbox.kube.client import Client

pytest_plugins = ("pytester",)  # tests/unit/project/test_skip_guard.py runs pytest inside pytest

# tests/release_artifacts checks a built release (`make release-check` sets RELEASE_DIST): not
# collected without one
collect_ignore = [] if os.environ.get("RELEASE_DIST") else ["release_artifacts"]

TESTS = Path(__file__).parent
CRDS = TESTS / "integration" / "testdata" / "crds"
AUDIT_POLICY = TESTS / "testdata" / "audit-deletes.yaml"

# ------------------------------------------------------------------------------------ marks
# module (from the repository root) -> the pytest timeout of each of its tests, in seconds: above
# the longest timeout a test there gives its own subprocess. Every test of these is over 30 s
# and says why in its docstring.
SLOW_MODULES: dict[str, float] = {
    # bench/run.py --smoke and the other benchmark scripts end to end, each with its own control
    # plane: 35 to 90 s each; the longest subprocess timeout there is 1200 s
    "tests/integration/test_bench_smoke.py": 1500.0,
}


def module_of(item: pytest.Item) -> str:
    return Path(item.fspath).resolve().relative_to(TESTS.parent).as_posix()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        timeout = SLOW_MODULES.get(module_of(item))
        if timeout is None:
            continue
        item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(timeout))


# ------------------------------------------------------------------------------------ skips
NOT_ROOT = "not root: the release image's root filesystem runs only as root (chroot, mount)"
DECLARED_SKIPS: dict[str, str] = {
    # reason, exactly as the skip gives it: where it is and why it may skip
    NOT_ROOT: (
        "tests/release_artifacts/test_image_rootfs.py: chroot and mount need root; CI (.ci/run) "
        "runs as root, so `make release-check` there runs the release's image"
    ),
    "no IPv6 loopback (::1) here": (
        "tests/unit/kube/test_manager.py: the '::1' case of the dual-stack listener test needs "
        "an IPv6 loopback, which some machines and containers do not have"
    ),
}


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str


def skip_of(report: pytest.TestReport | pytest.CollectReport) -> Skip | None:
    """The skip (or xfail) this report records, with its reason; None if it records none."""
    reason = getattr(report, "wasxfail", None)
    if reason is not None:
        return Skip(report.nodeid, f"xfail: {reason}" if reason else "xfail")
    if not report.skipped:
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        message = str(longrepr[2])
    else:
        message = str(longrepr)
    return Skip(report.nodeid, message.removeprefix("Skipped: "))


def undeclared(skips: Iterable[Skip], declared: Iterable[str]) -> list[Skip]:
    """The skips whose reason is not one of ``declared`` (exact match)."""
    allowed = set(declared)
    return [s for s in skips if s.reason not in allowed]


@dataclass(eq=False)  # a plugin is hashed by identity
class SkipGuard:
    """Collects the run's skips; fails the run (exit 1) on one whose reason is undeclared."""

    declared: dict[str, str]
    skips: list[Skip] = field(default_factory=list)

    def _record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        skip = skip_of(report)
        if skip is not None:
            self.skips.append(skip)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if undeclared(self.skips, self.declared) and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.skips:
            return
        bad = undeclared(self.skips, self.declared)
        terminalreporter.section("skips (each reason must be declared in tests/conftest.py)")
        for skip in self.skips:
            tag = "UNDECLARED" if skip in bad else "declared"
            terminalreporter.line(f"{tag}: {skip.nodeid}: {skip.reason}")
        if bad:
            terminalreporter.line(
                f"{len(bad)} skip(s) with an undeclared reason: the run FAILS "
                "(declare the reason in DECLARED_SKIPS, or do not skip)",
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipGuard(DECLARED_SKIPS), "agentsandbox-skip-guard")


# ------------------------------------------------------------------------------------ cluster
def _crd_paths() -> list[Path]:
    paths = [CRDS]
    root = repo_root()
    if root is not None and (root / "deploy" / "crds").is_dir():
        paths.append(root / "deploy" / "crds")
    return [p for p in paths if p.is_dir()]


@contextlib.contextmanager
def started_cluster(prefix: str, **options: Any) -> Iterator[DevCluster]:
    """A control plane of its own in a fresh directory (``DevCluster`` options), started, stopped
    by PID afterwards; its directory (logs) is kept only when the code inside failed. A start
    that fails FAILS the test (never a skip)."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    cl = DevCluster(workdir, crd_paths=_crd_paths(), **options)
    try:
        cl.start()
    except (ClusterStartError, BinariesError) as err:
        pytest.fail(f"could not start the local control plane: {err}", pytrace=False)
    failed = False
    try:
        yield cl
    except BaseException:
        failed = True
        raise
    finally:
        cl.stop(keep_logs=True)
        if not failed:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[DevCluster]:
    """The session's control plane (10 kwok nodes), one for every test directory, its audit log
    on for the deletes of claims and sandboxes."""
    reuse = os.environ.get("AGENTSANDBOX_CLUSTER_DIR")
    if reuse:
        attached = DevCluster.attach(Path(reuse))
        if attached is None or not attached.healthy():
            pytest.fail(f"AGENTSANDBOX_CLUSTER_DIR={reuse}: no healthy cluster there")
        yield attached
        return
    with started_cluster(
        "agentsandbox-test-cluster-",
        nodes=10,
        audit=True,
        # every delete of a claim or a sandbox, written as it is answered: the claim history
        # checker (tests/integration/invariants.py) reads who made each
        apiserver_args=("--audit-log-mode=blocking", f"--audit-policy-file={AUDIT_POLICY}"),
    ) as cl:
        yield cl


@pytest.fixture
def namespace(cluster: DevCluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (the namespace controller empties it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    cluster.api("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def kubeconfig(cluster: DevCluster) -> str:
    return str(cluster.kubeconfig)


@pytest.fixture
async def client(kubeconfig: str) -> AsyncIterator[Client]:
    """A client of the session's control plane, unthrottled (qps 0), default pool size (100)."""
    async with Client.from_kubeconfig(kubeconfig, qps=0) as c:
        yield c
