"""What upstream's e2e framework expects of a cluster, provided on one of our local control planes.

The framework checks, before every test, that the four CRDs, the namespace
``agent-sandbox-system`` and the Deployment ``agent-sandbox-controller`` in it exist; three tests
edit that Deployment's container args (the worker counts, the API client's QPS and burst) and
wait until its status says the change rolled out (``status.observedGeneration`` equal to the
generation, ``status.readyReplicas`` equal to ``spec.replicas``).

Here the Deployment is deploy/controller.yaml itself, applied with deploy/namespace.yaml and
deploy/rbac.yaml. No Deployment controller runs on the local control plane (kube-controller-
manager starts only the controllers in ``CONTROLLERS``), so the Deployment never gets a
ReplicaSet or a pod: it is a placeholder for :class:`ControllerStandIn`, which plays the
Deployment controller and the kubelet for it. The stand-in runs our controller out of cluster,
with the Deployment's container args (made local: loopback bind addresses, the Lease in
agent-sandbox-system) and nothing but a token of the deploy/ ServiceAccount; whenever the
Deployment's generation changes it restarts the controller with the new args, and once the new
process answers /readyz it writes the Deployment's status as a finished rollout would. The status
never claims more than the one process that runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from agentsandbox.devcluster.cluster import KCM_CONTROLLERS, DevCluster, free_port

# A deleted PVC keeps its kubernetes.io/pvc-protection finalizer (added at create by admission)
# until this controller sees no pod using it; without it, a test's namespace that held a Sandbox
# with volumeClaimTemplates never finishes deleting.
CONTROLLERS = (*KCM_CONTROLLERS, "persistentvolumeclaim-protection-controller")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SYSTEM_NS = "agent-sandbox-system"
NAME = "agent-sandbox-controller"  # the Deployment, its container and the ServiceAccount
DEPLOYMENT = f"/apis/apps/v1/namespaces/{SYSTEM_NS}/deployments/{NAME}"
MANIFESTS = (DEPLOY / "namespace.yaml", DEPLOY / "rbac.yaml", DEPLOY / "controller.yaml")
TOKEN_SECONDS = 6 * 3600  # longer than any run


class SetupError(RuntimeError):
    """The environment could not be set up (the message says what and where the log is)."""


def _files() -> list[str]:
    out: list[str] = []
    for manifest in MANIFESTS:
        out += ["-f", str(manifest)]
    return out


def install(cluster: DevCluster) -> None:
    """Apply deploy/'s namespace, RBAC and controller Deployment (CRDs: the cluster's own)."""
    if any("deployment" in c or "replicaset" in c for c in cluster.controllers):
        raise SetupError(
            "the local control plane runs a Deployment controller: the placeholder Deployment "
            "would start pods"
        )
    # a namespace an earlier user of the cluster left Terminating must be gone first
    cluster.kubectl("wait", "--for=delete", f"namespace/{SYSTEM_NS}", "--timeout=120s", check=False)
    proc = cluster.kubectl("apply", *_files(), check=False)
    if proc.returncode != 0:
        raise SetupError(f"kubectl apply of deploy/ failed:\n{proc.stdout}{proc.stderr}")


def uninstall(cluster: DevCluster) -> None:
    """Delete what :func:`install` applied (cluster-scoped RBAC included)."""
    cluster.kubectl("delete", "--ignore-not-found", "--wait=false", *_files(), check=False)


def token_kubeconfig(cluster: DevCluster, directory: Path) -> Path:
    """A kubeconfig holding nothing but a TokenRequest token of the controller's ServiceAccount."""
    review = cluster.api(
        "POST",
        f"/api/v1/namespaces/{SYSTEM_NS}/serviceaccounts/{NAME}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority": str(cluster.pki / "ca.crt"),
                },
            }
        ],
        "users": [{"name": NAME, "user": {"token": review["status"]["token"]}}],
        "contexts": [{"name": NAME, "context": {"cluster": "local", "user": NAME}}],
        "current-context": NAME,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "controller-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def local_args(args: list[str], metrics_port: int, probe_port: int) -> list[str]:
    """The Deployment's container args made runnable here: the bind addresses (":8080",
    ":8081": every interface) become 127.0.0.1 with free ports, and the Lease goes to
    agent-sandbox-system (in a pod, the pod's namespace). Every other arg is passed as is."""
    out = []
    for arg in args:
        if arg.startswith("--metrics-bind-address="):
            arg = f"--metrics-bind-address=127.0.0.1:{metrics_port}"
        elif arg.startswith("--health-probe-bind-address="):
            arg = f"--health-probe-bind-address=127.0.0.1:{probe_port}"
        out.append(arg)
    if not any(a.startswith("--health-probe-bind-address") for a in out):
        out.append(f"--health-probe-bind-address=127.0.0.1:{probe_port}")
    if not any(a.startswith("--metrics-bind-address") for a in out):
        out.append(f"--metrics-bind-address=127.0.0.1:{metrics_port}")
    if not any(a.startswith("--leader-election-namespace") for a in out):
        out.append(f"--leader-election-namespace={SYSTEM_NS}")
    return out


def container_args(deployment: dict[str, Any]) -> list[str]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    for c in containers:
        if c.get("name") == NAME:
            return [str(a) for a in c.get("args") or []]
    raise SetupError(f"the Deployment has no container named {NAME}")


def _readyz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


class ControllerStandIn:
    """Runs our controller for the placeholder Deployment and keeps its status (module doc).

    ``starts`` counts the processes started; ``crashes`` lists every process that exited without
    being asked to (the stand-in starts a new one, as a kubelet would, but a run with a crash
    fails: see run.py)."""

    def __init__(
        self, cluster: DevCluster, workdir: Path, *, poll: float = 0.2, ready_within: float = 90.0
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.poll = poll
        self.ready_within = ready_within
        self.kubeconfig = token_kubeconfig(cluster, workdir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.logs: list[Path] = []
        self.argv: list[str] = []
        self.generation: int | None = None  # the generation whose args the process runs
        self.ready = False
        self.starts = 0
        self.crashes: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="controller-stand-in", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> ControllerStandIn:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout: float = 120.0) -> None:
        """Start the loop; return once the first process is ready and the status says so."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.caught_up():
            if time.monotonic() > deadline:
                self.stop()
                raise SetupError(
                    f"the controller was not ready within {timeout:.0f}s: "
                    f"{self.errors[-3:] or 'no error'}; log: {self.log}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        self._end_process()

    def caught_up(self) -> bool:
        """The process runs the Deployment's current args, is ready, and the status says so."""
        if not (self.ready and self.proc is not None and self.proc.poll() is None):
            return False
        dep = self.cluster.api("GET", DEPLOYMENT)
        status = dep.get("status") or {}
        return bool(
            status.get("observedGeneration") == dep["metadata"]["generation"]
            and status.get("readyReplicas") == dep["spec"].get("replicas", 1)
        )

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except (OSError, ValueError, KeyError, SetupError) as err:
                self.errors.append(f"{type(err).__name__}: {err}")
                del self.errors[:-50]
            self._stop.wait(self.poll)

    def _sync(self) -> None:
        dep = self.cluster.api("GET", DEPLOYMENT)
        generation = int(dep["metadata"]["generation"])
        if self.proc is not None and self.proc.poll() is not None:
            self.crashes.append(f"exit code {self.proc.returncode}; log: {self.log}")
            self.proc, self.ready, self.generation = None, False, None
        if generation != self.generation:
            replicas = int(dep["spec"].get("replicas", 1))
            self._end_process()
            if replicas > 0:
                self._start_process(container_args(dep))
            self.generation = generation
        self._write_status(dep, generation)

    def _write_status(self, dep: dict[str, Any], generation: int) -> None:
        running = 1 if self.proc is not None and self.proc.poll() is None else 0
        ready = 1 if running and self.ready else 0
        want = {
            "observedGeneration": generation,
            "replicas": running,
            "updatedReplicas": running,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        status = dep.get("status") or {}
        # zero counts are omitted by the API server: compare as it stores them
        if all(status.get(k, 0) == v for k, v in want.items()):
            return
        body = dict(dep)
        body["status"] = {**status, **want}
        # the resourceVersion read above is the precondition: a 409 means the Deployment
        # changed since; the next pass reads it again
        try:
            self.cluster.api("PUT", f"{DEPLOYMENT}/status", body)
        except urllib.error.HTTPError as err:
            if err.code != 409:
                raise

    # ------------------------------------------------------------------ the process
    def _start_process(self, args: list[str]) -> None:
        metrics, probe = free_port(), free_port()
        self.starts += 1
        self.log = self.workdir / f"controller-{self.starts}.log"
        self.logs.append(self.log)
        self.argv = [
            sys.executable,
            "-m",
            "agentsandbox.cli.controller",
            f"--kubeconfig={self.kubeconfig}",
            *local_args(args, metrics, probe),
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        src = str(ROOT / "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        with self.log.open("wb") as out:
            out.write(("$ " + " ".join(self.argv) + "\n").encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir
            )
        self.ready = False
        deadline = time.monotonic() + self.ready_within
        while not self._stop.is_set():
            if self.proc.poll() is not None:
                return  # the next pass records the exit
            if _readyz(probe):
                self.ready = True
                return
            if time.monotonic() > deadline:
                self.errors.append(f"no /readyz within {self.ready_within:.0f}s; log: {self.log}")
                return
            time.sleep(0.1)

    def _end_process(self) -> None:
        proc, self.proc, self.ready = self.proc, None, False
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
            if code != 0:
                self.crashes.append(f"exit code {code} after SIGTERM; log: {self.log}")
        except subprocess.TimeoutExpired:
            self.crashes.append(f"did not stop within 30 s of SIGTERM; log: {self.log}")
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
