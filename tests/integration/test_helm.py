"""deploy/helm/agent-sandbox: the chart renders the kustomize install's objects, its RBAC is the
same, it takes upstream v1.0.1's values file (object names as upstream's chart renders them, each
value mapped onto ours), the API server accepts it, `helm upgrade` from the previous chart version
applies a changed CRD, and the controller serves claims with the args of either Deployment. The
upgrade from upstream's chart and back is tests/integration/test_helm_upstream.py.

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

CHART = DEPLOY / "helm" / "agent-sandbox"
NETWORK_POLICY_COMPONENT = DEPLOY / "network-policy"
AGGREGATE_ROLES_COMPONENT = DEPLOY / "aggregate-roles"
MONITORING = DEPLOY / "monitoring"
PREVIOUS = Path(__file__).parent / "testdata" / "helm-previous"
WARMPOOL_CRD = "extensions.agents.x-k8s.io_sandboxwarmpools.yaml"
RELEASE = "asc"
# Where the releases are recorded: the chart makes its Namespace (namespace.create, as upstream's),
# so the release lives elsewhere, as `helm install agent-sandbox <chart>` does by default.
RELEASE_NS = "default"
# `helm template` assumes a newer Kubernetes than the chart's kubeVersion allows: the tested one.
KUBE_VERSION = next(
    line.split("=", 1)[1].strip()
    for line in (ROOT / "hack" / "controlplane" / "versions.env").read_text().splitlines()
    if line.startswith("KUBERNETES_VERSION=")
)
CHART_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
UPSTREAM_IMAGE = "registry.k8s.io/agent-sandbox/agent-sandbox-controller"
# Labels the chart adds to every object, on top of the kustomize install's `app` label.
HELM_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
# Flags rendered from a value of their own (the rest: `--<kebab>=<value>` of `controller.<name>`),
# and flags a Deployment never passes.
DEDICATED = {
    "leader-elect": "controller.leaderElect",
    "leader-election-namespace": "controller.leaderElectionNamespace",
    "extensions": "controller.extensions",
    "metrics-bind-address": "metrics.enabled / metrics.port",
    "health-probe-bind-address": "health.port",
    "enable-tracing": "controller.enableTracing",
}
DEDICATED_KEYS = {v.split(".", 1)[1] for v in DEDICATED.values() if v.startswith("controller.")}
DEDICATED_KEYS |= {"extraArgs"}
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
def rendered_text(
    home: Path, *values: str, chart: Path = CHART, files: tuple[Path, ...] = ()
) -> str:
    sets = [a for v in values for a in ("--set", v)]
    sets += [a for f in files for a in ("-f", str(f))]
    return helm(
        "template",
        RELEASE,
        str(chart),
        *("--namespace", RELEASE_NS, "--kube-version", KUBE_VERSION, "--include-crds"),
        *sets,
        home=home,
    ).stdout


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
    assert set(helm_docs) == set(kust)
    for key, obj in helm_docs.items():
        if key[0] != "CustomResourceDefinition":  # those have no labels in deploy/crds
            assert without_helm_labels(obj) == without_helm_labels(kust[key]), key
        assert obj["metadata"].get("namespace") == kust[key]["metadata"].get("namespace"), key
    # the CRDs are deploy/crds' own, and they and the Namespace are marked to outlive the release
    for key, obj in helm_docs.items():
        if key[0] in ("CustomResourceDefinition", "Namespace"):
            assert obj["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}, key
        if key[0] == "CustomResourceDefinition":
            assert obj["spec"] == kust[key]["spec"], key
    # the same Service and the same pod (less Helm's labels on it)
    assert helm_docs["Service", SA]["spec"] == kust["Service", SA]["spec"]
    ours, theirs = helm_docs["Deployment", SA]["spec"], kust["Deployment", SA]["spec"]
    assert ours["replicas"] == theirs["replicas"]
    assert ours["template"]["spec"] == theirs["template"]["spec"]
    # The selector (immutable) is upstream's chart's when no Deployment is there (as here: `helm
    # template` looks nothing up); the pod carries the kustomize install's too, and an install
    # over a kustomize one keeps its selector (test_helm_takes_over_a_kustomize_install).
    assert ours["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "agent-sandbox",
            "app.kubernetes.io/instance": RELEASE,
        }
    }
    labels = ours["template"]["metadata"]["labels"]
    assert theirs["selector"]["matchLabels"].items() <= labels.items()
    assert ours["selector"]["matchLabels"].items() <= labels.items()


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
    off = by_key(
        render(home, "controller.extensions=false", "metrics.enabled=false", "crds.install=false")
    )
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
            "metrics.serviceMonitor.additionalLabels.release=prom",
            "image.digest=sha256:" + "0" * 64,
            "controller.enableTracing=true",
            "crds.keep=false",
            "namespace.keep=false",
            "replicaCount=2",
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
    assert "annotations" not in monitored["Namespace", SYSTEM_NS]["metadata"]


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
    two = by_key(render(home, "replicaCount=2"))["PodDisruptionBudget", SA]
    assert two["apiVersion"] == "policy/v1"
    assert two["metadata"]["namespace"] == SYSTEM_NS
    assert two["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app": SA}}}
    off = by_key(render(home, "replicaCount=2", "podDisruptionBudget.enabled=false"))
    assert not [k for k in off if k[0] == "PodDisruptionBudget"]
    three = by_key(render(home, "replicaCount=3", "podDisruptionBudget.maxUnavailable=2"))
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
        for name in values["controller"]
        if name not in DEDICATED_KEYS
    }
    assert set(kebab) | set(DEDICATED) | NOT_A_VALUE == set(fs.flags), (
        "values.yaml `controller:` must name every flag of agent-sandbox-controller: "
        f"missing {set(fs.flags) - set(kebab) - set(DEDICATED) - NOT_A_VALUE}, "
        f"unknown {set(kebab) - set(fs.flags)}"
    )
    assert all(values["controller"][n] is None for n in kebab.values()), "null: binary default"
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
        f"controller.{k}={v}" if not isinstance(v, bool) else f"controller.{k}={str(v).lower()}"
        for k, v in chosen.items()
    ]
    sets += ["controller.leaderElect=false", "controller.leaderElectionNamespace=elsewhere"]
    sets += ["metrics.port=9090", "health.port=9091", "controller.enableTracing=true"]
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
    """values.schema.json: each `controller:` flag has the flag's type (or null), so helm refuses
    a wrong value at install time instead of the pod exiting 1 at start."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    fs = build_flagset()
    # `--set x=2.5` passes a string: a decimal flag takes a number or a numeric string
    want = {"bool": ["boolean"], "int": ["integer"], "float": ["number", "string"]}
    props = schema["properties"]["controller"]["properties"]
    assert set(props) == set(yaml.safe_load((CHART / "values.yaml").read_text())["controller"])
    for name, prop in props.items():
        if name in DEDICATED_KEYS:
            continue
        flag = fs.flags["".join(f"-{c.lower()}" if c.isupper() else c for c in name)]
        assert prop["type"] == [*want.get(flag.kind, ["string"]), "null"], name
    for bad, message in (
        ("controller.kubeApiQps=fast", "does not match pattern"),
        ("controller.kubeApiBurst=many", "want null or integer"),
        ("controller.sandboxWarmPoolReplenishDelay=5x", "does not match pattern"),
        ("controller.noSuchFlag=1", "additional properties 'noSuchFlag' not allowed"),
        ("metrics.port=0", "minimum"),
    ):
        result = helm(
            "template",
            RELEASE,
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            bad,
            home=home,
            check=False,
        )
        assert result.returncode != 0 and message in result.stderr, (bad, result.stderr)


# ------------------------------------------------------------------------------ upstream's values
def upstream_chart(upstream: Path) -> Path:
    return upstream / "helm"


def objects(docs: list[dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs}


def upstream_render(
    home: Path, upstream: Path, *values: str, files: tuple[Path, ...] = (), tag: bool = True
) -> Any:
    """Upstream's chart, which requires image.tag (``tag``: set it, to v1.0.1)."""
    tags = ("image.tag=v1.0.1",) if tag else ()
    return docs_of(rendered_text(home, *tags, *values, chart=upstream_chart(upstream), files=files))


# Ours and not upstream's: the Role for the Lease (upstream grants leases cluster-wide) and our
# own CRD.
OURS_ONLY = {
    ("Role", "agent-sandbox-controller-leader-election", SYSTEM_NS),
    ("RoleBinding", "agent-sandbox-controller-leader-election", SYSTEM_NS),
    ("CustomResourceDefinition", "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev", None),
}


@pytest.mark.parametrize("extensions", ["false", "true"])
def test_upstreams_values_file_renders_the_objects_upstreams_chart_renders(
    home: Path, upstream: Path, extensions: str
) -> None:
    """Upstream v1.0.1's own values.yaml, unchanged (with and without extensions): our chart
    renders every object upstream's chart renders, with the same kind, name and namespace (so
    that `helm upgrade` from it replaces nothing), the same Deployment selector, and only our
    leader-election Role and CRD besides."""
    values = upstream_chart(upstream) / "values.yaml"
    theirs = upstream_render(home, upstream, f"controller.extensions={extensions}", files=(values,))
    ours = docs_of(rendered_text(home, f"controller.extensions={extensions}", files=(values,)))
    assert objects(ours) - objects(theirs) == OURS_ONLY
    # Upstream's chart makes the extensions ClusterRole even without extensions (unbound); ours
    # does not: the one deliberate difference in names (docs/deploy.md).
    unbound = {("ClusterRole", "agent-sandbox-controller-extensions", None)}
    assert objects(theirs) - objects(ours) == (unbound if extensions == "false" else set())
    assert ("Namespace", SYSTEM_NS, None) in objects(ours)
    ours_by, theirs_by = by_key(ours), by_key(theirs)
    assert (
        ours_by["Deployment", SA]["spec"]["selector"]
        == theirs_by["Deployment", SA]["spec"]["selector"]
    )
    args = container(ours)["args"]
    assert ("--extensions" in args) is (extensions == "true")
    # the values file names upstream's image, and the chart uses it as given (with our tag)
    assert container(ours)["image"].startswith(UPSTREAM_IMAGE + ":")
    # its null security contexts leave ours restricted, not none
    pod = pod_spec(ours)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container(ours)["securityContext"]["readOnlyRootFilesystem"] is True


def test_a_customised_upstream_values_file_maps_each_value_onto_ours(
    home: Path, upstream: Path, tmp_path: Path
) -> None:
    """An upstream-style values file setting every key upstream's chart has: each value lands
    where upstream's chart puts it (the flags parse to the same values with our flag parser),
    and the object names and namespaces stay upstream's."""
    values = yaml.safe_load((upstream_chart(upstream) / "values.yaml").read_text())
    security = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    values |= {
        "namespace": {"create": True, "name": "sandboxes-system"},
        "image": {"repository": "example.com/ours", "tag": "v9", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "creds"}],
        "replicaCount": 2,
        "podAnnotations": {"team/owner": "platform"},
        "podLabels": {"team": "platform"},
        "controller": {
            "clusterDomain": "corp.local",
            "leaderElect": False,
            "leaderElectionNamespace": "leases",
            "extensions": True,
            "enableTracing": True,
            "enablePprof": True,
            "enablePprofDebug": False,
            "pprofBlockProfileRate": 5,
            "pprofMutexProfileFraction": 3,
            "kubeApiQps": 50.5,
            "kubeApiBurst": 80,
            "sandboxConcurrentWorkers": 7,
            "sandboxClaimConcurrentWorkers": 6,
            "sandboxWarmPoolConcurrentWorkers": 5,
            "sandboxTemplateConcurrentWorkers": 4,
            "sandboxWarmPoolMaxBatchSize": 30,
            "sandboxWarmPoolReadinessGracePeriod": "2m",
            "sandboxWarmPoolUnschedulableRecheckInterval": "45s",
            "enableWarmPoolEviction": False,
            "extraArgs": ["--zap-log-level=debug"],
        },
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["x"]}]}
                    ]
                }
            }
        },
        "podSecurityContext": {**security, "fsGroup": 2000},
        "containerSecurityContext": {**security, "allowPrivilegeEscalation": False},
        "service": {"name": "sandbox-metrics"},
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "additionalLabels": {"release": "prom"},
                "interval": "15s",
                "scrapeTimeout": "5s",
            },
            "prometheusRule": {
                "enabled": True,
                "additionalLabels": {"release": "prom"},
                "additionalGroups": [
                    {"name": "mine", "rules": [{"alert": "Mine", "expr": "vector(1) > 2"}]}
                ],
            },
        },
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    theirs = upstream_render(home, upstream, files=(path,), tag=False)
    ours = docs_of(rendered_text(home, files=(path,)))
    ns = "sandboxes-system"
    ours_only = {(k, n, ns if s else None) for k, n, s in OURS_ONLY}
    # the leader-election Role goes to the Lease's namespace, as the flag says
    ours_only = {(k, n, "leases" if k in ("Role", "RoleBinding") else s) for k, n, s in ours_only}
    # and, with two replicas, our PodDisruptionBudget (podDisruptionBudget.enabled, on)
    ours_only |= {("PodDisruptionBudget", SA, ns)}
    assert objects(ours) - objects(theirs) == ours_only
    assert objects(theirs) <= objects(ours)
    ours_by, theirs_by = by_key(ours), by_key(theirs)
    # every flag upstream's chart passes parses to the same value from our args
    fs = build_flagset()
    want, rest = fs.parse(container(theirs)["args"])
    got, our_rest = fs.parse(container(ours)["args"])
    assert rest == our_rest == []
    passed = {a.split("=", 1)[0].lstrip("-") for a in container(theirs)["args"]}
    assert len(passed) >= 20
    for flag in passed:
        assert got[flag] == want[flag], flag
    # the pod's settings as upstream's chart places them
    for key in ("image", "imagePullPolicy", "securityContext"):
        assert container(ours)[key] == container(theirs)[key], key
    # Helm merges a values file's map into the chart's: requests as given, and our limits stay
    # (docs/deploy.md; `limits: null` drops them)
    resources = container(ours)["resources"]
    assert resources["requests"] == container(theirs)["resources"]["requests"]
    assert resources["limits"] == {"cpu": "1", "memory": "512Mi"}
    ours_pod, theirs_pod = pod_spec(ours), pod_spec(theirs)
    for key in ("imagePullSecrets", "nodeSelector", "tolerations", "affinity", "securityContext"):
        assert ours_pod[key] == theirs_pod[key], key
    deployment, upstream_deployment = ours_by["Deployment", SA], theirs_by["Deployment", SA]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"] == upstream_deployment["spec"]["selector"]
    meta, upstream_meta = (
        deployment["spec"]["template"]["metadata"],
        upstream_deployment["spec"]["template"]["metadata"],
    )
    assert meta["annotations"] == upstream_meta["annotations"]
    assert upstream_meta["labels"].items() <= meta["labels"].items()
    # monitoring: the ServiceMonitor's settings, our alerts plus the added group
    monitor = ours_by["ServiceMonitor", SA]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "5s")
    rule = ours_by["PrometheusRule", SA]
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"]["groups"][-1]["name"] == "mine"
    assert ours_by["Service", "sandbox-metrics"]["metadata"]["namespace"] == ns


def test_the_alerts_and_the_dashboard_are_opt_in_and_deploy_monitorings_own(home: Path) -> None:
    """metrics.prometheusRule and metrics.grafanaDashboard (off by default) render the
    PrometheusRule of deploy/monitoring/alerts.yaml and a ConfigMap holding
    deploy/monitoring/grafana-dashboard.json with Grafana's sidecar label."""
    kinds = {k[0] for k in by_key(render(home))}
    assert not kinds & {"PrometheusRule", "ConfigMap"}
    on = by_key(
        render(
            home,
            "metrics.prometheusRule.enabled=true",
            "metrics.grafanaDashboard.enabled=true",
            "metrics.grafanaDashboard.namespace=monitoring",
            "metrics.grafanaDashboard.annotations.grafana_folder=Sandboxes",
        )
    )
    (alerts,) = docs_of((MONITORING / "alerts.yaml").read_text())
    rule = on["PrometheusRule", SA]
    assert rule["spec"] == alerts["spec"]
    assert rule["metadata"]["namespace"] == SYSTEM_NS
    board = on["ConfigMap", "agent-sandbox-controller-dashboard"]
    assert board["metadata"]["namespace"] == "monitoring"
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["annotations"] == {"grafana_folder": "Sandboxes"}
    (text,) = board["data"].values()
    assert json.loads(text) == json.loads((MONITORING / "grafana-dashboard.json").read_text())


def test_the_aggregation_into_the_builtin_roles_is_opt_in_as_in_kustomize(home: Path) -> None:
    """No agent-sandbox-edit/-view by default (upstream ships none); with
    rbac.aggregateToDefaultRoles they are the opt-in kustomize component's."""
    names = {"agent-sandbox-edit", "agent-sandbox-view"}
    assert not names & {k[1] for k in by_key(render(home))}
    assert not names & {k[1] for k in by_key(kustomize_docs())}
    on = by_key(render(home, "rbac.aggregateToDefaultRoles=true"))
    component = by_key(docs_of((AGGREGATE_ROLES_COMPONENT / "aggregate-roles.yaml").read_text()))
    assert set(component) == {("ClusterRole", n) for n in names}
    for key, obj in component.items():
        assert rbac_view(on[key]) == rbac_view(obj), key


def test_make_chart_packages_it_with_the_version_and_image_given(
    home: Path, tmp_path: Path
) -> None:
    """`make chart VERSION=<v> IMAGE=<repo> DIST=<dir>` writes <dir>/agent-sandbox-<v>.tgz: the
    chart's version and appVersion are <v> (a SemVer pre-release taken as is), its default image
    <repo>:<v>; without VERSION the version is pyproject.toml's."""
    image = "registry.example.com/team/agent-sandbox-controller"
    run = ["make", "--no-print-directory", "-C", str(ROOT), "chart", f"DIST={tmp_path}"]
    subprocess.run([*run, "VERSION=1.2.3-rc.1", f"IMAGE={image}"], check=True, capture_output=True)
    tgz = tmp_path / "agent-sandbox-1.2.3-rc.1.tgz"
    docs = docs_of(
        helm("template", RELEASE, str(tgz), "--kube-version", KUBE_VERSION, home=home).stdout
    )
    assert container(docs)["image"] == f"{image}:1.2.3-rc.1"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == "agent-sandbox-1.2.3-rc.1"
    subprocess.run(run, check=True, capture_output=True)
    project = next(
        line.split('"')[1]
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert (tmp_path / f"agent-sandbox-{project}.tgz").is_file()


# ------------------------------------------------------------------------------ a real API server
def previous_chart(into: Path) -> Path:
    """Chart version 0.1.0: this chart with the SandboxWarmPool CRD from before commit bf2bc15."""
    dst = into / "agent-sandbox"
    shutil.copytree(CHART, dst)
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
    """A private control plane with no CRDs and no agent-sandbox-system namespace (the chart
    makes both)."""
    cl = DevCluster(tmp_path_factory.mktemp("helm") / "cluster", nodes=1, bin_dir=find_bin_dir())
    cl.start()
    try:
        yield cl
    finally:
        cl.stop(keep_logs=False)


@pytest.fixture(scope="module")
def upgraded(
    helm_cluster: DevCluster, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """`helm install` of chart 0.1.0, then `helm upgrade` to this one; what was seen between."""
    cl = helm_cluster
    kube = ["--kubeconfig", str(cl.kubeconfig), "--namespace", RELEASE_NS]
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
    """``kubectl <how>`` of ``text`` with ``--dry-run=server`` (server-side apply by default,
    taking the fields of the installed release: a dry run changes nothing)."""
    return subprocess.run(
        [
            str(cluster.kubectl_path),
            f"--kubeconfig={cluster.kubeconfig}",
            *(how or ("apply", "--server-side", "--force-conflicts")),
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
    helm_cluster: DevCluster, upgraded: dict[str, Any], home: Path
) -> None:
    """After the install (the chart made the Namespace, which a dry run cannot)."""
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
    helm_cluster: DevCluster, upgraded: dict[str, Any], home: Path
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
        "replicaCount=2",
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
        (1, "agent-sandbox-0.1.0", "superseded"),
        (2, f"agent-sandbox-{CHART_VERSION}", "deployed"),
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
    kube = ["--kubeconfig", str(helm_cluster.kubeconfig), "--namespace", RELEASE_NS]
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
    kube = ["--kubeconfig", str(helm_cluster.kubeconfig), "--namespace", RELEASE_NS]
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
    # the kustomize Deployment's selector (immutable) is kept: the chart looked it up
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": SA}}
    status = yaml.safe_load(helm("status", RELEASE, *kube, "-o", "yaml", home=home).stdout)
    assert status["info"]["status"] == "deployed"
