"""Pure parts of the local control plane: pod CIDRs, certificates, kwok stages."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agentsandbox.devcluster import certs
from agentsandbox.devcluster.cluster import (
    LIFECYCLE_LABEL,
    RELOCATABLE,
    DevCluster,
    node_pod_cidr,
)
from agentsandbox.devcluster.process import ClusterStartError, Component


def test_node_pod_cidrs_are_disjoint_20_bit_networks() -> None:
    nets = [ipaddress.ip_network(node_pod_cidr(i)) for i in range(64)]
    assert all(n.prefixlen == 20 for n in nets)
    for i, a in enumerate(nets):
        for b in nets[i + 1 :]:
            assert not a.overlaps(b)
    assert not any(n.overlaps(ipaddress.ip_network("10.0.0.0/24")) for n in nets)


def test_ten_nodes_hold_at_least_20000_pod_ips() -> None:
    total = sum(ipaddress.ip_network(node_pod_cidr(i)).num_addresses - 2 for i in range(10))
    assert total >= 20_000


def test_leaf_certificates_chain_to_the_ca_with_the_requested_identity() -> None:
    ca, ca_key = certs.make_ca()
    admin = certs.issue(ca, ca_key, "admin", org="system:masters")
    server = certs.issue(ca, ca_key, "apiserver", server=True, hosts=("127.0.0.1", "localhost"))
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    for pair in (admin, server):
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        assert cert.issuer == ca_cert.subject
        pub = ca_cert.public_key()
        assert isinstance(pub, ec.EllipticCurvePublicKey)
        cert.verify_directly_issued_by(ca_cert)
    admin_cert = x509.load_pem_x509_certificate(admin.cert_pem)
    orgs = admin_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    sans = x509.load_pem_x509_certificate(server.cert_pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert ipaddress.ip_address("127.0.0.1") in sans.value.get_values_for_type(x509.IPAddress)


def test_kwok_config_has_every_stage_the_tests_rely_on() -> None:
    text = resources.files("agentsandbox.devcluster").joinpath("kwok-stages.yaml").read_text()
    docs = list(yaml.safe_load_all(text))
    stages = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Stage"}
    assert set(stages) >= {
        "node-initialize",
        "pod-ready",
        "pod-running-never-ready",
        "pod-succeed",
        "pod-fail",
        "pod-delete",
    }
    assert docs[0]["kind"] == "KwokConfiguration"
    # ordinary pods must not match the never-ready stage, and vice versa
    ready_keys = [e["key"] for e in stages["pod-ready"]["spec"]["selector"]["matchExpressions"]]
    assert any(LIFECYCLE_LABEL in k for k in ready_keys)


def _pod_stages() -> dict[str, dict[str, Any]]:
    text = resources.files("agentsandbox.devcluster").joinpath("kwok-stages.yaml").read_text()
    return {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(text)
        if d["kind"] == "Stage" and d["spec"]["resourceRef"]["kind"] == "Pod"
    }


def _query(pod: dict[str, Any], key: str) -> list[Any]:
    """The values kwok's jq ``key`` yields for ``pod``, for the keys our pod stages use."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    spec = pod.get("spec") or {}
    first = (spec.get("containers") or [{}])[0]
    if key == ".spec.restartPolicy":
        found = spec.get("restartPolicy")
    elif key == ".spec.containers[0].command | tojson":
        found = json.dumps(first.get("command"), separators=(",", ":"))
    elif key == ".spec.containers[0].lifecycle.preStop.exec.command | tojson":
        command = (((first.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get(
            "command"
        )
        found = json.dumps(command, separators=(",", ":"))
    elif key == ".metadata.deletionTimestamp":
        found = meta.get("deletionTimestamp")
    elif key == ".status.phase":
        found = status.get("phase")
    elif key == f'.metadata.labels["{LIFECYCLE_LABEL}"]':
        found = (meta.get("labels") or {}).get(LIFECYCLE_LABEL)
    elif key == '.status.conditions.[] | select( .type == "Ready" ) | .status':
        return [c["status"] for c in status.get("conditions") or () if c["type"] == "Ready"]
    else:
        raise AssertionError(f"a pod stage selects on {key!r}, which this test does not know")
    return [] if found is None else [found]


def _matching(pod: dict[str, Any]) -> set[str]:
    """The pod stages whose selector matches ``pod`` (kwok's In/NotIn/Exists/DoesNotExist)."""
    out = set()
    for name, stage in _pod_stages().items():
        ok = True
        for expr in stage["spec"]["selector"]["matchExpressions"]:
            values, op = _query(pod, expr["key"]), expr["operator"]
            hit = any(str(v) in expr.get("values", ()) for v in values)
            ok &= {"In": hit, "NotIn": not hit, "Exists": bool(values)}.get(op, not values)
        if ok:
            out.add(name)
    return out


def _pod(phase: str, lifecycle: str | None = None, ready: str | None = None) -> dict[str, Any]:
    labels = {LIFECYCLE_LABEL: lifecycle} if lifecycle else {}
    conditions = [{"type": "Ready", "status": ready}] if ready else []
    return {"metadata": {"labels": labels}, "status": {"phase": phase, "conditions": conditions}}


def test_slow_ready_pods_run_not_ready_then_turn_ready_after_a_delay_others_unaffected() -> None:
    stages = _pod_stages()
    assert _matching(_pod("Pending", "slow-ready")) == {"pod-running-slow-ready"}
    assert _matching(_pod("Running", "slow-ready", "False")) == {"pod-slow-ready"}
    assert _matching(_pod("Running", "slow-ready", "True")) == set()
    assert stages["pod-slow-ready"]["spec"]["delay"]["durationMilliseconds"] >= 2000
    running = stages["pod-running-slow-ready"]["spec"]["next"]["statusTemplate"]
    assert 'type: Ready, status: "False"' in running and "phase: Running" in running
    assert (
        'type: Ready, status: "True"' in stages["pod-slow-ready"]["spec"]["next"]["statusTemplate"]
    )
    # the other lifecycles still take their own path
    assert _matching(_pod("Pending")) == {"pod-ready"}
    assert _matching(_pod("Pending", "never-ready")) == {"pod-running-never-ready"}
    assert _matching(_pod("Running", "never-ready", "False")) == set()
    assert _matching(_pod("Running", "succeed", "True")) == {"pod-succeed"}
    deleting = _pod("Running", "slow-ready", "False")
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert _matching(deleting) == {"pod-delete"}


def test_upstreams_run_to_completion_and_prestop_pods_take_their_own_stages_only() -> None:
    """The e2e suite's pods are matched by their exact command; ordinary pods never are."""

    def e2e_pod(phase: str, command: list[str], restart: str = "Never") -> dict[str, Any]:
        pod = _pod(phase, ready="True" if phase == "Running" else None)
        pod["spec"] = {"restartPolicy": restart, "containers": [{"command": command}]}
        return pod

    exit0, sleep2 = ["sh", "-c", "exit 0"], ["sh", "-c", "sleep 2; exit 0"]
    assert _matching(e2e_pod("Pending", exit0)) == {"pod-ready"}
    assert _matching(e2e_pod("Running", exit0)) == {"pod-complete-exit-0"}
    assert _matching(e2e_pod("Running", sleep2)) == {"pod-complete-sleep-2"}
    assert _matching(e2e_pod("Running", exit0, restart="Always")) == set()
    assert _matching(e2e_pod("Running", ["sh", "-c", "exit 1"])) == set()
    labelled = e2e_pod("Running", exit0)
    labelled["metadata"]["labels"] = {LIFECYCLE_LABEL: "succeed"}
    assert _matching(labelled) == {"pod-succeed"}
    hooked = _pod("Running", ready="True")
    hooked["spec"] = {
        "containers": [{"lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 3"]}}}}]
    }
    hooked["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert _matching(hooked) == {"pod-delete-after-prestop"}


def test_a_component_whose_port_was_taken_before_it_bound_starts_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI saw kube-controller-manager exit with "bind: address already in use": the port
    free_port() probed was taken by another socket before the component bound it. It is started
    again on a newly probed port (kube-controller-manager, kube-scheduler and kwok: only their own
    health checks use theirs); another start-up failure keeps its port."""
    cl = DevCluster(tmp_path / "cluster", nodes=1, bin_dir=tmp_path)
    cl.logs.mkdir(parents=True)
    cl.ports["kube-controller-manager"] = 43817
    seen: list[int] = []

    def failing_once(first_log: str) -> Callable[[str, float], None]:
        """A launch that records the port, and the first time exits with ``first_log``."""

        def launch_once(name: str, timeout: float) -> None:
            seen.append(cl.ports[name])
            log = cl.logs / f"{name}.log"
            cl.components[name] = Component(name, ["x"], log, lambda: False)
            if len(seen) == 1:
                log.write_text(first_log)
                raise ClusterStartError("exited")

        return launch_once

    monkeypatch.setattr(
        cl,
        "_launch_once",
        failing_once("failed to listen on 127.0.0.1:43817: bind: address already in use\n"),
    )
    cl._launch("kube-controller-manager", 1.0, attempts=3)
    assert seen[0] == 43817 and len(seen) == 2 and seen[1] != 43817
    assert "kube-controller-manager" in RELOCATABLE and "kube-apiserver" not in RELOCATABLE

    seen.clear()
    cl.ports["kwok"] = 40000
    monkeypatch.setattr(cl, "_launch_once", failing_once("fatal error: concurrent map writes\n"))
    cl._launch("kwok", 1.0, attempts=3)
    assert seen == [40000, 40000]
