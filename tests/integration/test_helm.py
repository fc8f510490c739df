"""deploy/helm/agent-sandbox-controller: the chart renders the kustomize install's objects, its
RBAC is the same, the API server accepts it, `helm upgrade` from the previous chart version
applies a changed CRD, and the controller serves claims with the args of either Deployment.

helm is built from its Go module by hack/controlplane/build-helm.sh (``make controlplane``) and
cached beside the control plane binaries. The install and upgrade run against a small private
control plane started without CRDs (the chart installs them), so the session cluster's CRDs are
never touched.

The previous chart version (0.1.0) is this chart with the SandboxWarmPool CRD as it was before
commit bf2bc15 (``spec.replicas`` required, no default; testdata/helm-previous/). It is built in
a temporary directory by :func:`previous_chart`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsandbox.cli.options import build_flagset
from agentsandbox.devcluster.binaries import find_bin_dir
from agentsandbox.devcluster.cluster import DevCluster, free_port

from .test_deploy import (
    DEPLOY,
    ROOT,
    SA,
    SYSTEM_NS,
    controller_with_token,
    local_args,
    serve_warm_and_cold,
    token_kubeconfig,
)

CHART = DEPLOY / "helm" / "agent-sandbox-controller"
NETWORK_POLICY_COMPONENT = DEPLOY / "network-policy"
PREVIOUS = Path(__file__).parent / "testdata" / "helm-previous"
WARMPOOL_CRD = "extensions.agents.x-k8s.io_sandboxwarmpools.yaml"
RELEASE = "asc"
# Labels the chart adds to every object, on top of the kustomize install's `app` label.
HELM_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
# Flags with a value of their own (not under `flags:`), and flags a Deployment never passes.
DEDICATED = {
    "leader-elect": "leaderElection.enabled",
    "leader-election-namespace": "leaderElection.namespace",
    "extensions": "extensions",
    "metrics-bind-address": "metrics.enabled / metrics.port",
    "health-probe-bind-address": "health.port",
    "enable-tracing": "tracing.enabled",
}
NOT_A_VALUE = {"kubeconfig", "version"}


@functools.cache
def helm_path() -> Path:
    """The cached helm binary (built first if this machine has none yet)."""
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "controlplane" / "build-helm.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    return Path(out.strip().splitlines()[-1]) / "helm"


def helm(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    # helm's own cache/config/data under the test's directory, not the user's home
    env |= {f"HELM_{d}_HOME": str(home / d.lower()) for d in ("CACHE", "CONFIG", "DATA")}
    result = subprocess.run(
        [str(helm_path()), *args], capture_output=True, text=True, env=env, check=False
    )
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # 800 kB of CRDs: libyaml if present


def docs_of(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=LOADER) if d]


@functools.cache
def rendered_text(home: Path, *values: str) -> str:
    sets = [a for v in values for a in ("--set", v)]
    return helm("template", RELEASE, str(CHART), "--namespace", SYSTEM_NS, *sets, home=home).stdout


def render(home: Path, *values: str) -> list[dict[str, Any]]:
    return docs_of(rendered_text(home, *values))


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


@functools.cache
def kubectl_path() -> Path:
    return find_bin_dir() / "kubectl"


@functools.cache
def kustomize_text() -> str:
    return subprocess.run(
        [str(kubectl_path()), "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True
    ).stdout


def kustomize_docs() -> list[dict[str, Any]]:
    return docs_of(kustomize_text())


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = {k: v for k, v in (obj["metadata"].get("labels") or {}).items()}
    return {k: v for k, v in labels.items() if k not in HELM_LABELS}


def rbac_view(obj: dict[str, Any]) -> dict[str, Any]:
    """What an RBAC object grants, and to whom: everything but Helm's bookkeeping labels."""
    return {
        "namespace": obj["metadata"].get("namespace"),
        "labels": without_helm_labels(obj),
        "annotations": obj["metadata"].get("annotations") or {},
        **{k: obj[k] for k in ("rules", "roleRef", "subjects", "aggregationRule") if k in obj},
    }


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


# ------------------------------------------------------------------------------ rendering
def test_the_chart_renders_the_kustomize_objects(home: Path) -> None:
    helm_docs = by_key(render(home))
    kust = by_key(kustomize_docs())
    # the same objects, less the Namespace (helm install --create-namespace, docs/deploy.md)
    assert set(helm_docs) == set(kust) - {("Namespace", SYSTEM_NS)}
    for key, obj in helm_docs.items():
        if key[0] != "CustomResourceDefinition":  # those have no labels in deploy/crds
            assert without_helm_labels(obj) == without_helm_labels(kust[key]), key
        assert obj["metadata"].get("namespace") == kust[key]["metadata"].get("namespace"), key
    # the CRDs are deploy/crds' own, marked to outlive the release
    for key, obj in helm_docs.items():
        if key[0] == "CustomResourceDefinition":
            assert obj["spec"] == kust[key]["spec"], key
            assert obj["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    # the same Service and the same pod (less Helm's labels on it)
    assert helm_docs["Service", SA]["spec"] == kust["Service", SA]["spec"]
    ours, theirs = helm_docs["Deployment", SA]["spec"], kust["Deployment", SA]["spec"]
    assert ours["replicas"] == theirs["replicas"]
    assert ours["selector"] == theirs["selector"]  # immutable: a kustomize install can move over
    assert ours["template"]["spec"] == theirs["template"]["spec"]


def test_the_chart_mounts_the_optional_config_map_of_the_claim_label_domains(home: Path) -> None:
    """Claim review #10: the controller reads the label domains claims may use from
    /etc/sandbox-config/allowed-label-domains, the ``allowed-label-domains`` key of the
    ``agent-sandbox-config`` ConfigMap in its namespace; the chart mounts that ConfigMap there,
    read-only and optional (no ConfigMap: the pod starts, and the default applies)."""
    (deployment,) = [d for d in render(home) if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/etc/sandbox-config"]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"] == {"name": "agent-sandbox-config", "optional": True}


def test_the_rbac_equals_the_kustomize_install(home: Path) -> None:
    ours = {k: rbac_view(o) for k, o in by_key(render(home)).items() if k[0] in RBAC_KINDS}
    theirs = {k: rbac_view(o) for k, o in by_key(kustomize_docs()).items() if k[0] in RBAC_KINDS}
    assert set(ours) == set(theirs)
    for key in theirs:
        assert ours[key] == theirs[key], key


def test_values_switch_the_optional_parts(home: Path) -> None:
    off = by_key(render(home, "extensions=false", "metrics.enabled=false", "crds.install=false"))
    assert ("ClusterRole", "agent-sandbox-controller-extensions") not in off
    assert ("ClusterRoleBinding", "agent-sandbox-controller-extensions") not in off
    assert ("ClusterRole", "agent-sandbox-controller") in off
    assert ("Service", SA) not in off
    assert not [k for k in off if k[0] == "CustomResourceDefinition"]
    args = container(list(off.values()))["args"]
    assert "--extensions" not in args and "--metrics-bind-address=0" in args

    monitored = by_key(
        render(
            home,
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.labels.release=prom",
            "image.digest=sha256:" + "0" * 64,
            "tracing.enabled=true",
            "crds.keep=false",
            "replicas=2",
        )
    )
    monitor = monitored["ServiceMonitor", SA]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"] == {"matchLabels": {"app": SA}}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    c = container(list(monitored.values()))
    assert c["image"] == "agentsandbox/agent-sandbox-controller@sha256:" + "0" * 64
    assert "--enable-tracing" in c["args"]
    assert monitored["Deployment", SA]["spec"]["replicas"] == 2
    crd = monitored["CustomResourceDefinition", "sandboxes.agents.x-k8s.io"]
    assert "annotations" not in crd["metadata"]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    return dict(deployment["spec"]["template"]["spec"])


def test_the_network_policy_is_opt_in_and_admits_only_the_metrics_and_probe_ports(
    home: Path,
) -> None:
    """Security review note 14: ``networkPolicy.enabled`` (off by default, as the kustomize
    install leaves it out) renders the kustomize component's NetworkPolicy: ingress only to the
    metrics and probe ports, egress only to the API server's usual ports (443, 6443) at any
    address. Values restrict the ingress sources and the API server's addresses, change its
    ports, and add DNS and other egress rules."""
    assert not [k for k in by_key(render(home)) if k[0] == "NetworkPolicy"]
    (component,) = docs_of((NETWORK_POLICY_COMPONENT / "networkpolicy.yaml").read_text())
    policy = by_key(render(home, "networkPolicy.enabled=true"))["NetworkPolicy", SA]
    assert policy["spec"] == component["spec"]
    assert without_helm_labels(policy) == component["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == component["metadata"]["namespace"] == SYSTEM_NS
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app": SA}}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 8081}]}
    ]
    assert policy["spec"]["egress"] == [
        {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    ]

    custom = by_key(
        render(
            home,
            "networkPolicy.enabled=true",
            "metrics.port=9090",
            "health.port=9091",
            "networkPolicy.ingress.from[0].namespaceSelector.matchLabels.team=monitoring",
            "networkPolicy.egress.apiServer.cidrs[0]=10.0.0.0/24",
            "networkPolicy.egress.apiServer.ports={8443}",
            "networkPolicy.egress.dns=true",
            "networkPolicy.egress.extra[0].ports[0].port=4318",
        )
    )["NetworkPolicy", SA]["spec"]
    assert custom["ingress"] == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
            "ports": [{"protocol": "TCP", "port": 9090}, {"protocol": "TCP", "port": 9091}],
        }
    ]
    assert custom["egress"] == [
        {
            "to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
            "ports": [{"protocol": "TCP", "port": 8443}],
        },
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"ports": [{"port": 4318}]},
    ]
    # no metrics server: only the probe port is open
    quiet = by_key(render(home, "networkPolicy.enabled=true", "metrics.enabled=false"))
    assert quiet["NetworkPolicy", SA]["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8081}]}
    ]


def test_a_disruption_budget_is_made_only_for_more_than_one_replica(home: Path) -> None:
    """Security review note 14: with one replica a budget either blocks every node drain
    (minAvailable 1) or allows any eviction (maxUnavailable 1), so none is made; with two or
    more, ``maxUnavailable: 1`` makes a drain wait for the evicted pod's replacement to be Ready
    before taking the other, so a synced standby is always there. ``podDisruptionBudget.enabled``
    (on) turns it off, ``.maxUnavailable`` sets the number."""
    assert not [k for k in by_key(render(home)) if k[0] == "PodDisruptionBudget"]
    two = by_key(render(home, "replicas=2"))["PodDisruptionBudget", SA]
    assert two["apiVersion"] == "policy/v1"
    assert two["metadata"]["namespace"] == SYSTEM_NS
    assert two["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app": SA}}}
    off = by_key(render(home, "replicas=2", "podDisruptionBudget.enabled=false"))
    assert not [k for k in off if k[0] == "PodDisruptionBudget"]
    three = by_key(render(home, "replicas=3", "podDisruptionBudget.maxUnavailable=2"))
    assert three["PodDisruptionBudget", SA]["spec"]["maxUnavailable"] == 2


def test_the_priority_class_is_a_value_unset_by_default(home: Path) -> None:
    """Security review note 14: ``priorityClassName`` is empty by default (as the kustomize
    install and upstream's chart: the cluster's default priority), and set as given."""
    assert "priorityClassName" not in pod_spec(render(home))
    critical = pod_spec(render(home, "priorityClassName=system-cluster-critical"))
    assert critical["priorityClassName"] == "system-cluster-critical"


def test_every_controller_flag_is_a_value_and_renders_as_the_binary_parses_it(
    home: Path,
) -> None:
    fs = build_flagset()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    kebab = {
        "".join(f"-{ch.lower()}" if ch.isupper() else ch for ch in name): name
        for name in values["flags"]
    }
    assert set(kebab) | set(DEDICATED) | NOT_A_VALUE == set(fs.flags), (
        "values.yaml `flags:` must name every flag of agent-sandbox-controller: "
        f"missing {set(fs.flags) - set(kebab) - set(DEDICATED) - NOT_A_VALUE}, "
        f"unknown {set(kebab) - set(fs.flags)}"
    )
    assert all(v is None for v in values["flags"].values()), "null: the binary's default"
    # a value for every flag, none of them the default: the rendered args parse to exactly these
    chosen: dict[str, Any] = {}
    for flag, name in sorted(kebab.items()):
        kind, default = fs.flags[flag].kind, fs.flags[flag].default
        chosen[name] = {
            "bool": not default,
            "int": 1_000_000 if default != 1_000_000 else 7,
            "float": 2.5,
            "duration": "90s",
            "string": "json" if flag == "zap-encoder" else f"x-{flag}",
        }[kind]
    sets = [
        f"flags.{k}={v}" if not isinstance(v, bool) else f"flags.{k}={str(v).lower()}"
        for k, v in chosen.items()
    ]
    sets += ["leaderElection.enabled=false", "leaderElection.namespace=elsewhere"]
    sets += ["metrics.port=9090", "health.port=9091", "tracing.enabled=true"]
    args = container(render(home, *sets))["args"]
    parsed, rest = fs.parse(args)
    assert rest == []
    for flag, name in kebab.items():
        want = chosen[name] if fs.flags[flag].kind != "duration" else 90.0
        assert parsed[flag] == want, (flag, args)
    assert parsed["leader-elect"] is False
    assert parsed["leader-election-namespace"] == "elsewhere"
    assert parsed["metrics-bind-address"] == ":9090"
    assert parsed["health-probe-bind-address"] == ":9091"
    assert parsed["extensions"] is True and parsed["enable-tracing"] is True


def test_the_values_schema_types_every_flag_and_helm_enforces_it(home: Path) -> None:
    """values.schema.json: each `flags:` entry has the flag's type (or null), so helm refuses a
    wrong value at install time instead of the pod exiting 1 at start."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    fs = build_flagset()
    # `--set x=2.5` passes a string: a decimal flag takes a number or a numeric string
    want = {"bool": ["boolean"], "int": ["integer"], "float": ["number", "string"]}
    props = schema["properties"]["flags"]["properties"]
    assert set(props) == set(yaml.safe_load((CHART / "values.yaml").read_text())["flags"])
    for name, prop in props.items():
        flag = fs.flags["".join(f"-{c.lower()}" if c.isupper() else c for c in name)]
        assert prop["type"] == [*want.get(flag.kind, ["string"]), "null"], name
    for bad, message in (
        ("flags.kubeApiQps=fast", "does not match pattern"),
        ("flags.kubeApiBurst=many", "want null or integer"),
        ("flags.sandboxWarmPoolReplenishDelay=5x", "does not match pattern"),
        ("flags.noSuchFlag=1", "additional properties 'noSuchFlag' not allowed"),
        ("metrics.port=0", "minimum"),
    ):
        result = helm("template", RELEASE, str(CHART), "--set", bad, home=home, check=False)
        assert result.returncode != 0 and message in result.stderr, (bad, result.stderr)


# ------------------------------------------------------------------------------ a real API server
def previous_chart(into: Path) -> Path:
    """Chart version 0.1.0: this chart with the SandboxWarmPool CRD from before commit bf2bc15."""
    dst = into / "agent-sandbox-controller"
    shutil.copytree(CHART, dst, symlinks=False)  # files/crds (a link to deploy/crds) is copied
    shutil.copy(PREVIOUS / WARMPOOL_CRD, dst / "files" / "crds" / WARMPOOL_CRD)
    chart = yaml.safe_load((dst / "Chart.yaml").read_text())
    chart["version"] = "0.1.0"
    (dst / "Chart.yaml").write_text(yaml.safe_dump(chart))
    return dst


def warmpool_schema(cluster: DevCluster) -> dict[str, Any]:
    crd = cluster.api(
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        "sandboxwarmpools.extensions.agents.x-k8s.io",
    )
    (v1beta1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return dict(v1beta1["schema"]["openAPIV3Schema"]["properties"]["spec"])


def create_pool_without_replicas(
    cluster: DevCluster, name: str
) -> subprocess.CompletedProcess[str]:
    pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"sandboxTemplateRef": {"name": "none"}},
    }
    return subprocess.run(
        [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", "create", "-f", "-"],
        input=yaml.safe_dump(pool),
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def helm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A private control plane with no CRDs, and the namespace of deploy/namespace.yaml."""
    cl = DevCluster(tmp_path_factory.mktemp("helm") / "cluster", nodes=1, bin_dir=find_bin_dir())
    cl.start()
    try:
        cl.kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"))
        yield cl
    finally:
        cl.stop(keep_logs=False)


@pytest.fixture(scope="module")
def upgraded(
    helm_cluster: DevCluster, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """`helm install` of chart 0.1.0, then `helm upgrade` to this one; what was seen between."""
    cl = helm_cluster
    kube = ["--kubeconfig", str(cl.kubeconfig), "--namespace", SYSTEM_NS]
    old = previous_chart(tmp_path_factory.mktemp("previous"))
    helm("install", RELEASE, str(old), *kube, home=home)
    seen: dict[str, Any] = {"before": warmpool_schema(cl)}
    seen["rejected"] = create_pool_without_replicas(cl, "before")
    helm("upgrade", RELEASE, str(CHART), *kube, home=home)
    seen["after"] = warmpool_schema(cl)
    seen["accepted"] = create_pool_without_replicas(cl, "after")
    seen["history"] = yaml.safe_load(
        helm("history", RELEASE, *kube, "-o", "yaml", home=home).stdout
    )
    seen["manifest"] = docs_of(helm("get", "manifest", RELEASE, *kube, home=home).stdout)
    return seen


def server_dry_run(cluster: DevCluster, text: str, *how: str) -> subprocess.CompletedProcess[str]:
    """``kubectl <how>`` of ``text`` with ``--dry-run=server`` (server-side apply by default)."""
    return subprocess.run(
        [
            str(cluster.kubectl_path),
            f"--kubeconfig={cluster.kubeconfig}",
            *(how or ("apply", "--server-side")),
            "--dry-run=server",
            "-f",
            "-",
        ],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_server_accepts_the_rendered_chart_in_a_dry_run(
    helm_cluster: DevCluster, home: Path
) -> None:
    dry = server_dry_run(helm_cluster, rendered_text(home))
    assert dry.returncode == 0, dry.stderr
    for what in (
        "deployment.apps/agent-sandbox-controller",
        "service/agent-sandbox-controller",
        "clusterrole.rbac.authorization.k8s.io/agent-sandbox-controller-extensions",
        "role.rbac.authorization.k8s.io/agent-sandbox-controller-leader-election",
        "customresourcedefinition.apiextensions.k8s.io/sandboxes.agents.x-k8s.io",
    ):
        assert f"{what} serverside-applied (server dry run)" in dry.stdout, dry.stdout
    # the pod meets the namespace's "restricted" Pod Security Standard (warn label)
    assert "PodSecurity" not in dry.stderr, dry.stderr


def test_the_server_accepts_the_network_policy_the_budget_and_the_priority_class(
    helm_cluster: DevCluster, home: Path
) -> None:
    """Security review note 14: with the hardening values on (NetworkPolicy with restricted
    sources, an API server CIDR and DNS; two replicas, so a PodDisruptionBudget;
    ``system-cluster-critical``), a server-side dry run accepts the chart, and the pod the
    ReplicaSet would create gets that class's priority from the Priority admission plugin
    (allowed outside kube-system; a class that does not exist is refused, so the check is real)."""
    values = (
        "networkPolicy.enabled=true",
        "networkPolicy.ingress.from[0].namespaceSelector.matchLabels.team=monitoring",
        "networkPolicy.egress.apiServer.cidrs[0]=10.0.0.0/24",
        "networkPolicy.egress.dns=true",
        "replicas=2",
        "priorityClassName=system-cluster-critical",
    )
    dry = server_dry_run(helm_cluster, rendered_text(home, *values))
    assert dry.returncode == 0, dry.stderr
    for what in (
        "networkpolicy.networking.k8s.io/agent-sandbox-controller",
        "poddisruptionbudget.policy/agent-sandbox-controller",
        "deployment.apps/agent-sandbox-controller",
    ):
        assert f"{what} serverside-applied (server dry run)" in dry.stdout, dry.stdout
    assert "PodSecurity" not in dry.stderr, dry.stderr

    def pod_of(priority_class: str) -> subprocess.CompletedProcess[str]:
        spec = {**pod_spec(render(home, *values)), "priorityClassName": priority_class}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent-sandbox-controller-dry-run", "namespace": SYSTEM_NS},
            "spec": spec,
        }
        return server_dry_run(helm_cluster, json.dumps(pod), "create", "-o", "json")

    admitted = pod_of("system-cluster-critical")
    assert admitted.returncode == 0, admitted.stderr
    assert json.loads(admitted.stdout)["spec"]["priority"] == 2_000_000_000
    refused = pod_of("no-such-class")
    assert refused.returncode != 0
    assert "no PriorityClass with name no-such-class was found" in refused.stderr, refused.stderr


def test_helm_upgrade_from_the_previous_version_applies_the_crd_change(
    upgraded: dict[str, Any],
) -> None:
    before, after = upgraded["before"], upgraded["after"]
    assert "replicas" in before["required"] and "default" not in before["properties"]["replicas"]
    assert upgraded["rejected"].returncode != 0, upgraded["rejected"]
    assert "spec.replicas: Required value" in upgraded["rejected"].stderr
    assert "replicas" not in after["required"] and after["properties"]["replicas"]["default"] == 1
    assert upgraded["accepted"].returncode == 0, upgraded["accepted"].stderr
    revisions = [(r["revision"], r["chart"], r["status"]) for r in upgraded["history"]]
    assert revisions == [
        (1, "agent-sandbox-controller-0.1.0", "superseded"),
        (2, "agent-sandbox-controller-0.3.0", "deployed"),
    ]


@pytest.mark.parametrize("install", ["helm", "kustomize"])
def test_the_controller_serves_warm_and_cold_claims_with_the_deployment_args(
    install: str,
    helm_cluster: DevCluster,
    upgraded: dict[str, Any],
    tmp_path: Path,
) -> None:
    """The container args of the installed Helm release's Deployment, and of the kustomize
    install's, each run the controller under the release's ServiceAccount token (the two RBACs
    are equal, above) until it serves a warm and a cold claim with no request refused."""
    docs = upgraded["manifest"] if install == "helm" else kustomize_docs()
    args = container(docs)["args"]
    assert args[:4] == [
        "--leader-elect=true",
        "--extensions",
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=:8081",
    ]
    ns = f"claims-{install}"
    helm_cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    kubeconfig = token_kubeconfig(helm_cluster, tmp_path)
    log = tmp_path / "controller.log"
    run = local_args(args, free_port(), free_port())
    with controller_with_token(helm_cluster, kubeconfig, run, log) as alive:
        serve_warm_and_cold(helm_cluster, ns, alive, log)


def test_helm_uninstall_keeps_the_crds(
    helm_cluster: DevCluster, upgraded: dict[str, Any], home: Path
) -> None:
    """Runs last: the release goes, the CRDs (helm.sh/resource-policy: keep) and so the
    SandboxWarmPool made after the upgrade stay."""
    kube = ["--kubeconfig", str(helm_cluster.kubeconfig), "--namespace", SYSTEM_NS]
    helm("uninstall", RELEASE, *kube, "--wait", home=home)
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    names = {c["metadata"]["name"] for c in helm_cluster.api("GET", crds)["items"]}
    assert {
        "sandboxes.agents.x-k8s.io",
        "sandboxclaims.extensions.agents.x-k8s.io",
        "sandboxtemplates.extensions.agents.x-k8s.io",
        "sandboxwarmpools.extensions.agents.x-k8s.io",
    } <= names
    pools = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools"
    assert helm_cluster.api("GET", f"{pools}/after")["spec"]["replicas"] == 1
    roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    assert not [
        r
        for r in helm_cluster.api("GET", roles)["items"]
        if r["metadata"]["name"].startswith("agent-sandbox-controller")
    ]


def test_helm_takes_over_a_kustomize_install(
    helm_cluster: DevCluster, upgraded: dict[str, Any], home: Path
) -> None:
    """Runs after the uninstall: `kubectl apply -k deploy/`, then `helm install --take-ownership`
    adopts those objects in place (same names and selector), as docs/operations.md says."""
    kube = ["--kubeconfig", str(helm_cluster.kubeconfig), "--namespace", SYSTEM_NS]
    helm_cluster.kubectl("apply", "-k", str(DEPLOY))
    helm("install", RELEASE, str(CHART), *kube, "--take-ownership", home=home)
    deployment = helm_cluster.api(
        "GET", f"/apis/apps/v1/namespaces/{SYSTEM_NS}/deployments/agent-sandbox-controller"
    )
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert deployment["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    role = helm_cluster.api(
        "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/agent-sandbox-controller"
    )
    assert role["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    status = yaml.safe_load(helm("status", RELEASE, *kube, "-o", "yaml", home=home).stdout)
    assert status["info"]["status"] == "deployed"
