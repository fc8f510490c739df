"""deploy/: the kustomize layout renders and applies, and its RBAC is enough and no more.

The proof of least privilege runs the real ``agent-sandbox-controller`` process with nothing but
a token of the deploy/ ServiceAccount: whatever the controllers do must succeed with exactly the
rules in deploy/rbac.yaml, and the log must show no request the API server refused.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from agentsandbox.devcluster.binaries import repo_root
from agentsandbox.devcluster.cluster import DevCluster, free_port
from tests.controller_process import stop
from tests.polling import eventually_sync

from .invariants import SandboxHistory, checked_history

EXE = Path(sys.executable).with_name("agent-sandbox-controller")
ROOT = repo_root() or Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NETWORK_POLICY_COMPONENT = DEPLOY / "network-policy"
SYSTEM_NS = "agent-sandbox-system"
SA = "agent-sandbox-controller"
SA_USER = f"system:serviceaccount:{SYSTEM_NS}:{SA}"
LEASE = "a3317529.agent-sandbox.x-k8s.io"
SANDBOXES = "/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes"
EXT = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}"
AUTOSCALERS = (
    "/apis/autoscaling.agentsandbox.dev/v1alpha1/namespaces/{ns}/sandboxwarmpoolautoscalers"
)

REFUSED = re.compile(r"forbidden|(?<![\d.:])403(?!\d)", re.IGNORECASE)

T = TypeVar("T")


@pytest.fixture(scope="module", autouse=True)
async def claim_history(
    cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of the module's tests, checked against the claim rules at its
    end (tests/integration/invariants.py): one history for the module, whose many short tests
    make a few claims each (one per test would cost more than the tests)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def get_or_none(cluster: DevCluster, path: str) -> Any:
    try:
        return cluster.api("GET", path)
    except OSError as err:  # urllib's HTTPError is an OSError
        if getattr(err, "code", None) == 404:
            return None
        raise


def get_if(cluster: DevCluster, path: str, pred: Callable[[Any], bool]) -> Any:
    obj = cluster.api("GET", path)
    return obj if pred(obj) else None


def owned_by(uid: str) -> Callable[[Any], bool]:
    def check(obj: Any) -> bool:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        return any(r.get("uid") == uid for r in refs)

    return check


def ready_replicas(pool: dict[str, Any]) -> int | None:
    return (pool.get("status") or {}).get("readyReplicas")


def ready_reason(obj: dict[str, Any]) -> str | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "Ready"), None)


def ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


AGGREGATE_ROLES = DEPLOY / "aggregate-roles" / "aggregate-roles.yaml"
# the opt-in aggregated roles too, so that the test of them below has them
INSTALL = [
    *("-f", str(DEPLOY / "namespace.yaml"), "-f", str(DEPLOY / "rbac.yaml")),
    *("-f", str(AGGREGATE_ROLES)),
]


def install(cluster: DevCluster) -> None:
    """Apply deploy/namespace.yaml + deploy/rbac.yaml (+ the opt-in aggregated roles) for real."""
    # a namespace left Terminating by an earlier run on a reused cluster must be gone first
    cluster.kubectl("wait", "--for=delete", f"namespace/{SYSTEM_NS}", "--timeout=60s", check=False)
    cluster.kubectl("apply", *INSTALL)


def token_kubeconfig(cluster: DevCluster, directory: Path) -> Path:
    """A kubeconfig holding nothing but a TokenRequest token of the controller's ServiceAccount."""
    review = cluster.api(
        "POST",
        f"/api/v1/namespaces/{SYSTEM_NS}/serviceaccounts/{SA}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
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
        "users": [{"name": SA, "user": {"token": review["status"]["token"]}}],
        "contexts": [{"name": SA, "context": {"cluster": "local", "user": SA}}],
        "current-context": SA,
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def installed(cluster: DevCluster) -> Iterator[None]:
    """The namespace and RBAC installed in the session cluster; all of it deleted afterwards
    (ClusterRoles and ClusterRoleBindings included), so later tests see the cluster as before."""
    install(cluster)
    try:
        yield
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", *INSTALL, check=False)


@pytest.fixture(scope="module")
def sa_kubeconfig(
    cluster: DevCluster, installed: None, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return token_kubeconfig(cluster, tmp_path_factory.mktemp("sa"))


@pytest.fixture(scope="module")
def strict_cluster(
    cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevCluster]:
    """A second, small control plane with the OwnerReferencesPermissionEnforcement admission
    plugin (off by default, on in some distributions), the deploy/ RBAC installed."""
    strict = DevCluster(
        tmp_path_factory.mktemp("strict") / "cluster",
        nodes=2,
        bin_dir=cluster.bin_dir,
        crd_paths=[DEPLOY / "crds"],
        apiserver_args=["--enable-admission-plugins=OwnerReferencesPermissionEnforcement"],
    )
    strict.start()
    try:
        install(strict)
        yield strict
    finally:
        strict.stop(keep_logs=False)


# --------------------------------------------------------------------------------- (a) layout
def test_kustomize_renders_the_layout_and_the_server_accepts_it(
    cluster: DevCluster, installed: None
) -> None:
    rendered = cluster.kubectl("kustomize", str(DEPLOY)).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert set(objects) == {
        ("CustomResourceDefinition", "sandboxes.agents.x-k8s.io"),
        ("CustomResourceDefinition", "sandboxclaims.extensions.agents.x-k8s.io"),
        ("CustomResourceDefinition", "sandboxtemplates.extensions.agents.x-k8s.io"),
        ("CustomResourceDefinition", "sandboxwarmpools.extensions.agents.x-k8s.io"),
        ("CustomResourceDefinition", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev"),
        ("Namespace", SYSTEM_NS),
        ("ServiceAccount", SA),
        ("ClusterRole", "agent-sandbox-controller"),
        ("ClusterRole", "agent-sandbox-controller-extensions"),
        ("ClusterRoleBinding", "agent-sandbox-controller"),
        ("ClusterRoleBinding", "agent-sandbox-controller-extensions"),
        ("Role", "agent-sandbox-controller-leader-election"),
        ("RoleBinding", "agent-sandbox-controller-leader-election"),
        ("Service", "agent-sandbox-controller"),
        ("Deployment", "agent-sandbox-controller"),
    }
    assert objects["ServiceAccount", SA]["metadata"]["labels"] == {"app": SA}
    assert objects["Service", SA]["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    deployment = objects["Deployment", SA]
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SA
    assert pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    assert container["args"] == [
        "--leader-elect=true",
        "--extensions",
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=:8081",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 8080,
        "healthz": 8081,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # the optional agent-sandbox-config ConfigMap, where the controller reads the label domains
    # claims may use (/etc/sandbox-config/allowed-label-domains)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/sandbox-config"]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"] == {"name": "agent-sandbox-config", "optional": True}

    # The whole layout, as `kubectl apply -k deploy/` would send it, passes every admission
    # step (schema, RBAC escalation checks, PodSecurity "restricted" warn label) without
    # being persisted. No Deployment controller runs here, so nothing would start anyway.
    dry = cluster.kubectl("apply", "-k", str(DEPLOY), "--dry-run=server", check=False)
    assert dry.returncode == 0, dry.stderr
    assert "deployment.apps/agent-sandbox-controller created (server dry run)" in dry.stdout
    assert "service/agent-sandbox-controller created (server dry run)" in dry.stdout
    assert "PodSecurity" not in dry.stderr, dry.stderr
    assert get_or_none(cluster, f"/apis/apps/v1/namespaces/{SYSTEM_NS}/deployments/{SA}") is None


def test_the_network_policy_component_admits_only_the_metrics_and_probe_ports(
    cluster: DevCluster, installed: None, tmp_path: Path
) -> None:
    """Security review note 14: the kustomize component deploy/network-policy/ (opt-in: not in
    deploy/kustomization.yaml) adds one NetworkPolicy for the controller's pod: ingress only to
    its metrics and probe ports, from any source; egress only to TCP 443 and 6443 (the API
    server's usual ports) at any address, no DNS (in a pod the API server is reached by the IP in
    $KUBERNETES_SERVICE_HOST). An overlay with the component renders, and the server accepts it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, overlay)],
                "components": [os.path.relpath(NETWORK_POLICY_COMPONENT, overlay)],
            }
        )
    )
    plain = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(DEPLOY)).stdout) if d]
    assert not [d for d in plain if d["kind"] == "NetworkPolicy"]
    docs = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(overlay)).stdout) if d]
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert set(objects) == {(d["kind"], d["metadata"]["name"]) for d in plain} | {
        ("NetworkPolicy", SA)
    }
    policy = objects["NetworkPolicy", SA]
    assert policy["metadata"]["namespace"] == SYSTEM_NS
    assert policy["metadata"]["labels"] == {"app": SA}
    pod = objects["Deployment", SA]["spec"]["template"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"app": SA} and selector.items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (container,) = pod["spec"]["containers"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": p["containerPort"]} for p in container["ports"]]}
    ]
    assert policy["spec"]["egress"] == [
        {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    ]

    dry = cluster.kubectl("apply", "-k", str(overlay), "--dry-run=server", check=False)
    assert dry.returncode == 0, dry.stderr
    assert (
        "networkpolicy.networking.k8s.io/agent-sandbox-controller created (server dry run)"
        in dry.stdout
    ), dry.stdout


# --------------------------------------------------------------------------------- (b) enough
def test_the_controller_runs_with_only_the_deploy_rbac(
    cluster: DevCluster, namespace: str, sa_kubeconfig: Path, tmp_path: Path
) -> None:
    run_controller_with_token(cluster, namespace, sa_kubeconfig, tmp_path)


def test_the_rbac_suffices_under_owner_reference_permission_enforcement(
    strict_cluster: DevCluster, tmp_path: Path
) -> None:
    """That plugin asks for what the code never calls: "update" on sandboxes/finalizers and
    sandboxwarmpools/finalizers (to set blockOwnerDeletion) and "delete" on PVCs (to add an
    ownerReference to an existing claim). Without them this test fails, the first one not."""
    ns = "strict"
    strict_cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    kubeconfig = token_kubeconfig(strict_cluster, tmp_path)
    run_controller_with_token(strict_cluster, ns, kubeconfig, tmp_path)


def local_args(args: Sequence[str], metrics_port: int, probe_port: int) -> list[str]:
    """A Deployment's container args made runnable on this machine: the two bind addresses
    (":8080", ":8081", every interface) become 127.0.0.1 with free ports, and the Lease goes to
    agent-sandbox-system (in a pod that is the pod's own namespace, read from the mounted
    ServiceAccount). Everything else is passed as the Deployment has it."""
    out = []
    for arg in args:
        if arg.startswith("--metrics-bind-address="):
            arg = f"--metrics-bind-address=127.0.0.1:{metrics_port}"
        elif arg.startswith("--health-probe-bind-address="):
            arg = f"--health-probe-bind-address=127.0.0.1:{probe_port}"
        out.append(arg)
    if not any(a.startswith("--leader-election-namespace") for a in out):
        out.append(f"--leader-election-namespace={SYSTEM_NS}")
    return out


@contextlib.contextmanager
def controller_with_token(
    cluster: DevCluster, kubeconfig: Path, args: Sequence[str], log: Path
) -> Iterator[Callable[[], bool]]:
    """Run agent-sandbox-controller with ``args`` and nothing but the token in ``kubeconfig``;
    yield a liveness check. On a clean exit of the block: SIGTERM, exit code 0, no request
    refused in the log, and the Lease released (reading and updating it were both allowed)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(EXE), f"--kubeconfig={kubeconfig}", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield lambda: proc.poll() is None
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    # A 403 for writing into a Terminating namespace (a namespace an earlier test left behind)
    # comes from NamespaceLifecycle admission, not RBAC: it is the only refusal tolerated.
    refused = [
        line
        for line in text.splitlines()
        if REFUSED.search(line) and "because it is being terminated" not in line
    ]
    assert not refused, "\n".join(refused)
    lease = cluster.api(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NS}/leases/{LEASE}"
    )
    assert not lease["spec"].get("holderIdentity"), lease["spec"]


def run_controller_with_token(
    cluster: DevCluster, ns: str, kubeconfig: Path, tmp_path: Path
) -> None:
    metrics_port, probe_port = free_port(), free_port()
    log = tmp_path / "controller.log"
    args = ["--extensions", "--leader-elect=true", "--metrics-bind-address=:8080"]
    args += ["--health-probe-bind-address=:8081"]
    with controller_with_token(
        cluster, kubeconfig, local_args(args, metrics_port, probe_port), log
    ) as alive:
        exercise_controller(cluster, ns, alive, log)


def waiter(alive: Callable[[], bool], log: Path) -> Callable[..., Any]:
    """``wait(check, what, timeout=30)``: poll ``check`` while the controller is alive; on a
    timeout, fail with the last lines of its log."""

    def wait(check: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        def probe() -> T | None:
            assert alive(), f"the controller exited:\n{log.read_text()}"
            return check()

        try:
            return eventually_sync(probe, within=timeout, what=what)
        except AssertionError as err:
            tail = "\n".join(log.read_text().splitlines()[-30:])
            raise AssertionError(f"{err}\ncontroller log (last lines):\n{tail}") from None

    return wait


def serve_warm_and_cold(
    cluster: DevCluster,
    ns: str,
    alive: Callable[[], bool],
    log: Path,
    claim_annotations: dict[str, str] | None = None,
) -> None:
    """A pool of one, then a warm claim (adopts the pool's sandbox) and a cold one (creates its
    own): both Ready, the warm one with a member of the pool."""
    wait = waiter(alive, log)
    ext = EXT.format(ns=ns)
    container = {"name": "main", "image": "example/python:1"}
    cluster.api(
        "POST",
        f"{ext}/sandboxtemplates",
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": "py"},
            "spec": {"podTemplate": {"spec": {"containers": [container]}}},
        },
    )
    cluster.api(
        "POST",
        f"{ext}/sandboxwarmpools",
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "pool"},
            "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "py"}},
        },
    )
    wait(
        lambda: get_if(cluster, f"{ext}/sandboxwarmpools/pool", lambda p: ready_replicas(p) == 1),
        "warm pool readyReplicas 1",
    )
    members = {
        sb["metadata"]["name"]
        for sb in cluster.api("GET", SANDBOXES.format(ns=ns))["items"]
        if any(r["kind"] == "SandboxWarmPool" for r in sb["metadata"].get("ownerReferences", []))
    }
    for name, spec in (
        ("warm", {"warmPoolRef": {"name": "pool"}}),
        ("cold", {"sandboxTemplateRef": {"name": "py"}, "warmpool": "none"}),
    ):
        cluster.api(
            "POST",
            f"{ext}/sandboxclaims",
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxClaim",
                "metadata": {"name": name, "annotations": claim_annotations or {}},
                "spec": spec,
            },
        )
    warm = wait(lambda: get_if(cluster, f"{ext}/sandboxclaims/warm", ready), "claim warm Ready")
    assert warm["status"]["sandbox"]["name"] in members, (warm["status"], members)
    cold = wait(lambda: get_if(cluster, f"{ext}/sandboxclaims/cold", ready), "claim cold Ready")
    assert cold["status"]["sandbox"]["name"] == "cold"


def exercise_controller(cluster: DevCluster, ns: str, alive: Callable[[], bool], log: Path) -> None:
    """Drive every write path the controllers have and check each one took effect."""
    wait = waiter(alive, log)

    sandboxes = SANDBOXES.format(ns=ns)
    ext = EXT.format(ns=ns)
    container = {"name": "main", "image": "example/python:1"}
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    # Sandbox with a headless Service: pod + service create, status merge patch.
    cluster.api(
        "POST",
        sandboxes,
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": "web"},
            "spec": {"service": True, "podTemplate": {"spec": {"containers": [container]}}},
        },
    )
    # Sandbox with two volumeClaimTemplates: "data" is created with an ownerReference, "home"
    # already exists unowned and marked adoptable, so it is read and adopted (a patch that
    # adds an ownerReference: OwnerReferencesPermissionEnforcement wants "delete" for that).
    cluster.api(
        "POST",
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "home-disk", "labels": {"agents.x-k8s.io/adoptable": "true"}},
            "spec": claim_spec,
        },
    )
    cluster.api(
        "POST",
        sandboxes,
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": "disk"},
            "spec": {
                "podTemplate": {"spec": {"containers": [container]}},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "data"}, "spec": claim_spec},
                    {"metadata": {"name": "home"}, "spec": claim_spec},
                ],
            },
        },
    )
    # Sandbox "kept" finds a pod and a Service of its name already there, unowned, marked
    # adoptable and without the tracking label (so not in the caches): its creates are
    # answered AlreadyExists, it reads both back (get) and adopts them (patch).
    adoptable = {"agents.x-k8s.io/adoptable": "true"}
    cluster.api(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kept", "labels": adoptable},
            "spec": {"containers": [container]},
        },
    )
    cluster.api(
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kept", "labels": adoptable},
            # with a selector: a selectorless headless Service defaults to RequireDualStack,
            # which this single-stack cluster then refuses to give a selector
            "spec": {"clusterIP": "None", "selector": {"app": "kept"}, "ports": [{"port": 80}]},
        },
    )
    cluster.api(
        "POST",
        sandboxes,
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": "kept"},
            "spec": {"service": True, "podTemplate": {"spec": {"containers": [container]}}},
        },
    )
    # A warm pool of two whose template does not exist yet: a WarmPoolNotProgressing event
    # and a status written by server-side apply; then the template arrives and the pool
    # creates its sandboxes (and reports WarmPoolProgressing).
    cluster.api(
        "POST",
        f"{ext}/sandboxwarmpools",
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "pool"},
            "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "py"}},
        },
    )

    wait(
        lambda: get_if(
            cluster,
            f"{ext}/sandboxwarmpools/pool",
            lambda p: ready_reason(p) == "TemplateNotFound",
        ),
        "warm pool status TemplateNotFound",
    )
    cluster.api(
        "POST",
        f"{ext}/sandboxtemplates",
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": "py"},
            "spec": {"podTemplate": {"spec": {"containers": [container]}}},
        },
    )

    web = wait(lambda: get_if(cluster, f"{sandboxes}/web", ready), "sandbox web Ready")
    assert web["status"]["podIPs"], web["status"]
    svc = cluster.api("GET", f"/api/v1/namespaces/{ns}/services/web")
    assert svc["metadata"]["ownerReferences"][0]["uid"] == web["metadata"]["uid"]
    kept = cluster.api("GET", f"{sandboxes}/kept")
    for kind in ("pods", "services"):
        path = f"/api/v1/namespaces/{ns}/{kind}/kept"
        wait(
            functools.partial(get_if, cluster, path, owned_by(kept["metadata"]["uid"])),
            f"{kind}/kept adopted by sandbox kept",
        )
    disk = cluster.api("GET", f"{sandboxes}/disk")

    def owned_claim(name: str) -> Any:
        path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
        refs = ((get_or_none(cluster, path) or {}).get("metadata") or {}).get("ownerReferences")
        return refs if refs and refs[0]["uid"] == disk["metadata"]["uid"] else None

    wait(lambda: owned_claim("data-disk"), "PVC data-disk created for sandbox disk")
    wait(lambda: owned_claim("home-disk"), "PVC home-disk adopted by sandbox disk")
    pool = wait(
        lambda: get_if(cluster, f"{ext}/sandboxwarmpools/pool", lambda p: ready_replicas(p) == 2),
        "warm pool readyReplicas 2",
    )
    assert pool["status"]["replicas"] == 2

    lease = cluster.api(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NS}/leases/{LEASE}"
    )
    assert lease["spec"]["holderIdentity"]

    # Adoption by the pool (an update that adds an ownerReference): orphan one of its
    # sandboxes and watch the pool take it back.
    owned = [
        sb
        for sb in cluster.api("GET", sandboxes)["items"]
        if any(r["kind"] == "SandboxWarmPool" for r in sb["metadata"].get("ownerReferences", []))
    ]
    assert len(owned) == 2
    orphan = owned[0]["metadata"]["name"]
    cluster.kubectl(
        "patch",
        "-n",
        ns,
        f"sandboxes.agents.x-k8s.io/{orphan}",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/ownerReferences"}]',
    )
    wait(
        lambda: get_if(cluster, f"{sandboxes}/{orphan}", owned_by(pool["metadata"]["uid"])),
        "the orphaned sandbox adopted back by its pool",
    )

    # Claims: a warm one adopts a pool sandbox (one patch with a resourceVersion precondition,
    # then a status merge patch), a cold one creates its sandbox, one names a pool that does
    # not exist (read from the API, not the cache, before WarmPoolNotFound is written).
    members = {
        sb["metadata"]["name"]
        for sb in cluster.api("GET", sandboxes)["items"]
        if any(r["kind"] == "SandboxWarmPool" for r in sb["metadata"].get("ownerReferences", []))
    }
    for name, spec in (
        ("warm", {"warmPoolRef": {"name": "pool"}}),
        ("cold", {"sandboxTemplateRef": {"name": "py"}, "warmpool": "none"}),
        ("lost", {"warmPoolRef": {"name": "nope"}}),
        (
            "brief",
            {
                "sandboxTemplateRef": {"name": "py"},
                "warmpool": "none",
                "lifecycle": {
                    "shutdownTime": (datetime.now(UTC) + timedelta(seconds=3)).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    ),
                    "shutdownPolicy": "Delete",
                },
            },
        ),
    ):
        cluster.api(
            "POST",
            f"{ext}/sandboxclaims",
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxClaim",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
    warm = wait(lambda: get_if(cluster, f"{ext}/sandboxclaims/warm", ready), "claim warm Ready")
    assert warm["status"]["sandbox"]["name"] in members, (warm["status"], members)
    cold = wait(lambda: get_if(cluster, f"{ext}/sandboxclaims/cold", ready), "claim cold Ready")
    assert cold["status"]["sandbox"]["name"] == "cold"
    wait(
        lambda: get_if(
            cluster,
            f"{ext}/sandboxclaims/lost",
            lambda c: ready_reason(c) == "WarmPoolNotFound",
        ),
        "claim lost reports WarmPoolNotFound",
    )
    # expiry with shutdownPolicy Delete: the claim deletes itself (its sandbox goes by GC)
    wait(
        lambda: get_or_none(cluster, f"{ext}/sandboxclaims/brief") is None,
        "claim brief deleted at expiry",
    )
    pool = wait(
        lambda: get_if(cluster, f"{ext}/sandboxwarmpools/pool", lambda p: ready_replicas(p) == 2),
        "warm pool refilled after the adoption",
    )

    # Deletes: the pool scales down (sandbox delete); web expires with shutdownPolicy Delete
    # (its pod and Service are deleted, then the Sandbox itself).
    merge_patch(
        cluster, ns, "sandboxwarmpools.extensions.agents.x-k8s.io/pool", {"spec": {"replicas": 1}}
    )
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    merge_patch(
        cluster,
        ns,
        "sandboxes.agents.x-k8s.io/web",
        {"spec": {"shutdownTime": now, "shutdownPolicy": "Delete"}},
    )
    wait(lambda: get_or_none(cluster, f"{sandboxes}/web") is None, "web deleted at expiry")
    wait(
        lambda: get_if(
            cluster,
            f"{ext}/sandboxwarmpools/pool",
            lambda p: (p.get("status") or {}).get("replicas") == 1,
        ),
        "warm pool scaled down to 1",
    )

    # SandboxTemplate: template "py" gets its NetworkPolicy (create; its blockOwnerDeletion needs
    # sandboxtemplates/finalizers under OwnerReferencesPermissionEnforcement) and its ref-hash
    # label (merge patch); custom rules update the policy (PUT); Unmanaged deletes it.
    netpols = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
    template_uid = cluster.api("GET", f"{ext}/sandboxtemplates/py")["metadata"]["uid"]
    wait(
        lambda: get_if(cluster, f"{netpols}/py-network-policy", owned_by(template_uid)),
        "NetworkPolicy py-network-policy created for template py",
    )
    wait(
        lambda: get_if(
            cluster,
            f"{ext}/sandboxtemplates/py",
            lambda t: bool(
                (t["metadata"].get("labels") or {}).get("agents.x-k8s.io/sandbox-template-ref-hash")
            ),
        ),
        "template py labelled with its ref hash",
    )
    custom_ingress = [{"from": [{"podSelector": {"matchLabels": {"app": "ingress"}}}]}]
    merge_patch(
        cluster,
        ns,
        "sandboxtemplates.extensions.agents.x-k8s.io/py",
        {"spec": {"networkPolicy": {"ingress": custom_ingress}}},
    )
    wait(
        lambda: get_if(
            cluster,
            f"{netpols}/py-network-policy",
            lambda n: n["spec"].get("ingress") == custom_ingress and not n["spec"].get("egress"),
        ),
        "NetworkPolicy py-network-policy updated to the custom rules",
    )
    merge_patch(
        cluster,
        ns,
        "sandboxtemplates.extensions.agents.x-k8s.io/py",
        {"spec": {"networkPolicyManagement": "Unmanaged"}},
    )
    wait(
        lambda: get_or_none(cluster, f"{netpols}/py-network-policy") is None,
        "NetworkPolicy py-network-policy deleted under Unmanaged",
    )

    # SandboxWarmPoolAutoscaler: the pool (at 1) is resized through its /scale subresource
    # (get + a JSON patch testing the replicas read) to the autoscaler's minimum,
    # and the autoscaler's status is written (merge patch of /status).
    cluster.api(
        "POST",
        f"{AUTOSCALERS.format(ns=ns)}",
        {
            "apiVersion": "autoscaling.agentsandbox.dev/v1alpha1",
            "kind": "SandboxWarmPoolAutoscaler",
            "metadata": {"name": "pool"},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxWarmPool",
                    "name": "pool",
                },
                "minReplicas": 2,
                "maxReplicas": 3,
                "targetWarmShare": 0.9,
            },
        },
    )
    wait(
        lambda: get_if(
            cluster, f"{ext}/sandboxwarmpools/pool", lambda p: p["spec"]["replicas"] == 2
        ),
        "warm pool resized to 2 by its autoscaler",
    )
    wait(
        lambda: get_if(
            cluster,
            f"{AUTOSCALERS.format(ns=ns)}/pool",
            lambda a: (a.get("status") or {}).get("lastScaledReplicas") == 2,
        ),
        "autoscaler status written",
    )

    # Events were written by every controller.
    def reasons() -> set[tuple[str, str]] | None:
        events = cluster.api("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
        found = {(e.get("reportingController"), e.get("reason")) for e in events}
        wanted = {
            ("sandbox-controller", "SandboxExpired"),
            ("warmpool-controller", "WarmPoolNotProgressing"),
            ("warmpool-controller", "WarmPoolProgressing"),
            ("sandboxclaim-controller", "SandboxAdopted"),
            ("sandboxclaim-controller", "SandboxProvisioned"),
            ("warmpool-autoscaler", "SuccessfulRescale"),
        }
        return found if wanted <= found else None

    wait(reasons, "events from every controller", timeout=10)


def merge_patch(cluster: DevCluster, ns: str, what: str, body: dict[str, Any]) -> None:
    """A JSON merge patch with the admin credentials."""
    cluster.kubectl("patch", "-n", ns, what, "--type=merge", "-p", json.dumps(body))


# --------------------------------------------------------------------------------- (c) no more
# (verb, resource[/name], namespace or "" for cluster scope, subresource, allowed?)
ACCESS = [
    # what the controllers use
    ("create", "pods", "default", "", True),
    ("delete", "services", "default", "", True),
    ("patch", "persistentvolumeclaims", "default", "", True),
    ("patch", "sandboxes.agents.x-k8s.io", "default", "status", True),
    ("create", "sandboxes.agents.x-k8s.io", "default", "", True),
    ("patch", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "status", True),
    ("create", "events.events.k8s.io", "default", "", True),
    ("patch", "sandboxclaims.extensions.agents.x-k8s.io", "default", "status", True),
    ("patch", "sandboxclaims.extensions.agents.x-k8s.io", "default", "", True),
    ("delete", "sandboxclaims.extensions.agents.x-k8s.io", "default", "", True),
    ("get", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "", True),
    ("patch", "sandboxes.agents.x-k8s.io", "default", "", True),
    ("watch", "networkpolicies.networking.k8s.io", "", "", True),
    ("create", "networkpolicies.networking.k8s.io", "default", "", True),
    ("update", "networkpolicies.networking.k8s.io", "default", "", True),
    ("delete", "networkpolicies.networking.k8s.io", "default", "", True),
    ("patch", "sandboxtemplates.extensions.agents.x-k8s.io", "default", "", True),
    ("update", "sandboxtemplates.extensions.agents.x-k8s.io", "default", "finalizers", True),
    ("get", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "scale", True),
    ("patch", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "scale", True),
    ("watch", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", "", "", True),
    ("patch", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", "default", "status", True),
    ("create", "leases.coordination.k8s.io", SYSTEM_NS, "", True),
    ("update", f"leases.coordination.k8s.io/{LEASE}", SYSTEM_NS, "", True),
    # and nothing else
    ("get", "secrets", "default", "", False),
    ("list", "secrets", SYSTEM_NS, "", False),
    ("get", "configmaps", "default", "", False),
    ("delete", "secrets", "default", "", False),
    ("get", "networkpolicies.networking.k8s.io", "default", "", False),
    ("patch", "networkpolicies.networking.k8s.io", "default", "", False),
    ("update", "sandboxtemplates.extensions.agents.x-k8s.io", "default", "", False),
    ("create", "clusterroles.rbac.authorization.k8s.io", "", "", False),
    ("create", "rolebindings.rbac.authorization.k8s.io", SYSTEM_NS, "", False),
    ("impersonate", "serviceaccounts", SYSTEM_NS, "", False),
    ("create", "pods", "default", "exec", False),
    ("update", "pods", "default", "", False),
    ("update", "sandboxes.agents.x-k8s.io", "default", "status", False),
    ("create", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "", False),
    # the autoscaler writes a pool through /scale only, and nothing of an autoscaler but status
    ("patch", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "", False),
    ("update", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "", False),
    ("update", "sandboxwarmpools.extensions.agents.x-k8s.io", "default", "scale", False),
    ("patch", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", "default", "", False),
    ("create", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", "default", "", False),
    ("delete", "sandboxtemplates.extensions.agents.x-k8s.io", "default", "", False),
    ("create", "sandboxclaims.extensions.agents.x-k8s.io", "default", "", False),
    ("update", "sandboxclaims.extensions.agents.x-k8s.io", "default", "", False),
    ("deletecollection", "sandboxclaims.extensions.agents.x-k8s.io", "default", "", False),
    ("create", "events", "default", "", False),
    ("get", f"leases.coordination.k8s.io/{LEASE}", "kube-system", "", False),
    ("update", "leases.coordination.k8s.io/someone-else", SYSTEM_NS, "", False),
    ("delete", f"leases.coordination.k8s.io/{LEASE}", SYSTEM_NS, "", False),
    ("list", "nodes", "", "", False),
    ("delete", "namespaces", "", "", False),
]


@pytest.mark.parametrize(("verb", "resource", "ns", "sub", "allowed"), ACCESS)
def test_the_service_account_can_do_exactly_what_the_controllers_need(
    cluster: DevCluster, installed: None, verb: str, resource: str, ns: str, sub: str, allowed: bool
) -> None:
    args = ["auth", "can-i", verb, resource, f"--as={SA_USER}"]
    args += [f"-n={ns}"] if ns else []
    args += [f"--subresource={sub}"] if sub else []
    result = cluster.kubectl(*args, check=False)
    assert result.stdout.strip() == ("yes" if allowed else "no"), (args, result)


def test_the_token_is_refused_secrets_and_cluster_roles(
    cluster: DevCluster, sa_kubeconfig: Path
) -> None:
    def as_sa(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(cluster.kubectl_path), f"--kubeconfig={sa_kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    assert as_sa("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == SA_USER
    assert as_sa("auth", "can-i", "get", "secrets", "-A").stdout.strip() == "no"
    listed = as_sa("get", "secrets", "-n", SYSTEM_NS)
    assert listed.returncode != 0 and "Forbidden" in listed.stderr, listed
    created = as_sa("create", "clusterrole", "sneaky", "--verb=get", "--resource=secrets")
    assert created.returncode != 0 and "Forbidden" in created.stderr, created
    assert get_or_none(cluster, "/apis/rbac.authorization.k8s.io/v1/clusterroles/sneaky") is None


@pytest.mark.parametrize(
    ("role", "verb", "resource", "allowed"),
    [
        ("edit", "create", "sandboxclaims.extensions.agents.x-k8s.io", True),
        ("edit", "delete", "sandboxclaims.extensions.agents.x-k8s.io", True),
        ("edit", "get", "sandboxes.agents.x-k8s.io", True),
        ("edit", "watch", "sandboxes.agents.x-k8s.io", True),
        ("edit", "list", "sandboxwarmpools.extensions.agents.x-k8s.io", True),
        ("edit", "delete", "sandboxes.agents.x-k8s.io", False),
        ("edit", "create", "sandboxwarmpools.extensions.agents.x-k8s.io", False),
        ("view", "get", "sandboxclaims.extensions.agents.x-k8s.io", True),
        ("view", "list", "sandboxes.agents.x-k8s.io", True),
        ("view", "create", "sandboxclaims.extensions.agents.x-k8s.io", False),
        ("view", "get", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", True),
        ("edit", "list", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", True),
        ("edit", "create", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", False),
    ],
)
def test_namespace_users_of_the_builtin_roles_may_claim_and_read_sandboxes(
    cluster: DevCluster, installed: None, role: str, verb: str, resource: str, allowed: bool
) -> None:
    """The opt-in component deploy/aggregate-roles/ (not in deploy/kustomization.yaml, as
    upstream ships no such roles) aggregates into the built-in edit/admin and view ClusterRoles:
    someone bound to "edit" in a namespace creates claims and reads sandboxes, without touching
    sandboxes."""
    user = f"{role}-user"
    ns = "default"
    binding = f"agent-sandbox-test-{role}"
    if (
        get_or_none(
            cluster, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/{binding}"
        )
        is None
    ):
        cluster.api(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        )

    def answer() -> str | None:
        out = cluster.kubectl(
            "auth", "can-i", verb, resource, f"--as={user}", f"-n={ns}", check=False
        )
        got = out.stdout.strip()
        return got if got == ("yes" if allowed else "no") else None

    eventually_sync(answer, within=15, what=f"{user} {verb} {resource} -> {allowed}")
