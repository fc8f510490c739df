"""The local control plane is real: scheduling, kwok pod lifecycles, garbage collection, CRDs."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.devcluster.cluster import LIFECYCLE_LABEL, DevCluster, free_port
from agentsandbox.devcluster.process import ClusterStartError
from tests.polling import eventually_sync, stays_sync

TESTDATA = Path(__file__).parent / "testdata"


def pod_body(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }


def condition(obj: dict[str, Any], ctype: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == ctype:
            return str(c["status"])
    return None


def test_fake_nodes_are_ready_with_a_20_bit_pod_cidr_each(cluster: DevCluster) -> None:
    nodes = cluster.api("GET", "/api/v1/nodes")["items"]
    assert len(nodes) == 10
    assert all(condition(n, "Ready") == "True" for n in nodes)
    capacity = sum(ipaddress.ip_network(n["spec"]["podCIDR"]).num_addresses - 2 for n in nodes)
    assert capacity >= 20_000


def test_pod_is_scheduled_to_a_kwok_node_and_becomes_ready_with_an_ip(
    cluster: DevCluster, namespace: str
) -> None:
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", pod_body("web"))
    path = f"/api/v1/namespaces/{namespace}/pods/web"

    def ready_pod() -> dict[str, Any] | None:
        p: dict[str, Any] = cluster.api("GET", path)
        return p if condition(p, "Ready") == "True" else None

    pod = eventually_sync(ready_pod, within=30.0, what="pod Ready")
    assert pod["spec"]["nodeName"].startswith("kwok-node-")
    assert pod["status"]["phase"] == "Running"
    node = cluster.api("GET", f"/api/v1/nodes/{pod['spec']['nodeName']}")
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(
        node["spec"]["podCIDR"]
    )


def test_deleted_pod_is_finished_by_kwok(cluster: DevCluster, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/pods"
    cluster.api("POST", base, pod_body("gone"))
    eventually_sync(
        lambda: condition(cluster.api("GET", f"{base}/gone"), "Ready") == "True",
        within=30.0,
        what="pod gone Ready",
    )
    cluster.api("DELETE", f"{base}/gone")

    def vanished() -> bool:
        try:
            cluster.api("GET", f"{base}/gone")
        except urllib.error.HTTPError as err:
            return err.code == 404
        return False

    eventually_sync(vanished, within=30.0, what="pod deletion to finish")


@pytest.mark.parametrize(
    ("lifecycle", "phase", "ready"),
    [
        ("never-ready", "Running", "False"),
        ("succeed", "Succeeded", "False"),
        ("fail", "Failed", "False"),
    ],
)
def test_pod_lifecycle_label_selects_a_kwok_stage(
    cluster: DevCluster, namespace: str, lifecycle: str, phase: str, ready: str
) -> None:
    base = f"/api/v1/namespaces/{namespace}/pods"
    cluster.api("POST", base, pod_body("p", {LIFECYCLE_LABEL: lifecycle}))

    def in_phase() -> dict[str, Any] | None:
        p: dict[str, Any] = cluster.api("GET", f"{base}/p")
        return p if p.get("status", {}).get("phase") == phase else None

    pod = eventually_sync(in_phase, within=30.0, what=f"phase {phase}")
    assert condition(pod, "Ready") == ready
    if lifecycle == "never-ready":
        assert pod["status"]["podIP"]
        stays_sync(  # still not Ready a while later
            lambda: condition(cluster.api("GET", f"{base}/p"), "Ready"),
            accept=lambda ready: ready == "False",
            for_=1.5,
            what="the never-ready pod not Ready",
        )


def test_garbage_collector_deletes_dependents_of_a_custom_resource_owner(
    cluster: DevCluster, namespace: str
) -> None:
    widgets = f"/apis/test.agentsandbox.dev/v1/namespaces/{namespace}/widgets"
    owner = cluster.api(
        "POST",
        widgets,
        {
            "apiVersion": "test.agentsandbox.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "owner"},
            "spec": {"replicas": 1},
        },
    )
    ref = {
        "apiVersion": "test.agentsandbox.dev/v1",
        "kind": "Widget",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    cms = f"/api/v1/namespaces/{namespace}/configmaps"
    cluster.api("POST", cms, {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    cluster.api("DELETE", f"{widgets}/owner")

    def dependent_gone() -> bool:
        try:
            cluster.api("GET", f"{cms}/dep")
        except urllib.error.HTTPError as err:
            return err.code == 404
        return False

    eventually_sync(dependent_gone, within=60, what="garbage collector to delete the dependent")


def test_crd_applied_from_yaml_is_served_and_validation_rejects_bad_objects(
    cluster: DevCluster, namespace: str
) -> None:
    cluster.kubectl("apply", "-f", str(TESTDATA / "gadgets-crd.yaml"))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/gadgets.test.agentsandbox.dev",
    )
    good = {
        "apiVersion": "test.agentsandbox.dev/v1",
        "kind": "Gadget",
        "metadata": {"name": "ok", "namespace": namespace},
        "spec": {"size": 3},
    }
    bad = {**good, "metadata": {"name": "bad", "namespace": namespace}, "spec": {"size": 99}}

    def apply(obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", "apply", "-f", "-"],
            input=json.dumps(obj),
            capture_output=True,
            text=True,
            check=False,
        )

    assert apply(good).returncode == 0
    served = cluster.kubectl("get", "gadgets", "-n", namespace, "-o", "json")
    assert [i["metadata"]["name"] for i in json.loads(served.stdout)["items"]] == ["ok"]
    result = apply(bad)
    assert result.returncode != 0
    assert "spec.size" in result.stderr
    assert "should be less than or equal to 10" in result.stderr


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        stat = Path(f"/proc/{pid}/stat").read_text().split()
        if stat[2] != "Z":
            alive.append(pid)
    return alive


def test_failed_start_names_the_process_and_its_log_and_leaves_nothing_running(
    cluster: DevCluster, tmp_path: Path
) -> None:
    taken = free_port()
    import socket

    with socket.socket() as blocker:
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        broken = DevCluster(
            tmp_path / "c", nodes=1, bin_dir=cluster.bin_dir, ports={"kube-apiserver": taken}
        )
        with pytest.raises(ClusterStartError) as info:
            broken.start(timeout=60)
    message = str(info.value)
    assert "kube-apiserver" in message
    assert str(tmp_path / "c" / "logs" / "kube-apiserver.log") in message
    started = [c.proc.pid for c in broken.components.values() if c.proc is not None]
    assert started, "etcd should have been started before the apiserver failed"
    assert _pids_alive(started) == []
    assert not broken.etcd_data.exists()


def test_missing_binary_is_named_before_anything_starts(
    cluster: DevCluster, tmp_path: Path
) -> None:
    assert cluster.bin_dir is not None
    partial = tmp_path / "bin"
    partial.mkdir()
    for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        (partial / b).symlink_to(cluster.bin_dir / b)
    broken = DevCluster(tmp_path / "c", nodes=1, bin_dir=partial)
    with pytest.raises(ClusterStartError, match="binary missing: kwok"):
        broken.start()
    assert broken.components == {}


def test_make_cluster_cli_starts_reuses_and_stops(cluster: DevCluster, tmp_path: Path) -> None:
    """`make cluster` / `make cluster-down` in miniature: the CLI with its own state dir."""
    assert cluster.bin_dir is not None
    env = {**os.environ, "AGENTSANDBOX_CONTROLPLANE_BIN": str(cluster.bin_dir)}
    state = tmp_path / "state"
    cli = [sys.executable, "-m", "agentsandbox.cli.devcluster", "--dir", str(state)]
    up = subprocess.run(
        [*cli, "up", "--nodes", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stderr
        nodes = subprocess.run(
            [
                str(state / "bin" / "kubectl"),
                f"--kubeconfig={state / 'kubeconfig'}",
                "get",
                "nodes",
                "--no-headers",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        assert len(nodes) == 2 and all(" Ready " in line for line in nodes)
        again = subprocess.run(
            [*cli, "up", "--nodes", "2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert again.returncode == 0 and "already running" in again.stdout
        pids = list(json.loads((state / "state.json").read_text())["pids"].values())
        assert len(_pids_alive(pids)) == 5
    finally:
        down = subprocess.run(
            [*cli, "down"], env=env, capture_output=True, text=True, timeout=60, check=False
        )
    assert down.returncode == 0, down.stderr
    assert _pids_alive(pids) == []
