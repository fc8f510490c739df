"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake nodes, simulated pods), started and stopped by PID.

Used by the pytest session fixture (in-process, stopped at the end of the session) and by
``make cluster`` (left running in the background, state in ``.cluster/``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from . import certs
from .binaries import find_bin_dir, versions
from .process import ClusterStartError, Component, spawn, tail, terminate, wait_healthy

START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "resourcequota-controller",
    "clusterrole-aggregation-controller",
)
NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
LIFECYCLE_LABEL = "kwok.agentsandbox.dev/lifecycle"
"""Pod label read by our kwok stages: ``never-ready``, ``slow-ready``, ``succeed`` or ``fail``."""


#: components whose port only their own health check uses: when another socket takes it
#: between :func:`free_port`'s probe and the component's bind, another one is picked
RELOCATABLE = ("kube-controller-manager", "kube-scheduler", "kwok")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_pod_cidr(index: int) -> str:
    """A /20 (4094 pod IPs) per node, carved out of 10.64.0.0/10."""
    return f"10.{64 + index // 16}.{(index % 16) * 16}.0/20"


@dataclass
class DevCluster:
    """One local control plane. ``start()`` brings it up; ``stop()`` ends every process."""

    workdir: Path
    nodes: int = 10
    bin_dir: Path | None = None
    crd_paths: Sequence[Path] = ()
    ports: dict[str, int] = field(default_factory=dict)
    audit: bool = False
    apiserver_args: Sequence[str] = ()
    controllers: Sequence[str] = KCM_CONTROLLERS
    """kube-controller-manager's ``--controllers`` (hack/conformance/ adds PVC protection)."""
    components: dict[str, Component] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.state_file = self.workdir / "state.json"
        self.etcd_data = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / (
            f"agentsandbox-etcd-{uuid.uuid4().hex[:12]}"
        )
        self._ssl: ssl.SSLContext | None = None

    # ------------------------------------------------------------------ addresses
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    @property
    def kubectl_path(self) -> Path:
        assert self.bin_dir is not None
        return self.bin_dir / "kubectl"

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> None:
        """Start everything, or stop what was started and raise ClusterStartError."""
        started = time.monotonic()
        if self.bin_dir is None:
            self.bin_dir = find_bin_dir()
        missing = [n for n in (*START_ORDER, "kubectl") if not (self.bin_dir / n).is_file()]
        if missing:
            raise ClusterStartError(
                f"control plane binary missing: {', '.join(missing)} (in {self.bin_dir}); "
                "run `make controlplane`"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.pki.mkdir(exist_ok=True)
        for name in ("etcd", "etcd-peer", *START_ORDER[1:]):
            self.ports.setdefault(name, free_port())
        try:
            self._write_pki_and_configs()
            self._launch("etcd", timeout)
            self._launch("kube-apiserver", timeout)
            self._install_crds()
            self._create_nodes()
            for name in START_ORDER[2:]:
                # kwok v0.8.0 sometimes dies at start-up with "concurrent map writes" (a race in
                # its CEL environment set-up), and a port probed free may be taken before the
                # component binds it: a fresh start succeeds, so give these three tries.
                self._launch(name, timeout, attempts=3 if name in RELOCATABLE else 1)
            self._wait_nodes_ready(timeout)
            self._write_state(time.monotonic() - started)
        except BaseException:
            self.stop(keep_logs=True)
            raise

    def stop(self, *, keep_logs: bool = True) -> None:
        """Stop every component by PID (newest first), then remove etcd's data."""
        for name in reversed(START_ORDER):
            comp = self.components.get(name)
            if comp is not None:
                terminate(comp)
        shutil.rmtree(self.etcd_data, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.state_file.unlink()
        if not keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def alive(self) -> bool:
        return bool(self.components) and all(c.alive() for c in self.components.values())

    # ------------------------------------------------------------------ state (make cluster)
    def _write_state(self, took: float) -> None:
        state = {
            "workdir": str(self.workdir),
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "etcd_data": str(self.etcd_data),
            "nodes": self.nodes,
            "pids": {n: self._pid(c) for n, c in self.components.items()},
            "argv": {n: c.argv for n, c in self.components.items()},
            "start_seconds": round(took, 2),
            "versions": versions(self.bin_dir) if self.bin_dir else {},
        }
        self.state_file.write_text(json.dumps(state, indent=2))

    @staticmethod
    def _pid(comp: Component) -> int | None:
        return comp.proc.pid if comp.proc is not None else comp.pid

    @classmethod
    def attach(cls, workdir: Path) -> DevCluster | None:
        """Rebuild a handle on a cluster started earlier (by another process) from its state."""
        state_file = Path(workdir) / "state.json"
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return None
        cl = cls(Path(state["workdir"]), nodes=int(state["nodes"]), bin_dir=Path(state["bin_dir"]))
        cl.ports = {k: int(v) for k, v in state["ports"].items()}
        cl.etcd_data = Path(state["etcd_data"])
        for name, pid in state["pids"].items():
            cl.components[name] = Component(
                name, list(state["argv"][name]), cl.logs / f"{name}.log", lambda: False, pid=pid
            )
        return cl

    def healthy(self) -> bool:
        if not self.alive():
            return False
        try:
            return self._get_text("/readyz").strip() == "ok"
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    # ------------------------------------------------------------------ setup steps
    def _write_pki_and_configs(self) -> None:
        ca, ca_key = certs.make_ca()
        serving = certs.issue(
            ca,
            ca_key,
            "kube-apiserver",
            server=True,
            hosts=(
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        admin = certs.issue(ca, ca_key, "agentsandbox-admin", org="system:masters")
        sa_key, sa_pub = certs.service_account_keys()
        p = self.pki
        certs.write(p / "ca.crt", ca.cert_pem)
        certs.write(p / "ca.key", ca.key_pem, private=True)
        certs.write(p / "apiserver.crt", serving.cert_pem)
        certs.write(p / "apiserver.key", serving.key_pem, private=True)
        certs.write(p / "admin.crt", admin.cert_pem)
        certs.write(p / "admin.key", admin.key_pem, private=True)
        certs.write(p / "sa.key", sa_key, private=True)
        certs.write(p / "sa.pub", sa_pub)

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "agentsandbox-dev",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(ca.cert_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": "agentsandbox-admin",
                    "user": {
                        "client-certificate-data": b64(admin.cert_pem),
                        "client-key-data": b64(admin.key_pem),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "agentsandbox-dev",
                    "context": {"cluster": "agentsandbox-dev", "user": "agentsandbox-admin"},
                }
            ],
            "current-context": "agentsandbox-dev",
        }
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        self.kubeconfig.chmod(0o600)

        sched = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 2000, "burst": 4000},
            "leaderElection": {"leaderElect": False},
        }
        (self.workdir / "scheduler.yaml").write_text(yaml.safe_dump(sched))
        stages = resources.files("agentsandbox.devcluster").joinpath("kwok-stages.yaml")
        (self.workdir / "kwok.yaml").write_text(stages.read_text())
        if self.audit:
            policy = {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived"],
                # writes only (the benchmarks count them); reads and watches are not logged
                "rules": [
                    {
                        "level": "Metadata",
                        "verbs": ["create", "update", "patch", "delete", "deletecollection"],
                    },
                    {"level": "None"},
                ],
            }
            (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(policy))

    def _argv(self, name: str) -> list[str]:
        assert self.bin_dir is not None
        exe = str(self.bin_dir / name)
        port = self.ports.get(name, 0)
        p = self.pki
        if name == "etcd":
            peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
            return [
                exe,
                "--name=default",
                f"--data-dir={self.etcd_data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                f"--quota-backend-bytes={8 * 1024**3}",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=1h",
                "--log-level=warn",
            ]
        if name == "kube-apiserver":
            argv = [
                exe,
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--client-ca-file={p / 'ca.crt'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                "--allow-privileged=true",
                # Pods must be creatable in a brand-new namespace at once, as envtest does.
                # No node-lifecycle controller runs, so nothing would lift the not-ready taint.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                "--profiling=false",
                "--v=0",
            ]
            if self.audit:
                argv += [
                    f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                    f"--audit-log-path={self.logs / 'audit.log'}",
                    "--audit-log-mode=batch",
                ]
            return argv + list(self.apiserver_args)
        if name == "kube-controller-manager":
            return [
                exe,
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--kube-api-qps=2000",
                "--kube-api-burst=4000",
                "--concurrent-gc-syncs=50",
                "--use-service-account-credentials=false",
                "--profiling=false",
            ]
        if name == "kube-scheduler":
            return [
                exe,
                f"--config={self.workdir / 'scheduler.yaml'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                "--profiling=false",
            ]
        if name == "kwok":
            return [
                exe,
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.workdir / 'kwok.yaml'}",
                f"--server-address=127.0.0.1:{port}",
                "--cidr=10.32.0.0/16",
            ]
        raise ValueError(name)

    def _health(self, name: str) -> Callable[[], bool]:
        port = self.ports[name]

        def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
                    body = resp.read().decode(errors="replace")
                    return resp.status == 200 and (
                        "ok" in body or '"health":"true"' in body.replace(" ", "")
                    )
            except (OSError, urllib.error.URLError, ssl.SSLError, ValueError):
                return False

        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        if name == "etcd":
            return lambda: http_ok(f"{self.etcd_url}/health")
        if name == "kube-apiserver":
            return lambda: http_ok(f"{self.server}/readyz", self._ssl_context())
        if name in ("kube-controller-manager", "kube-scheduler"):
            return lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure)
        if name == "kwok":
            return lambda: http_ok(f"http://127.0.0.1:{port}/healthz")
        raise ValueError(name)

    def _launch(self, name: str, timeout: float, attempts: int = 1) -> None:
        for attempt in range(1, attempts + 1):
            try:
                self._launch_once(name, timeout)
                return
            except ClusterStartError:
                comp = self.components.get(name)
                if attempt == attempts or comp is None or comp.alive():
                    raise
                if name in RELOCATABLE and "address already in use" in tail(comp.log):
                    self.ports[name] = free_port()  # taken between the probe and the bind
                with (self.logs / f"{name}.log").open("a") as log:
                    log.write(f"\n--- {name} exited during start-up; retry {attempt} ---\n")

    def _launch_once(self, name: str, timeout: float) -> None:
        argv = self._argv(name)
        log = self.logs / f"{name}.log"
        comp = Component(name, argv, log, self._health(name))
        spawn(comp, self.workdir)
        self.components[name] = comp
        wait_healthy(comp, timeout)

    # ------------------------------------------------------------------ admin API access
    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
            ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
            self._ssl = ctx
        return self._ssl

    def _get_text(self, path: str) -> str:
        with urllib.request.urlopen(
            f"{self.server}{path}", timeout=5, context=self._ssl_context()
        ) as resp:
            return str(resp.read().decode())

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A small synchronous admin client for set-up and checks (not the controller's)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30, context=self._ssl_context()) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
        )

    def _install_crds(self) -> None:
        docs = list(_crd_documents(self.crd_paths))
        names = []
        for doc in docs:
            self.api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
            names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + 60
        for name in names:
            while True:
                crd = self.api(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                conds = {
                    c.get("type"): c.get("status")
                    for c in (crd.get("status") or {}).get("conditions") or []
                }
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise ClusterStartError(f"CRD {name} not Established within 60s")
                time.sleep(0.1)

    def _create_nodes(self) -> None:
        for i in range(self.nodes):
            name = f"kwok-node-{i}"
            cidr = node_pod_cidr(i)
            self.api(
                "POST",
                "/api/v1/nodes",
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {NODE_ANNOTATION[0]: NODE_ANNOTATION[1]},
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                        },
                    },
                    "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
                },
            )

    def _wait_nodes_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            items = self.api("GET", "/api/v1/nodes")["items"]
            ready = [
                n
                for n in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            ]
            if len(ready) >= self.nodes:
                return
            if time.monotonic() > deadline:
                log = self.logs / "kwok.log"
                raise ClusterStartError(
                    f"only {len(ready)}/{self.nodes} nodes Ready after {timeout:.0f}s; "
                    f"kwok log: {log}\n{tail(log)}"
                )
            for comp in self.components.values():
                if not comp.alive():
                    raise ClusterStartError(
                        f"{comp.name} exited; log: {comp.log}\n{tail(comp.log)}"
                    )
            time.sleep(0.1)


def _crd_documents(paths: Iterable[Path]) -> Iterable[dict[str, Any]]:
    for path in paths:
        files = sorted(Path(path).glob("*.yaml")) if Path(path).is_dir() else [Path(path)]
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    yield doc
