"""From upstream's chart to ours and back, on a private control plane: `helm install` of upstream
v1.0.1's chart (its module's helm/ directory, with controller.extensions=true), some objects of
every kind, then `helm upgrade <release> deploy/helm/agent-sandbox -f <upstream's values file>
--take-ownership`. Nothing is replaced: the Namespace, the CRDs and every template, pool, claim
and sandbox keep their UIDs; there is one controller Deployment (its selector unchanged); our
controller, run out of cluster with a token of the chart's ServiceAccount (the pods kwok runs are
not real), holds the Lease and serves the claims made before and after (so the chart's RBAC
suffices). Then `helm upgrade` back to upstream's chart keeps the CRDs and every object too.

With RELEASE_DIST set (`make release-check`), "our chart" is the release's packaged
``agent-sandbox-<version>.tgz`` there instead of deploy/helm/agent-sandbox.

About 30 s for the module (measured 29 s; every test under 15 s): a control plane of its own (the
upgrade needs one without CRDs, which the session cluster has), three helm releases, and the
controller filling two pools and serving three claims.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsandbox.devcluster.binaries import find_bin_dir
from agentsandbox.devcluster.cluster import DevCluster, free_port

from .test_deploy import (
    EXT,
    LEASE,
    SA,
    SANDBOXES,
    SYSTEM_NS,
    controller_with_token,
    get_if,
    get_or_none,
    local_args,
    ready,
    ready_replicas,
    serve_warm_and_cold,
    token_kubeconfig,
    waiter,
)
from .test_helm import CHART as SOURCE_CHART
from .test_helm import UPSTREAM_IMAGE, container, docs_of, helm

RELEASE = "agent-sandbox"  # the name upstream's README installs it under
RELEASE_NS = "default"
APPS = "apps"
CRDS = (
    "sandboxes.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
)
OUR_IMAGE = yaml.safe_load((SOURCE_CHART / "values.yaml").read_text())["image"]["repository"]


def chart_under_test() -> Path:
    """The release's packaged chart when RELEASE_DIST is set (exactly one there), else the
    chart's source directory."""
    release = os.environ.get("RELEASE_DIST")
    if not release:
        return SOURCE_CHART
    (tgz,) = Path(release).resolve().glob("agent-sandbox-*.tgz")
    return tgz


CHART = chart_under_test()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A private control plane with no CRDs (upstream's chart installs them)."""
    cl = DevCluster(tmp_path_factory.mktemp("up") / "cluster", nodes=1, bin_dir=find_bin_dir())
    cl.start()
    try:
        yield cl
    finally:
        cl.stop(keep_logs=False)


def kube(cluster: DevCluster) -> list[str]:
    return ["--kubeconfig", str(cluster.kubeconfig), "--namespace", RELEASE_NS]


def uids(cluster: DevCluster) -> dict[str, str]:
    """The UID of the Namespace, of each CRD and of every object in the apps namespace."""
    out = {
        "namespace": cluster.api("GET", f"/api/v1/namespaces/{SYSTEM_NS}")["metadata"]["uid"],
        "serviceaccount": cluster.api(
            "GET", f"/api/v1/namespaces/{SYSTEM_NS}/serviceaccounts/{SA}"
        )["metadata"]["uid"],
    }
    for crd in CRDS:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
        out[crd] = cluster.api("GET", path)["metadata"]["uid"]
    ext = EXT.format(ns=APPS)
    for kind, path in (
        ("template", f"{ext}/sandboxtemplates/py"),
        ("pool", f"{ext}/sandboxwarmpools/pool"),
        ("claim", f"{ext}/sandboxclaims/before"),
        ("sandbox", f"{SANDBOXES.format(ns=APPS)}/standalone"),
    ):
        out[kind] = cluster.api("GET", path)["metadata"]["uid"]
    return out


def deployments(cluster: DevCluster) -> list[dict[str, Any]]:
    """Every Deployment of the cluster that runs an agent-sandbox controller."""
    return [
        d
        for d in cluster.api("GET", "/apis/apps/v1/deployments")["items"]
        if d["metadata"]["name"] == SA
        or any(c["name"] == SA for c in d["spec"]["template"]["spec"]["containers"])
    ]


def make_objects(cluster: DevCluster) -> None:
    """A template, a pool of one, a claim of it and a standalone sandbox, under upstream's CRDs,
    while no controller runs."""
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": APPS}})
    ext = EXT.format(ns=APPS)
    pod = {"spec": {"containers": [{"name": "main", "image": "example/python:1"}]}}
    for path, kind, name, spec in (
        ("sandboxtemplates", "SandboxTemplate", "py", {"podTemplate": pod}),
        (
            "sandboxwarmpools",
            "SandboxWarmPool",
            "pool",
            {"replicas": 1, "sandboxTemplateRef": {"name": "py"}},
        ),
        (
            "sandboxclaims",
            "SandboxClaim",
            "before",
            {"warmPoolRef": {"name": "pool"}},  # upstream's CRD requires a pool
        ),
    ):
        body = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": kind}
        cluster.api("POST", f"{ext}/{path}", {**body, "metadata": {"name": name}, "spec": spec})
    cluster.api(
        "POST",
        SANDBOXES.format(ns=APPS),
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": "standalone"},
            "spec": {"podTemplate": pod},
        },
    )


@pytest.fixture(scope="module")
def upstream_values(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream's own values file as a user would carry it over: the extensions on, and image.*
    pointed at this implementation's image (the only edits)."""
    values = yaml.safe_load((upstream / "helm" / "values.yaml").read_text())
    values["controller"]["extensions"] = True
    values["image"] |= {"repository": OUR_IMAGE, "tag": "0.1.0"}
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_the_notes_warn_when_the_image_is_upstreams(
    cluster: DevCluster, home: Path, upstream: Path, upstream_values: Path
) -> None:
    """Before anything is installed: a server-side dry run of our chart with upstream's values
    file as it comes (upstream's image) warns in the NOTES; pointed at ours, it does not."""

    def notes(*values: str) -> str:
        out = helm(
            "install", "notes", str(CHART), *kube(cluster), "--dry-run=server", *values, home=home
        ).stdout
        return out[out.index("NOTES:") :]

    as_given = notes("-f", str(upstream / "helm" / "values.yaml"))
    assert f"WARNING: image.repository is upstream's Go controller ({UPSTREAM_IMAGE})" in as_given
    assert "WARNING" not in notes("-f", str(upstream_values))


@pytest.fixture(scope="module")
def migrated(
    cluster: DevCluster, home: Path, upstream: Path, upstream_values: Path
) -> dict[str, Any]:
    """Upstream's release, the objects, then the upgrade to our chart; what was seen."""
    helm(
        "install",
        RELEASE,
        str(upstream / "helm"),
        *kube(cluster),
        *("--set", "image.tag=v1.0.1", "--set", "controller.extensions=true"),
        home=home,
    )
    make_objects(cluster)
    seen: dict[str, Any] = {"before": uids(cluster), "deployments_before": deployments(cluster)}
    upgrade = helm(
        "upgrade",
        RELEASE,
        str(CHART),
        *kube(cluster),
        "-f",
        str(upstream_values),
        "--take-ownership",
        home=home,
    )
    seen["upgrade_output"] = upgrade.stdout
    seen["after"] = uids(cluster)
    seen["deployments_after"] = deployments(cluster)
    seen["manifest"] = docs_of(helm("get", "manifest", RELEASE, *kube(cluster), home=home).stdout)
    return seen


def test_the_upgrade_from_upstreams_chart_replaces_nothing(migrated: dict[str, Any]) -> None:
    assert migrated["after"] == migrated["before"]
    (before,) = migrated["deployments_before"]
    (after,) = migrated["deployments_after"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["namespace"] == SYSTEM_NS
    assert after["spec"]["selector"] == before["spec"]["selector"]
    (c,) = after["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"{OUR_IMAGE}:0.1.0"
    assert "WARNING" not in migrated["upgrade_output"]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in migrated["manifest"]}
    assert {("CustomResourceDefinition", crd) for crd in CRDS} <= kinds  # now the release's


def test_our_controller_with_the_charts_service_account_serves_claims(
    cluster: DevCluster, migrated: dict[str, Any], tmp_path: Path
) -> None:
    """The upgraded Deployment's args, run here with a TokenRequest token of the chart's
    ServiceAccount: it takes the Lease (the only holder: kwok's pods run nothing), serves the
    claim and fills the pool made under upstream's release, and a warm and a cold claim made
    now; no request is refused (controller_with_token) and the Lease is released at the end."""
    args = local_args(container(migrated["manifest"])["args"], free_port(), free_port())
    kubeconfig = token_kubeconfig(cluster, tmp_path)
    log = tmp_path / "controller.log"
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NS}/leases/{LEASE}"
    ext = EXT.format(ns=APPS)
    with controller_with_token(cluster, kubeconfig, args, log) as alive:
        wait = waiter(alive, log)
        holder = wait(
            lambda: ((get_or_none(cluster, lease) or {}).get("spec") or {}).get("holderIdentity"),
            "a Lease holder",
        )
        wait(lambda: get_if(cluster, f"{ext}/sandboxclaims/before", ready), "claim before Ready")
        wait(
            lambda: get_if(
                cluster, f"{ext}/sandboxwarmpools/pool", lambda p: ready_replicas(p) == 1
            ),
            "the pool made under upstream's release: readyReplicas 1",
        )
        wait(
            lambda: get_if(cluster, f"{SANDBOXES.format(ns=APPS)}/standalone", ready),
            "the standalone sandbox Ready",
        )
        cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": "served"}})
        serve_warm_and_cold(cluster, "served", alive, log)
        assert cluster.api("GET", lease)["spec"].get("holderIdentity") == holder
    assert uids(cluster) == migrated["before"]
    assert len(deployments(cluster)) == 1


def test_the_upgrade_back_to_upstreams_chart_keeps_the_crds_and_every_object(
    cluster: DevCluster, home: Path, upstream: Path, migrated: dict[str, Any]
) -> None:
    """Runs last. Upstream's chart templates no CRD (they sit in its crds/ directory): ours carry
    helm.sh/resource-policy: keep, so Helm leaves them, and with them every object."""
    helm(
        "upgrade",
        RELEASE,
        str(upstream / "helm"),
        *kube(cluster),
        *("--set", "image.tag=v1.0.1", "--set", "controller.extensions=true"),
        home=home,
    )
    assert uids(cluster) == migrated["before"]
    (deployment,) = deployments(cluster)
    assert deployment["metadata"]["uid"] == migrated["deployments_before"][0]["metadata"]["uid"]
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"{UPSTREAM_IMAGE}:v1.0.1"
    # our own CRD stays too
    cluster.api(
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev",
    )
