"""The SandboxClaim CRD on the real apiserver: one union schema for both client generations.

k8s-agent-sandbox 0.4.6 POSTs ``extensions.agents.x-k8s.io/v1alpha1`` claims with
``sandboxTemplateRef`` (+ ``warmpool``); 1.0.8 POSTs ``v1beta1`` claims with ``warmPoolRef``,
``env``, ``additionalPodMetadata``, ``volumeClaimTemplates`` and ``lifecycle``
(each client's ``k8s_helper.py``; docs/api.md, "The SandboxClaim: one schema for both client
generations"). Both versions share one schema and storage without conversion, so each body must
be stored whole whichever version it is sent to and read back through; the CEL rules turn the
mixed-up bodies into messages a user understands.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.error
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api import kinds
from agentsandbox.devcluster.cluster import DevCluster
from tests.polling import stays_sync

from .invariants import SandboxHistory, checked_history

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds"
CLAIM_CRD = CRD / "extensions.agents.x-k8s.io_sandboxclaims.yaml"
VERSIONS = ("v1alpha1", "v1beta1")
GROUP = kinds.EXTENSIONS_GROUP

ONE_REF = "exactly one of spec.sandboxTemplateRef and spec.warmPoolRef must be set"
WARMPOOL_WITH_TEMPLATE = (
    "spec.warmpool is only allowed with spec.sandboxTemplateRef; with spec.warmPoolRef the pool "
    "is already chosen"
)
EMPTY_POOL_NAME = "warmPoolRef.name must name a SandboxWarmPool in the same namespace"
BAD_WARMPOOL = 'warmpool must be "none", "default" or the name of a SandboxWarmPool'


@pytest.fixture(scope="module", autouse=True)
async def claim_history(
    cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of the module's tests, checked against the claim rules at its
    end (tests/integration/invariants.py): one history for the module, whose many short tests
    make a few claims each (one per test would cost more than the tests)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


@pytest.fixture(scope="module", autouse=True)
def claim_crd_installed(cluster: DevCluster) -> None:
    """Serve the committed claim CRD (a reused cluster may predate it)."""
    out = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=test-crds",
        "-f", str(CLAIM_CRD),
    )  # fmt: skip
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        f"crd/sandboxclaims.{GROUP}",
    )  # fmt: skip
    if "serverside-applied" in out.stdout and "unchanged" not in out.stdout:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxclaims.{GROUP}"
        applied = cluster.api("GET", path)["metadata"]["generation"]
        stays_sync(  # let the apiserver switch its validators to the new schema
            lambda: cluster.api("GET", path)["metadata"]["generation"],
            accept=lambda generation: generation == applied,
            for_=2,
            what="the claim CRD as applied",
        )


def path(version: str, namespace: str, name: str = "") -> str:
    return kinds.SANDBOX_CLAIM.at_version(version).path(namespace, name or None)


def create(cluster: DevCluster, obj: dict[str, Any], namespace: str) -> Any:
    """POST as the clients do; Strict turns a field the schema lacks into a 400, not a prune."""
    version = obj["apiVersion"].rsplit("/", 1)[1]
    return cluster.api("POST", path(version, namespace) + "?fieldValidation=Strict", obj)


def rejection(fn: Callable[[], Any]) -> tuple[int, str]:
    try:
        fn()
    except urllib.error.HTTPError as err:
        body = err.read().decode()
        try:
            return err.code, str(json.loads(body).get("message", body))
        except ValueError:
            return err.code, body
    raise AssertionError("the API server accepted the object")


# --------------------------------------------------------------------------- the clients' bodies
def client_046_body(version: str) -> dict[str, Any]:
    """What k8s-agent-sandbox 0.4.6's ``k8s_helper.py`` POSTs, with labels and a shutdown time."""
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "SandboxClaim",
        "metadata": {
            "name": f"sandbox-claim-{uuid.uuid4().hex[:8]}",
            "annotations": {},
            "labels": {"team": "x"},
        },
        "spec": {
            "sandboxTemplateRef": {"name": "python-template"},
            "lifecycle": {"shutdownTime": "2026-12-02T17:43:06Z", "shutdownPolicy": "Delete"},
            "warmpool": "default",
        },
    }


def client_108_body(version: str) -> dict[str, Any]:
    """What k8s-agent-sandbox 1.0.8's ``k8s_helper.py`` POSTs, every optional field set."""
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "SandboxClaim",
        "metadata": {
            "name": f"sandbox-claim-{uuid.uuid4().hex[:8]}",
            "annotations": {
                "agents.x-k8s.io/client-first-requested-at": "2026-12-02T17:33:06.087444+00:00"
            },
            "labels": {"team": "x", "agents.x-k8s.io/created-by": "python-client"},
        },
        "spec": {
            "warmPoolRef": {"name": "python-pool"},
            "lifecycle": {"shutdownTime": "2026-12-02T17:43:06Z", "shutdownPolicy": "Delete"},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "v"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
            "additionalPodMetadata": {"labels": {"client-id": "a"}, "annotations": {"owner": "a"}},
            "env": [{"name": "FOO", "value": "bar"}],
        },
    }


CLIENTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "sdk-0.4.6": client_046_body,
    "sdk-1.0.8": client_108_body,
}


def assert_kept(sent: dict[str, Any], stored: dict[str, Any], version: str) -> None:
    """Nothing the client sent was pruned or rewritten (the empty 0.4.6 annotations aside)."""
    assert stored["apiVersion"] == f"{GROUP}/{version}"
    assert stored["spec"] == sent["spec"]
    meta = stored["metadata"]
    assert meta["labels"] == sent["metadata"]["labels"]
    # ObjectMeta drops an empty map (`annotations: {}` from 0.4.6) like any apiserver does.
    assert meta.get("annotations", {}) == sent["metadata"]["annotations"]
    assert meta["uid"] and meta["resourceVersion"]  # 1.0.8's adoption check needs both


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_body_is_stored_whole_and_read_back_through_both_versions(
    cluster: DevCluster, namespace: str, client: str, version: str
) -> None:
    """The client's own version, and the other one (a manifest of either version must work)."""
    sent = CLIENTS[client](version)
    created = create(cluster, copy.deepcopy(sent), namespace)
    assert_kept(sent, created, version)
    for read_as in VERSIONS:
        stored = cluster.api("GET", path(read_as, namespace, sent["metadata"]["name"]))
        assert_kept(sent, stored, read_as)
        assert stored["metadata"]["uid"] == created["metadata"]["uid"]


@pytest.mark.parametrize("version", VERSIONS)
def test_absent_warmpool_is_not_defaulted(
    cluster: DevCluster, namespace: str, version: str
) -> None:
    """Absent means "default" to the controller; the CRD writes nothing (no 1.0.8 conflict)."""
    body = client_046_body(version)
    del body["spec"]["warmpool"]
    create(cluster, body, namespace)
    for read_as in VERSIONS:
        stored = cluster.api("GET", path(read_as, namespace, body["metadata"]["name"]))
        assert "warmpool" not in stored["spec"]
        assert stored["spec"]["sandboxTemplateRef"] == {"name": "python-template"}


def test_lifecycle_shutdown_policy_defaults_to_retain(cluster: DevCluster, namespace: str) -> None:
    body = client_108_body("v1beta1")
    body["spec"]["lifecycle"] = {"shutdownTime": "2026-12-02T17:43:06Z"}
    created = create(cluster, body, namespace)
    assert created["spec"]["lifecycle"]["shutdownPolicy"] == "Retain"


@pytest.mark.parametrize("policy", ["none", "default", "", "fast-pool.a"])
def test_every_warmpool_policy_is_accepted_beside_the_template_ref(
    cluster: DevCluster, namespace: str, policy: str
) -> None:
    body = client_046_body("v1alpha1")
    body["spec"]["warmpool"] = policy
    assert create(cluster, body, namespace)["spec"]["warmpool"] == policy


def test_additional_pod_metadata_can_be_merge_patched(cluster: DevCluster, namespace: str) -> None:
    """1.0.8's GKE snapshot path merge-patches a pod annotation into the claim and out again."""
    body = client_108_body("v1beta1")
    create(cluster, body, namespace)
    key = "podsnapshot.gke.io/ps-name"

    def patch(value: str | None) -> Any:
        out = cluster.kubectl(
            "patch", "-n", namespace, f"sandboxclaims.v1beta1.{GROUP}/{body['metadata']['name']}",
            "--type=merge", "-o", "json",
            "-p", json.dumps({"spec": {"additionalPodMetadata": {"annotations": {key: value}}}}),
        )  # fmt: skip
        return json.loads(out.stdout)["spec"]["additionalPodMetadata"]["annotations"]

    assert patch("snap-1") == {"owner": "a", key: "snap-1"}
    assert patch(None) == {"owner": "a"}


# --------------------------------------------------------------------------- rejections
def ref(name: str = "t") -> dict[str, str]:
    return {"name": name}


REJECTED: list[tuple[str, dict[str, Any], int, list[str], list[str]]] = [
    # (case, spec, HTTP status, messages shown, messages not shown)
    ("neither-ref", {"lifecycle": {"shutdownPolicy": "Delete"}}, 422, [ONE_REF], []),
    ("empty-spec", {}, 422, [ONE_REF], [WARMPOOL_WITH_TEMPLATE]),
    (
        "both-refs",
        {"sandboxTemplateRef": ref(), "warmPoolRef": ref("p")},
        422,
        [ONE_REF],
        [WARMPOOL_WITH_TEMPLATE],
    ),
    (
        "both-refs-and-warmpool",
        {"sandboxTemplateRef": ref(), "warmPoolRef": ref("p"), "warmpool": "p"},
        422,
        [ONE_REF],
        [WARMPOOL_WITH_TEMPLATE],
    ),
    (
        "warmpool-beside-warm-pool-ref",
        {"warmPoolRef": ref("p"), "warmpool": "default"},
        422,
        [WARMPOOL_WITH_TEMPLATE],
        [ONE_REF],
    ),
    (
        "empty-warmpool-beside-warm-pool-ref",
        {"warmPoolRef": ref("p"), "warmpool": ""},
        422,
        [WARMPOOL_WITH_TEMPLATE],
        [ONE_REF],
    ),
    ("warmpool-without-any-ref", {"warmpool": "none"}, 422, [ONE_REF, WARMPOOL_WITH_TEMPLATE], []),
    ("empty-warm-pool-ref-name", {"warmPoolRef": ref("")}, 422, [EMPTY_POOL_NAME], [ONE_REF]),
    (
        "warm-pool-ref-without-name",
        {"warmPoolRef": {}},
        422,
        ["spec.warmPoolRef.name: Required value"],
        [],
    ),
    (
        "empty-template-ref-name",
        {"sandboxTemplateRef": ref("")},
        422,
        ["sandboxTemplateRef.name must name a SandboxTemplate in the same namespace"],
        [ONE_REF],
    ),
    (
        "bad-warmpool-value",
        {"sandboxTemplateRef": ref(), "warmpool": "Fast_Pool"},
        422,
        [BAD_WARMPOOL],
        [ONE_REF, WARMPOOL_WITH_TEMPLATE],
    ),
    (
        "volume-claim-template-without-name",
        {"warmPoolRef": ref("p"), "volumeClaimTemplates": [{"spec": {}}]},
        422,
        ["volumeClaimTemplates[].metadata.name is required"],
        [],
    ),
    (
        "mistyped-volume-claim-template-field",
        {
            "warmPoolRef": ref("p"),
            "volumeClaimTemplates": [{"metadata": {"name": "v"}, "spec": {"storageClassNam": "x"}}],
        },
        400,
        ['unknown field "spec.volumeClaimTemplates[0].spec.storageClassNam"'],
        [],
    ),
    (
        "empty-env-name",
        {"warmPoolRef": ref("p"), "env": [{"name": "", "value": "x"}]},
        422,
        ["env[].name must not be empty"],
        [],
    ),
    # security review #12: claim sizes are bounded (each row failed before the bounds)
    (
        "env-over-128-items",
        {"warmPoolRef": ref("p"), "env": [{"name": f"V{i}", "value": "x"} for i in range(129)]},
        422,
        ["spec.env: Too many: 129: must have at most 128 items"],
        [],
    ),
    (
        "env-value-over-32-kib",
        {"warmPoolRef": ref("p"), "env": [{"name": "V", "value": "x" * (32 * 1024 + 1)}]},
        422,
        ["spec.env[0].value: Too long", "32768"],
        [],
    ),
    (
        "labels-over-64",
        {
            "warmPoolRef": ref("p"),
            "additionalPodMetadata": {"labels": {f"sandbox.users.io/l{i}": "v" for i in range(65)}},
        },
        422,
        ["spec.additionalPodMetadata.labels: Too many: 65: must have at most 64 items"],
        [],
    ),
    (
        "annotations-over-64",
        {
            "warmPoolRef": ref("p"),
            "additionalPodMetadata": {"annotations": {f"a{i}": "v" for i in range(65)}},
        },
        422,
        ["spec.additionalPodMetadata.annotations: Too many: 65: must have at most 64 items"],
        [],
    ),
    (
        "annotation-value-over-32-kib",
        {
            "warmPoolRef": ref("p"),
            "additionalPodMetadata": {"annotations": {"a": "x" * (32 * 1024 + 1)}},
        },
        422,
        ["spec.additionalPodMetadata.annotations.a: Too long", "32768"],
        [],
    ),
    (
        "volume-claim-templates-over-8",
        {
            "warmPoolRef": ref("p"),
            "volumeClaimTemplates": [
                {"metadata": {"name": f"v{i}"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
                for i in range(9)
            ],
        },
        422,
        ["spec.volumeClaimTemplates: Too many: 9: must have at most 8 items"],
        [],
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("case", "spec", "code", "shown", "not_shown"), REJECTED, ids=[c for c, *_ in REJECTED]
)
def test_mixed_up_claim_is_rejected_with_a_clear_message(
    cluster: DevCluster,
    namespace: str,
    case: str,
    spec: dict[str, Any],
    code: int,
    shown: list[str],
    not_shown: list[str],
    version: str,
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "SandboxClaim",
        "metadata": {"name": case},
        "spec": copy.deepcopy(spec),
    }
    status, message = rejection(lambda: create(cluster, body, namespace))
    assert status == code, message
    for expected in shown:
        assert expected in message
    for unexpected in not_shown:
        assert unexpected not in message


def test_an_update_cannot_add_the_second_ref(cluster: DevCluster, namespace: str) -> None:
    body = client_108_body("v1beta1")
    created = create(cluster, body, namespace)
    created["spec"]["sandboxTemplateRef"] = ref()
    url = path("v1alpha1", namespace, body["metadata"]["name"])
    created["apiVersion"] = f"{GROUP}/v1alpha1"
    status, message = rejection(lambda: cluster.api("PUT", url, created))
    assert status == 422
    assert ONE_REF in message


# --------------------------------------------------------------------------- printer columns
def table(text: str) -> list[dict[str, str]]:
    """kubectl's aligned output as rows by header; an empty cell is "" (kubectl prints nothing)."""
    header, *lines = text.rstrip().splitlines()
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [
        {n: line[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None], strict=True)}
        for line in lines
    ]


def test_kubectl_get_wide_shows_which_ref_a_claim_uses(cluster: DevCluster, namespace: str) -> None:
    old, new = client_046_body("v1alpha1"), client_108_body("v1beta1")
    old["metadata"]["name"], new["metadata"]["name"] = "a-old", "b-new"
    created = create(cluster, new, namespace)
    create(cluster, old, namespace)
    created["status"] = {
        "sandbox": {"name": "python-pool-x1"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "SandboxReady",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    cluster.api("PUT", path("v1beta1", namespace, "b-new") + "/status", created)

    out = cluster.kubectl("get", "-n", namespace, "sandboxclaims", "-o", "wide").stdout
    rows = table(out)
    assert [list(row) for row in rows] == [
        ["NAME", "READY", "SANDBOX", "REASON", "AGE", "TEMPLATE", "WARM POOL", "WARM POOL POLICY"]
    ] * 2
    old_row, new_row = rows
    assert {k: v for k, v in old_row.items() if k != "AGE"} == {
        "NAME": "a-old",
        "READY": "",
        "SANDBOX": "",
        "REASON": "",
        "TEMPLATE": "python-template",
        "WARM POOL": "",
        "WARM POOL POLICY": "default",
    }
    assert {k: v for k, v in new_row.items() if k != "AGE"} == {
        "NAME": "b-new",
        "READY": "True",
        "SANDBOX": "python-pool-x1",
        "REASON": "SandboxReady",
        "TEMPLATE": "",
        "WARM POOL": "python-pool",
        "WARM POOL POLICY": "",
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_a_claim_at_every_bound_is_still_accepted(
    cluster: DevCluster, namespace: str, version: str
) -> None:
    """Security review #12, the other side: a claim upstream v1.0.1's schema accepts (its
    fields only: warmPoolRef, env name/value/containerName, additionalPodMetadata,
    volumeClaimTemplates, lifecycle) that sits exactly at each bound is stored whole: 128 env
    entries, one value of 32 KiB, 64 labels, 64 annotations (one of 32 KiB), 8 volume claim
    templates whose metadata maps hold 64 entries."""
    body = client_108_body(version)
    env = [{"name": f"V{i}", "value": str(i)} for i in range(127)]
    env.append({"name": "BIG", "value": "x" * (32 * 1024), "containerName": "main"})
    labels = {f"sandbox.users.io/l{i}": "v" for i in range(64)}
    annotations = {f"a{i}": "v" for i in range(63)} | {"big": "y" * (32 * 1024)}
    vct_meta = {"labels": {f"l{i}": "v" for i in range(64)}, "annotations": {"a": "v"}}
    body["spec"] |= {
        "env": env,
        "additionalPodMetadata": {"labels": labels, "annotations": annotations},
        "volumeClaimTemplates": [
            {
                "metadata": {"name": f"v{i}", **vct_meta},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
            for i in range(8)
        ],
    }
    created = create(cluster, copy.deepcopy(body), namespace)
    assert_kept(body, created, version)
