"""Our CRDs on the real local control plane.

Upstream is the agent-sandbox release pinned in hack/controlplane/upstream/version.env (the Go
module sigs.k8s.io/agent-sandbox, fetched into the build cache by ``make controlplane``; the
``upstream`` fixture). Which of its CRDs and example documents are read is listed here by name:
a missing one FAILS.

(a) compatibility with upstream's CRDs: every field path, type, format, enum, default, bound and
    list/map semantic of upstream's schema exists in ours, and an object that sets *every*
    upstream field is accepted with strict field validation and stored unpruned, in both versions;
    the fields of earlier upstream revisions that the release dropped are still served;
(b) every document of our kinds in upstream's example manifests applies with strict validation,
    as v1alpha1 and as v1beta1;
(c) invalid objects are rejected with clear messages;
(d) ``kubectl get`` shows the printer columns.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import urllib.error
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsandbox.api import kinds
from agentsandbox.devcluster.cluster import DevCluster
from tests.polling import stays_sync

from .invariants import SandboxHistory, checked_history

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
VERSIONS = ("v1alpha1", "v1beta1")
OUR_KINDS = {k.kind: k for k in kinds.ALL_KINDS}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.fixture(scope="module", autouse=True)
async def claim_history(
    cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of the module's tests, checked against the claim rules at its
    end (tests/integration/invariants.py): one history for the module, whose many short tests
    make a few claims each (one per test would cost more than the tests)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def _load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if isinstance(d, dict)]


@functools.cache
def our_crds() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for p in CRD_DIR.glob("*.yaml") for d in _load_docs(p)}


# Upstream's CRDs (k8s/crds/ of the module; helm/crds/ holds the same), by name, and their files.
UPSTREAM_CRDS = {
    "sandboxes.agents.x-k8s.io": "agents.x-k8s.io_sandboxes.yaml",
    "sandboxclaims.extensions.agents.x-k8s.io": "extensions.agents.x-k8s.io_sandboxclaims.yaml",
    "sandboxtemplates.extensions.agents.x-k8s.io": (
        "extensions.agents.x-k8s.io_sandboxtemplates.yaml"
    ),
    "sandboxwarmpools.extensions.agents.x-k8s.io": (
        "extensions.agents.x-k8s.io_sandboxwarmpools.yaml"
    ),
}
UPSTREAM_CRD_DIRS = ("k8s/crds", "helm/crds")


@functools.cache
def upstream_crds(upstream: Path, crd_dir: str = UPSTREAM_CRD_DIRS[0]) -> dict[str, dict[str, Any]]:
    """Upstream's CRDs by name, read from the files UPSTREAM_CRDS names (a missing one raises)."""
    out = {}
    for name, filename in UPSTREAM_CRDS.items():
        (doc,) = _load_docs(upstream / crd_dir / filename)
        assert doc["metadata"]["name"] == name, filename
        out[name] = doc
    return out


def test_upstream_crds_are_the_expected_ones(upstream: Path) -> None:
    """Upstream ships exactly the CRDs listed, the same in its kustomize and its Helm layouts."""
    for crd_dir in UPSTREAM_CRD_DIRS:
        files = {p.name for p in (upstream / crd_dir).glob("*.yaml")}
        assert files == set(UPSTREAM_CRDS.values()), crd_dir
    assert upstream_crds(upstream, "helm/crds") == upstream_crds(upstream)


# --------------------------------------------------------------------------- cluster helpers
@pytest.fixture(scope="module", autouse=True)
def crds_installed(cluster: DevCluster) -> None:
    """Make sure the served CRDs are the committed ones (a reused cluster may predate them)."""
    out = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=test-crds",
        "-f", str(CRD_DIR),
    )  # fmt: skip
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        *[f"crd/{name}" for name in our_crds()],
    )  # fmt: skip
    if "serverside-applied" in out.stdout and "unchanged" not in out.stdout:

        def generations() -> dict[str, int]:
            return {
                name: cluster.api(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )["metadata"]["generation"]
                for name in our_crds()
            }

        applied = generations()
        stays_sync(  # let the apiserver switch its validators to the new schema
            generations,
            accept=lambda now: now == applied,
            for_=2,
            what="our CRDs as applied",
        )


def call(cluster: DevCluster, method: str, path: str, body: Any = None) -> Any:
    return cluster.api(method, path, body)


def rejection(fn: Callable[[], Any]) -> tuple[int, str]:
    """Run a request that must fail; return (HTTP status, the Status message)."""
    try:
        fn()
    except urllib.error.HTTPError as err:
        body = err.read().decode()
        try:
            return err.code, str(json.loads(body).get("message", body))
        except ValueError:
            return err.code, body
    raise AssertionError("the API server accepted the object")


def collection(kind: str, version: str, namespace: str) -> str:
    return OUR_KINDS[kind].at_version(version).path(namespace)


def create(cluster: DevCluster, obj: dict[str, Any], namespace: str) -> Any:
    version = obj["apiVersion"].rsplit("/", 1)[1]
    path = collection(obj["kind"], version, namespace) + "?fieldValidation=Strict"
    return call(cluster, "POST", path, obj)


def sandbox(name: str, version: str = "v1beta1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        **spec,
    }
    return {
        "apiVersion": f"agents.x-k8s.io/{version}",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": body,
    }


def ext(kind: str, name: str, spec: dict[str, Any], version: str = "v1beta1") -> dict[str, Any]:
    return {
        "apiVersion": f"extensions.agents.x-k8s.io/{version}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_crds_apply_client_side(cluster: DevCluster) -> None:
    """Plain `kubectl apply` stores the whole CRD in an annotation (256 KiB limit)."""
    out = cluster.kubectl("apply", "--dry-run=server", "-f", str(CRD_DIR), check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("(server dry run)") == len(our_crds())  # 4 kinds + the autoscaler


# --------------------------------------------------------------------------- (a) compatibility
BOUNDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
)
SEMANTICS = (
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "nullable",
)


def compare(up: dict[str, Any], ours: dict[str, Any] | None, path: str) -> Iterator[str]:
    """Differences that would make ours reject, prune or treat differently what upstream takes."""
    if ours is None:
        yield f"{path}: missing"
        return
    if up.get("type") != ours.get("type"):
        yield f"{path}: type {up.get('type')} != {ours.get('type')}"
    if "anyOf" in up and up["anyOf"] != ours.get("anyOf"):
        yield f"{path}: anyOf {up['anyOf']} != {ours.get('anyOf')}"
    for key in ("format", "default", *BOUNDS, *SEMANTICS):
        if key in up and up[key] != ours.get(key):
            yield f"{path}: {key} {up[key]!r} != {ours.get(key)!r}"
    if "enum" in up and set(up["enum"]) != set(ours.get("enum", ())):
        yield f"{path}: enum {up['enum']} != {ours.get('enum')}"
    extra_required = set(ours.get("required", ())) - set(up.get("required", ()))
    if extra_required:
        yield f"{path}: we also require {sorted(extra_required)}"
    for key, sub in up.get("properties", {}).items():
        yield from compare(sub, ours.get("properties", {}).get(key), f"{path}.{key}")
    if "items" in up:
        yield from compare(up["items"], ours.get("items"), f"{path}[]")
    if isinstance(up.get("additionalProperties"), dict):
        theirs = ours.get("additionalProperties")
        yield from compare(
            up["additionalProperties"], theirs if isinstance(theirs, dict) else None, path + "{}"
        )


UPSTREAM_CRD_NAMES = sorted(UPSTREAM_CRDS)

# Differences from upstream's release that we make on purpose, by CRD. Sandbox
# `spec.operatingMode` has no default: it sits beside `spec.replicas` (which the release dropped
# and the 0.4.x clients still send, see test_compat_fields_of_earlier_upstream_revisions_are_served
# below), and a default of Running would turn an object with only `replicas: 0` into a
# contradiction the CEL rule rejects; unset still means running to the controller.
ALLOWED_DIFFS: dict[str, set[str]] = {
    "sandboxes.agents.x-k8s.io": {".spec.operatingMode: default 'Running' != None"},
}
# Status fields of upstream's release that our CRDs do not have: our controllers do not write
# them, and a status that sets them loses them (pruned). Known gaps, listed so that each one
# fails this test once it is closed.
STATUS_GAPS: dict[str, set[str]] = {
    "sandboxclaims.extensions.agents.x-k8s.io": {".status.sandbox.serviceFQDN: missing"},
    "sandboxwarmpools.extensions.agents.x-k8s.io": {
        ".status.observedGeneration: minimum 0 != None"
    },
}
# The fields of those gaps in an every-field status: unknown to ours, so rejected under strict
# field validation and pruned without it.
UNKNOWN_STATUS_FIELDS: dict[str, list[str]] = {
    "sandboxclaims.extensions.agents.x-k8s.io": ["status.sandbox.serviceFQDN"],
}


@pytest.mark.parametrize("name", UPSTREAM_CRD_NAMES)
def test_compat_schema_has_every_upstream_field_type_enum_default_and_bound(
    upstream: Path, name: str
) -> None:
    up = upstream_crds(upstream)[name]
    (up_version,) = up["spec"]["versions"]
    ours = our_crds()[name]
    assert ours["spec"]["group"] == up["spec"]["group"]
    assert ours["spec"]["scope"] == up["spec"]["scope"]
    for key, value in up["spec"]["names"].items():
        assert ours["spec"]["names"][key] == value, key
    allowed = ALLOWED_DIFFS.get(name, set()) | STATUS_GAPS.get(name, set())
    for version in ours["spec"]["versions"]:
        prefix = f"{version['name']}:"
        diffs = list(
            compare(
                up_version["schema"]["openAPIV3Schema"],
                version["schema"]["openAPIV3Schema"],
                prefix,
            )
        )
        assert [d for d in diffs if d.removeprefix(prefix) not in allowed] == []
        # An allowance that no longer matches anything should go.
        assert {d.removeprefix(prefix) for d in diffs} == allowed


# Subresources we serve beyond upstream's release: Sandbox /scale, which the release dropped with
# spec.replicas (kept for the 0.4.x clients, `kubectl scale` and the objects stored before).
EXTRA_SUBRESOURCES: dict[str, set[str]] = {"sandboxes.agents.x-k8s.io": {"scale"}}


def _json_path(path: str) -> str:
    """A printer column's JSONPath with one quoting style (``'Ready'`` and ``"Ready"`` agree)."""
    return path.replace("'", '"')


@pytest.mark.parametrize("name", UPSTREAM_CRD_NAMES)
def test_compat_printer_columns_and_subresources(upstream: Path, name: str) -> None:
    (up_version,) = upstream_crds(upstream)[name]["spec"]["versions"]
    extra = EXTRA_SUBRESOURCES.get(name, set())
    for version in our_crds()[name]["spec"]["versions"]:
        ours = {
            (c["name"], c["type"], _json_path(c["jsonPath"]))
            for c in version["additionalPrinterColumns"]
        }
        for column in up_version.get("additionalPrinterColumns", []):
            assert (column["name"], column["type"], _json_path(column["jsonPath"])) in ours
        subresources = dict(version.get("subresources", {}))
        assert set(subresources) & extra == extra
        assert {k: v for k, v in subresources.items() if k not in extra} == up_version.get(
            "subresources", {}
        )


# Fields of earlier upstream revisions (the 0.4.x clients' era) that the pinned release no longer
# has, each as a schema fragment in the form upstream had it: ours still serves them
# (docs/api.md), so that those clients and the objects stored then keep working. compare() holds
# ours to each fragment as it holds ours to upstream's CRDs.
EARLIER_FIELDS: dict[str, dict[str, Any]] = {
    "sandboxes.agents.x-k8s.io": {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["podTemplate"],
                "properties": {
                    "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 1},
                    "podTemplate": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["containers"],
                                "properties": {
                                    # PodSpec.workloadRef: Kubernetes 1.35 (1.36 replaced it)
                                    "workloadRef": {
                                        "type": "object",
                                        "required": ["name", "podGroup"],
                                        "properties": {
                                            "name": {"type": "string"},
                                            "podGroup": {"type": "string"},
                                            "podGroupReplicaKey": {"type": "string"},
                                        },
                                    }
                                },
                            }
                        },
                    },
                },
            },
            "status": {
                "type": "object",
                "properties": {"replicas": {"type": "integer", "format": "int32", "minimum": 0}},
            },
        },
    },
    "sandboxclaims.extensions.agents.x-k8s.io": {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "sandboxTemplateRef": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                    "warmpool": {"type": "string"},
                },
            }
        },
    },
}
EARLIER_SCALE = {
    "labelSelectorPath": ".status.selector",
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
}


# What compare() finds missing in the release, per fragment: exactly the dropped fields (a field
# the release has again is held to it by the tests above, and leaves this list).
DROPPED_BY_RELEASE: dict[str, set[str]] = {
    "sandboxes.agents.x-k8s.io": {
        ".spec.replicas: missing",
        ".spec.podTemplate.spec.workloadRef: missing",
        ".status.replicas: missing",
    },
    "sandboxclaims.extensions.agents.x-k8s.io": {
        ".spec.sandboxTemplateRef: missing",
        ".spec.warmpool: missing",
    },
}


@pytest.mark.parametrize("name", sorted(EARLIER_FIELDS))
def test_compat_fields_of_earlier_upstream_revisions_are_served(upstream: Path, name: str) -> None:
    (up_version,) = upstream_crds(upstream)[name]["spec"]["versions"]
    fragment = EARLIER_FIELDS[name]
    up_schema = up_version["schema"]["openAPIV3Schema"]
    missing = {d for d in compare(fragment, up_schema, "") if d.endswith(": missing")}
    assert missing == DROPPED_BY_RELEASE[name]
    for version in our_crds()[name]["spec"]["versions"]:
        assert list(compare(fragment, version["schema"]["openAPIV3Schema"], "")) == []
        if name == "sandboxes.agents.x-k8s.io":
            assert version["subresources"]["scale"] == EARLIER_SCALE


# Strings that must match a pattern in upstream's schema (metav1.Condition).
PATTERN_SAMPLES = {"reason": "SomeReason", "type": "Ready"}


def sample(schema: dict[str, Any], key: str = "") -> Any:
    """An object that sets every field of ``schema`` with a valid value."""
    if schema.get("x-kubernetes-int-or-string"):
        return 1
    if "default" in schema:
        return copy.deepcopy(schema["default"])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        if "properties" in schema:
            return {k: sample(v, k) for k, v in schema["properties"].items()}
        if isinstance(schema.get("additionalProperties"), dict):
            return {"some-key": sample(schema["additionalProperties"])}
        return {}
    if kind == "array":
        return [sample(schema["items"], key)]
    if kind == "string":
        if schema.get("format") == "date-time":
            return "2030-01-02T03:04:05Z"
        if "pattern" in schema:
            value = PATTERN_SAMPLES[key]
            assert re.search(schema["pattern"], value)
            return value
        return "x"
    if kind == "integer":
        low = max(schema.get("minimum", 1), 1)
        return min(low, schema.get("maximum", low))
    if kind == "boolean":
        return True
    if kind == "number":
        return 1
    raise AssertionError(f"no sample for {schema}")


Path_ = tuple[str | int, ...]


def leaves(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """(path, value) for every scalar, empty object and empty list in ``value``."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    else:
        yield path, value


def lookup(obj: Any, path: Path_) -> Any:
    for part in path:
        try:
            obj = obj[part]
        except (KeyError, IndexError, TypeError):
            return "<pruned>"
    return obj


def dropped(sent: dict[str, Any], stored: dict[str, Any], key: str) -> list[str]:
    """Leaves of ``sent[key]`` that ``stored`` does not hold with the same value."""
    return [
        ".".join(map(str, p)) + f" = {lookup(stored, p)!r}"
        for p, v in leaves(sent[key], (key,))
        if lookup(stored, p) != v
    ]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", UPSTREAM_CRD_NAMES)
def test_compat_object_with_every_upstream_field_is_accepted_and_kept(
    cluster: DevCluster, upstream: Path, namespace: str, name: str, version: str
) -> None:
    up = upstream_crds(upstream)[name]
    schema = up["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    kind = up["spec"]["names"]["kind"]
    obj = {
        "apiVersion": f"{up['spec']['group']}/{version}",
        "kind": kind,
        "metadata": {"name": unique("every-field")},
        "spec": sample(schema["properties"]["spec"]),
    }
    created = create(cluster, obj, namespace)
    assert dropped(obj, created, "spec") == []
    assert len(list(leaves(obj["spec"]))) >= (500 if "podTemplate" in obj["spec"] else 3)

    if "status" in schema["properties"]:
        status = sample(schema["properties"]["status"])
        path = OUR_KINDS[kind].at_version(version).path(namespace, obj["metadata"]["name"])
        unknown = UNKNOWN_STATUS_FIELDS.get(name, [])
        validation = "Strict"
        if unknown:
            code, message = rejection(
                lambda: call(
                    cluster,
                    "PUT",
                    path + "/status?fieldValidation=Strict",
                    {**created, "status": status},
                )
            )
            assert code == 400, message
            assert [f for f in unknown if f'unknown field "{f}"' not in message] == []
            validation = "Ignore"
        updated = call(
            cluster,
            "PUT",
            path + f"/status?fieldValidation={validation}",
            {**created, "status": status},
        )
        assert dropped({"status": status}, updated, "status") == [
            f"{f} = '<pruned>'" for f in unknown
        ]


def test_compat_defaults_are_applied(cluster: DevCluster, namespace: str) -> None:
    sb = create(
        cluster,
        sandbox(
            "defaults",
            podTemplate={
                "spec": {
                    "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]
                }
            },
        ),
        namespace,
    )
    assert "replicas" not in sb["spec"]  # no default beside operatingMode (unset = running)
    assert "operatingMode" not in sb["spec"]
    assert sb["spec"]["shutdownPolicy"] == "Retain"
    assert sb["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["protocol"] == "TCP"
    pool = create(
        cluster,
        ext(
            "SandboxWarmPool",
            "defaults",
            {"replicas": 0, "sandboxTemplateRef": {"name": "t"}, "updateStrategy": {}},
        ),
        namespace,
    )
    assert pool["spec"]["updateStrategy"] == {"type": "OnReplenish"}
    optional = create(
        cluster,
        ext("SandboxWarmPool", "no-replicas", {"sandboxTemplateRef": {"name": "t"}}),
        namespace,
    )
    assert optional["spec"]["replicas"] == 1  # optional, default 1 (upstream #975)
    claim = create(
        cluster,
        ext("SandboxClaim", "defaults", {"sandboxTemplateRef": {"name": "t"}, "lifecycle": {}}),
        namespace,
    )
    assert "warmpool" not in claim["spec"]  # absent means "default"; no CRD default (union)
    assert claim["spec"]["lifecycle"] == {"shutdownPolicy": "Retain"}
    tpl = create(
        cluster,
        ext("SandboxTemplate", "defaults", {"podTemplate": sandbox("x")["spec"]["podTemplate"]}),
        namespace,
    )
    assert tpl["spec"]["networkPolicyManagement"] == "Managed"
    assert tpl["spec"]["envVarsInjectionPolicy"] == "Disallowed"


def test_compat_versions_share_storage(cluster: DevCluster, namespace: str) -> None:
    create(cluster, sandbox("both", version="v1alpha1"), namespace)
    beta = call(cluster, "GET", kinds.SANDBOX.path(namespace, "both"))
    assert beta["apiVersion"] == "agents.x-k8s.io/v1beta1"
    assert beta["spec"]["shutdownPolicy"] == "Retain"


# --------------------------------------------------------------------------- (b) examples
def _substitute(name: str, index: int) -> str:
    return name if re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) else f"example-{index}"


def fill_placeholders(text: str) -> str:
    """Upstream's examples are templates: ``${VAR}`` (envsubst) and ``{var}`` (str.format)."""
    text = re.sub(r"\$\{(\w+)\}", lambda m: m.group(1).lower().replace("_", "-"), text)
    return re.sub(r"\{(\w+)\}", lambda m: m.group(1).replace("_", "-"), text)


def example_docs(path: Path) -> list[dict[str, Any]]:
    """The documents of a manifest file, placeholders filled."""
    text = fill_placeholders(path.read_text())
    return [d for d in yaml.load_all(text, Loader=_LOADER) if isinstance(d, dict)]


def ours(doc: dict[str, Any]) -> bool:
    group = str(doc.get("apiVersion", "")).rpartition("/")[0]
    return doc.get("kind") in OUR_KINDS and group == OUR_KINDS[doc["kind"]].group


# Every document of our kinds in upstream's manifests: (file in the module, index among the
# file's documents, kind). Not manifests, so left out: clusterloader2's Go templates (under
# NOT_MANIFESTS) and kustomize patches (partial objects; their bases are listed).
UPSTREAM_EXAMPLES: list[tuple[str, int, str]] = [
    ("clients/integrations/openhands/configs/agent-server-template.yaml", 0, "SandboxTemplate"),
    ("clients/integrations/openhands/configs/agent-server-warmpool.yaml", 0, "SandboxWarmPool"),
    (
        "clients/python/agentic-sandbox-client/gateway-kind/python-sandbox-template.yaml",
        0,
        "SandboxTemplate",
    ),
    ("clients/python/agentic-sandbox-client/python-counter-pool.yaml", 0, "SandboxWarmPool"),
    ("clients/python/agentic-sandbox-client/python-counter-template.yaml", 0, "SandboxTemplate"),
    ("clients/python/agentic-sandbox-client/python-sandbox-template.yaml", 0, "SandboxTemplate"),
    ("clients/python/agentic-sandbox-client/python-sandbox-warmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/agent-sandbox-gymnasium/sandbox/template.yaml", 0, "SandboxTemplate"),
    ("examples/agent-sandbox-gymnasium/sandbox/warmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/aider-sandbox/claim.yaml", 0, "SandboxClaim"),
    ("examples/aider-sandbox/template.yaml", 0, "SandboxTemplate"),
    ("examples/aider-sandbox/warmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/aio-sandbox/aio-sandbox.yaml", 0, "Sandbox"),
    ("examples/analytics-tool/analytics-tool/sandbox-python.yaml", 0, "Sandbox"),
    ("examples/analytics-tool/jupyterlab.yaml", 1, "Sandbox"),
    ("examples/containarium-ssh-sandbox/containarium-sandbox.yaml", 0, "Sandbox"),
    ("examples/containarium-ssh-sandbox/gateway-demo.yaml", 0, "Sandbox"),
    ("examples/containarium-ssh-sandbox/gateway-demo.yaml", 1, "Sandbox"),
    ("examples/demo-cilium-egress/manifests/30-sandboxes.yaml", 0, "Sandbox"),
    ("examples/demo-cilium-egress/manifests/30-sandboxes.yaml", 1, "Sandbox"),
    ("examples/demo-cilium-egress/manifests/ingress/30-sandboxes-http.yaml", 0, "Sandbox"),
    ("examples/demo-cilium-egress/manifests/ingress/30-sandboxes-http.yaml", 1, "Sandbox"),
    ("examples/envd-sandbox/sandbox-envd.yaml", 0, "Sandbox"),
    ("examples/firecracker-sandbox/sandbox-firecracker.yaml", 0, "Sandbox"),
    ("examples/firecracker-sandbox/sandbox-template-firecracker.yaml", 0, "SandboxTemplate"),
    ("examples/firecracker-sandbox/sandbox-template-firecracker.yaml", 1, "SandboxWarmPool"),
    ("examples/gemini-cu-sandbox/sandbox-gemini-computer-use.yaml", 0, "SandboxTemplate"),
    ("examples/gemini-cu-sandbox/sandbox-gemini-computer-use.yaml", 1, "SandboxWarmPool"),
    ("examples/hello-world-sandbox/hello-world.yaml", 0, "Sandbox"),
    ("examples/hermes-agent/sandbox.yaml", 0, "Sandbox"),
    ("examples/hermes-agents-as-a-service/10-sandboxtemplate.yaml", 0, "SandboxTemplate"),
    ("examples/hermes-agents-as-a-service/20-sandboxwarmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/hermes-agents-as-a-service/30-claim-alice.yaml", 0, "SandboxClaim"),
    ("examples/hermes-agents-as-a-service/40-claim-rejected.yaml", 0, "SandboxClaim"),
    ("examples/hpa-swp-scaling/python-sandbox-template.yaml", 0, "SandboxTemplate"),
    ("examples/hpa-swp-scaling/sandboxwarmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/irsa-simulation-localstack/sandbox.yaml", 0, "Sandbox"),
    ("examples/jupyterlab/jupyterlab-full.yaml", 1, "Sandbox"),
    ("examples/jupyterlab/jupyterlab.yaml", 0, "Sandbox"),
    ("examples/kata-aks/sandboxclaim.yaml", 0, "SandboxClaim"),
    ("examples/kata-aks/sandboxtemplate.yaml", 0, "SandboxTemplate"),
    ("examples/kata-aks/sandboxwarmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/kata-aks-sandbox/sandbox-kata-aks.yaml", 0, "Sandbox"),
    ("examples/kata-gke-sandbox/sandbox-kata-gke.yaml", 0, "Sandbox"),
    ("examples/keda-scale-to-zero/python-sandbox-template.yaml", 0, "SandboxTemplate"),
    ("examples/keda-scale-to-zero/sandboxwarmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/langchain/deployment.yaml", 2, "Sandbox"),
    ("examples/latebind-storage-gke-sandbox/sandbox-warmpool.yaml", 0, "SandboxTemplate"),
    ("examples/latebind-storage-gke-sandbox/sandbox-warmpool.yaml", 1, "SandboxWarmPool"),
    ("examples/manual-pdb/sandboxclaim.yaml", 0, "SandboxClaim"),
    ("examples/manual-pdb/sandboxtemplate.yaml", 0, "SandboxTemplate"),
    ("examples/manual-pdb/sandboxwarmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/mcp-server-sandbox/sandbox.yaml", 0, "Sandbox"),
    ("examples/n8n-mcp/source/template.yaml", 0, "SandboxTemplate"),
    ("examples/n8n-mcp/source/warmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/nono-sandbox/sandbox.yaml", 0, "Sandbox"),
    ("examples/nono-sandbox/sandboxtemplate.yaml", 0, "SandboxTemplate"),
    ("examples/nullclaw-sandbox/nullclaw-sandbox.yaml", 0, "Sandbox"),
    ("examples/openclaw-gvisor-sandbox/openclaw-claim.yaml", 0, "SandboxClaim"),
    ("examples/openclaw-gvisor-sandbox/openclaw-template.yaml", 0, "SandboxTemplate"),
    ("examples/openclaw-gvisor-sandbox/openclaw-warmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/openclaw-kata-aks-sandbox/openclaw-sandbox-kata-aks.yaml", 0, "Sandbox"),
    ("examples/pi-code-agent/sandbox.yaml", 0, "Sandbox"),
    ("examples/playwright-sandbox/playwright-sandbox.yaml", 0, "Sandbox"),
    ("examples/policy/kyverno/.chainsaw-tests/setup-sandbox.yaml", 0, "Sandbox"),
    ("examples/python-runtime-sandbox/sandbox-python-kind.yaml", 0, "Sandbox"),
    ("examples/ray-integration/direct-proxy/manifest.yaml", 0, "SandboxTemplate"),
    ("examples/ray-integration/direct-proxy/manifest.yaml", 1, "SandboxWarmPool"),
    ("examples/ray-integration/ray-autopilot-setup.yaml", 0, "SandboxTemplate"),
    ("examples/ray-integration/ray-autopilot-setup.yaml", 1, "SandboxWarmPool"),
    ("examples/sandbox-ksa/sandbox.yaml", 0, "Sandbox"),
    ("examples/sandboxd-sandbox/deploy/a-runtime-image.yaml", 0, "SandboxTemplate"),
    ("examples/sandboxd-sandbox/deploy/a-runtime-image.yaml", 1, "SandboxWarmPool"),
    ("examples/sandboxd-sandbox/deploy/b-inject-binary.yaml", 0, "SandboxTemplate"),
    ("examples/sandboxd-sandbox/deploy/b-inject-binary.yaml", 1, "SandboxWarmPool"),
    ("examples/sandboxd-sandbox/sandbox-template.yaml", 0, "SandboxTemplate"),
    ("examples/vscode-sandbox/base/vscode-sandbox.yaml", 0, "Sandbox"),
    ("examples/warmpool-quickstart/llm.yaml", 0, "SandboxTemplate"),
    ("examples/warmpool-quickstart/sandbox-claim.yaml", 0, "SandboxClaim"),
    ("examples/warmpool-quickstart/sandboxtemplate.yaml", 0, "SandboxTemplate"),
    ("examples/warmpool-quickstart/sandboxwarmpool.yaml", 0, "SandboxWarmPool"),
    ("examples/warmpool-quickstart/secure-sandboxtemplate.yaml", 0, "SandboxTemplate"),
    ("examples/windows-sandbox/windows-sandbox.yaml", 0, "Sandbox"),
    ("test/e2e/clients/python/test_manifests/sandbox_template.yaml", 0, "SandboxTemplate"),
    ("test/e2e/clients/python/test_manifests/sandbox_warmpool.yaml", 0, "SandboxWarmPool"),
    ("test/e2e/clients/typescript/test-manifests/sandbox-coldpool.yaml", 0, "SandboxWarmPool"),
    ("test/e2e/clients/typescript/test-manifests/sandbox-template.yaml", 0, "SandboxTemplate"),
    ("test/e2e/clients/typescript/test-manifests/sandbox-warmpool.yaml", 0, "SandboxWarmPool"),
]
NOT_MANIFESTS = ("dev/load-test/", "test/benchmarks/")
KUSTOMIZE_PATCHES = re.compile(r"/overlays/[^/]+/patch-[^/]+\.yaml$")


def test_upstream_examples_are_the_expected_ones(upstream: Path) -> None:
    """The list above is every document of our kinds in the module's manifests: none missing
    (a file gone or changed fails here and in its own case), none unlisted."""
    found = []
    for path in sorted([*upstream.rglob("*.yaml"), *upstream.rglob("*.yml")]):
        rel = path.relative_to(upstream).as_posix()
        if rel.startswith(NOT_MANIFESTS) or KUSTOMIZE_PATCHES.search(rel):
            continue
        if "agents.x-k8s.io/" not in path.read_text():
            continue
        found += [(rel, i, d["kind"]) for i, d in enumerate(example_docs(path)) if ours(d)]
    assert found == UPSTREAM_EXAMPLES
    assert {kind for _, _, kind in UPSTREAM_EXAMPLES} == set(OUR_KINDS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("filename", "index", "kind"),
    UPSTREAM_EXAMPLES,
    ids=[f"{f}#{i}" for f, i, _ in UPSTREAM_EXAMPLES],
)
def test_upstream_example_applies_with_strict_validation(
    cluster: DevCluster,
    upstream: Path,
    namespace: str,
    filename: str,
    index: int,
    kind: str,
    version: str,
) -> None:
    doc = example_docs(upstream / filename)[index]
    assert ours(doc)
    assert doc["kind"] == kind
    obj = copy.deepcopy(doc)
    obj["apiVersion"] = f"{OUR_KINDS[obj['kind']].group}/{version}"
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["name"] = _substitute(obj["metadata"]["name"], index)
    created = create(cluster, obj, namespace)
    assert dropped(obj, created, "spec") == []


@pytest.mark.parametrize("version", VERSIONS)
def test_upstream_example_file_applies_with_kubectl_validate_strict(
    cluster: DevCluster, upstream: Path, namespace: str, tmp_path: Path, version: str
) -> None:
    """kubectl's own path: client-side apply, strict validation, the deprecation warning shown
    for v1alpha1 (as users' manifests of the 0.4.x era say) and only for it."""
    quickstart = upstream / "examples" / "warmpool-quickstart"
    docs = _load_docs(quickstart / "sandboxtemplate.yaml")
    docs += _load_docs(quickstart / "sandboxwarmpool.yaml")
    assert [d["kind"] for d in docs] == ["SandboxTemplate", "SandboxWarmPool"]
    text = yaml.safe_dump_all(
        [
            {
                **d,
                "apiVersion": f"{OUR_KINDS[d['kind']].group}/{version}",
                "metadata": {**d["metadata"], "namespace": namespace},
            }
            for d in docs
        ]
    )
    path = tmp_path / "examples.yaml"
    path.write_text(text)
    out = cluster.kubectl("apply", "--validate=strict", "-f", str(path))
    assert "sandboxtemplate.extensions.agents.x-k8s.io/secure-datascience-template created" in (
        out.stdout
    )
    assert "sandboxwarmpool.extensions.agents.x-k8s.io/sandboxwarmpool-example created" in (
        out.stdout
    )
    warning = "SandboxWarmPool is deprecated; use extensions.agents.x-k8s.io/v1beta1"
    assert (warning in out.stderr) == (version == "v1alpha1"), out.stderr


# --------------------------------------------------------------------------- (c) rejections
def pod_template(**container: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "i", **container}]}}


MODE_DISAGREES = (
    "spec.operatingMode and spec.replicas disagree: Suspended means replicas 0 and Running "
    "means replicas 1; change both together, or remove spec.replicas"
)

INVALID: list[tuple[str, dict[str, Any], int, list[str]]] = [
    (
        "sandbox-suspended-with-replicas-1",
        sandbox("s", operatingMode="Suspended", replicas=1),
        422,
        [MODE_DISAGREES],
    ),
    (
        "sandbox-running-with-replicas-0",
        sandbox("s", operatingMode="Running", replicas=0),
        422,
        [MODE_DISAGREES],
    ),
    (
        "sandbox-unknown-operating-mode",
        sandbox("s", operatingMode="Paused"),
        422,
        ['spec.operatingMode: Unsupported value: "Paused"', '"Running", "Suspended"'],
    ),
    (
        "pool-replicas-negative",
        ext("SandboxWarmPool", "p", {"replicas": -1, "sandboxTemplateRef": {"name": "t"}}),
        422,
        ["spec.replicas", "should be greater than or equal to 0"],
    ),
    (
        "pool-unknown-update-strategy",
        ext(
            "SandboxWarmPool",
            "p",
            {
                "replicas": 1,
                "sandboxTemplateRef": {"name": "t"},
                "updateStrategy": {"type": "Rolling"},
            },
        ),
        422,
        ['spec.updateStrategy.type: Unsupported value: "Rolling"', '"Recreate", "OnReplenish"'],
    ),
    (
        "pool-empty-template-name",
        ext("SandboxWarmPool", "p", {"replicas": 1, "sandboxTemplateRef": {"name": ""}}),
        422,
        ["sandboxTemplateRef.name must name a SandboxTemplate in the same namespace"],
    ),
    (
        "claim-without-a-ref",
        ext("SandboxClaim", "c", {"warmpool": "none"}),
        422,
        [
            "exactly one of spec.sandboxTemplateRef and spec.warmPoolRef must be set",
            "spec.warmpool is only allowed with spec.sandboxTemplateRef",
        ],
    ),
    (
        "claim-empty-template-name",
        ext("SandboxClaim", "c", {"sandboxTemplateRef": {"name": ""}}),
        422,
        ["sandboxTemplateRef.name must name a SandboxTemplate in the same namespace"],
    ),
    (
        "claim-bad-warmpool",
        ext("SandboxClaim", "c", {"sandboxTemplateRef": {"name": "t"}, "warmpool": "Fast_Pool"}),
        422,
        ['warmpool must be "none", "default" or the name of a SandboxWarmPool'],
    ),
    (
        "claim-bad-shutdown-policy",
        ext(
            "SandboxClaim",
            "c",
            {"sandboxTemplateRef": {"name": "t"}, "lifecycle": {"shutdownPolicy": "Later"}},
        ),
        422,
        ['spec.lifecycle.shutdownPolicy: Unsupported value: "Later"'],
    ),
    (
        "claim-negative-ttl",
        ext(
            "SandboxClaim",
            "c",
            {"sandboxTemplateRef": {"name": "t"}, "lifecycle": {"ttlSecondsAfterFinished": -5}},
        ),
        422,
        ["spec.lifecycle.ttlSecondsAfterFinished", "greater than or equal to 0"],
    ),
    (
        "sandbox-replicas-2",
        sandbox("s", replicas=2),
        422,
        ["spec.replicas", "should be less than or equal to 1"],
    ),
    (
        "sandbox-mistyped-container-field",
        sandbox("s", podTemplate=pod_template(imagee="busybox")),
        400,
        ['unknown field "spec.podTemplate.spec.containers[0].imagee"'],
    ),
    (
        "sandbox-wrong-type-in-pod-spec",
        sandbox("s", podTemplate=pod_template(ports=[{"containerPort": "eighty"}])),
        422,
        ["spec.podTemplate.spec.containers[0].ports[0].containerPort", "integer"],
    ),
    (
        "sandbox-bad-quantity",
        sandbox("s", podTemplate=pod_template(resources={"limits": {"cpu": "lots"}})),
        422,
        ["spec.podTemplate.spec.containers[0].resources.limits.cpu"],
    ),
    (
        "sandbox-no-containers",
        sandbox("s", podTemplate={"spec": {"containers": []}}),
        422,
        ["podTemplate.spec.containers must list at least one container"],
    ),
    (
        "sandbox-volume-claim-template-without-name",
        sandbox("s", volumeClaimTemplates=[{"spec": {"accessModes": ["ReadWriteOnce"]}}]),
        422,
        ["volumeClaimTemplates[].metadata.name is required"],
    ),
    (
        "sandbox-bad-shutdown-policy",
        sandbox("s", shutdownPolicy="Never"),
        422,
        ['spec.shutdownPolicy: Unsupported value: "Never"', '"Delete", "Retain"'],
    ),
    (
        "sandbox-bad-shutdown-time",
        sandbox("s", shutdownTime="tomorrow"),
        422,
        ["spec.shutdownTime", "date-time"],
    ),
    (
        "template-mistyped-container-field",
        ext("SandboxTemplate", "t", {"podTemplate": pod_template(imagePullPolicyy="Always")}),
        400,
        ['unknown field "spec.podTemplate.spec.containers[0].imagePullPolicyy"'],
    ),
    (
        "template-bad-network-policy-management",
        ext(
            "SandboxTemplate",
            "t",
            {"podTemplate": pod_template(), "networkPolicyManagement": "Auto"},
        ),
        422,
        ['spec.networkPolicyManagement: Unsupported value: "Auto"'],
    ),
    (
        "template-mistyped-egress-rule",
        ext(
            "SandboxTemplate",
            "t",
            {"podTemplate": pod_template(), "networkPolicy": {"egress": [{"too": []}]}},
        ),
        400,
        ['unknown field "spec.networkPolicy.egress[0].too"'],
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("case", "obj", "code", "messages"), INVALID, ids=[case for case, *_ in INVALID]
)
def test_invalid_object_is_rejected_with_a_clear_message(
    cluster: DevCluster,
    namespace: str,
    case: str,
    obj: dict[str, Any],
    code: int,
    messages: list[str],
    version: str,
) -> None:
    obj = copy.deepcopy(obj)
    obj["apiVersion"] = obj["apiVersion"].rsplit("/", 1)[0] + f"/{version}"
    status, message = rejection(lambda: create(cluster, obj, namespace))
    assert status == code, message
    for expected in messages:
        assert expected in message


def test_boundary_values_are_accepted(cluster: DevCluster, namespace: str) -> None:
    create(cluster, sandbox("zero", replicas=0), namespace)
    create(cluster, sandbox("one", replicas=1), namespace)
    create(cluster, sandbox("suspended", operatingMode="Suspended"), namespace)
    create(cluster, sandbox("suspended-0", operatingMode="Suspended", replicas=0), namespace)
    create(cluster, sandbox("running", operatingMode="Running"), namespace)
    create(cluster, sandbox("running-1", operatingMode="Running", replicas=1), namespace)
    create(
        cluster,
        ext("SandboxWarmPool", "zero", {"replicas": 0, "sandboxTemplateRef": {"name": "t"}}),
        namespace,
    )
    for i, policy in enumerate(["none", "default", "", "my-pool.a"]):
        create(
            cluster,
            ext(
                "SandboxClaim",
                f"claim-{i}",
                {
                    "sandboxTemplateRef": {"name": "t"},
                    "warmpool": policy,
                    "lifecycle": {"ttlSecondsAfterFinished": 0},
                },
            ),
            namespace,
        )


def test_scale_subresource_respects_the_bounds(cluster: DevCluster, namespace: str) -> None:
    create(cluster, sandbox("scaled"), namespace)
    cluster.kubectl("scale", "-n", namespace, "sandbox/scaled", "--replicas=0")
    assert call(cluster, "GET", kinds.SANDBOX.path(namespace, "scaled"))["spec"]["replicas"] == 0
    out = cluster.kubectl("scale", "-n", namespace, "sandbox/scaled", "--replicas=2", check=False)
    assert out.returncode != 0
    assert "less than or equal to 1" in out.stderr

    # /scale maps to .spec.replicas only, and the apiserver cannot *read* a scale without that
    # field (no default any more, beside operatingMode): GET /scale is a 500 until replicas is
    # set. `kubectl scale` (a patch) still works and sets it. Our controllers write replicas 1.
    create(cluster, sandbox("unset"), namespace)
    code, msg = rejection(
        lambda: call(cluster, "GET", kinds.SANDBOX.path(namespace, "unset") + "/scale")
    )
    assert code == 500
    assert msg.endswith('the spec replicas field ".spec.replicas" does not exist')
    cluster.kubectl("scale", "-n", namespace, "sandbox/unset", "--replicas=1")
    assert call(cluster, "GET", kinds.SANDBOX.path(namespace, "unset"))["spec"]["replicas"] == 1
    # with operatingMode set, /scale may only agree with it (the CEL rule runs on /scale too)
    create(cluster, sandbox("mode", operatingMode="Suspended"), namespace)
    cluster.kubectl("scale", "-n", namespace, "sandbox/mode", "--replicas=0")
    out = cluster.kubectl("scale", "-n", namespace, "sandbox/mode", "--replicas=1", check=False)
    assert out.returncode != 0
    assert MODE_DISAGREES in out.stderr

    pool = ext("SandboxWarmPool", "scaled", {"replicas": 1, "sandboxTemplateRef": {"name": "t"}})
    create(cluster, pool, namespace)
    cluster.kubectl("scale", "-n", namespace, "swp/scaled", "--replicas=7")
    scale = call(cluster, "GET", kinds.SANDBOX_WARM_POOL.path(namespace, "scaled") + "/scale")
    assert scale["spec"]["replicas"] == 7
    out = cluster.kubectl("scale", "-n", namespace, "swp/scaled", "--replicas=-1", check=False)
    assert out.returncode != 0


VCT_IMMUTABLE = "volumeClaimTemplates is immutable"  # how upstream v1.0.1's message starts


def vct(name: str, size: str = "1Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sandboxs_volume_claim_templates_cannot_change(
    cluster: DevCluster, namespace: str, version: str
) -> None:
    """As upstream v1.0.1 (its e2e test TestSandboxVolumeClaimTemplatesImmutable): set, changed
    or removed after creation is refused; the rest of the spec still changes."""
    path = OUR_KINDS["Sandbox"].at_version(version).path(namespace)
    create(cluster, sandbox("with", version, volumeClaimTemplates=[vct("data")]), namespace)
    create(cluster, sandbox("without", version), namespace)
    for name, templates in (
        ("with", [vct("data"), vct("more")]),
        ("with", [vct("data", "2Gi")]),
        ("with", None),
        ("without", [vct("data")]),
    ):
        current = call(cluster, "GET", f"{path}/{name}")
        if templates is None:
            current["spec"].pop("volumeClaimTemplates")
        else:
            current["spec"]["volumeClaimTemplates"] = templates
        code, message = rejection(
            functools.partial(call, cluster, "PUT", f"{path}/{name}", current)
        )
        assert code == 422, message
        assert VCT_IMMUTABLE in message
    current = call(cluster, "GET", f"{path}/with")
    current["spec"]["shutdownTime"] = "2099-01-01T00:00:00Z"
    assert call(cluster, "PUT", f"{path}/with", current)["spec"]["volumeClaimTemplates"] == [
        vct("data")
    ]


# --------------------------------------------------------------------------- (d) printer columns
def table(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def test_kubectl_get_shows_the_printer_columns(cluster: DevCluster, namespace: str) -> None:
    sb = create(cluster, sandbox("shown"), namespace)
    sb["status"] = {
        "replicas": 1,
        "selector": "agents.x-k8s.io/sandbox-name-hash=12345678",
        "podIPs": ["10.0.0.7"],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "DependenciesReady",
                "message": "Pod is Ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    call(cluster, "PUT", kinds.SANDBOX.path(namespace, "shown") + "/status", sb)
    pool = create(
        cluster,
        ext("SandboxWarmPool", "shown", {"replicas": 3, "sandboxTemplateRef": {"name": "tpl"}}),
        namespace,
    )
    pool["status"] = {"replicas": 3, "readyReplicas": 2, "selector": "x=y"}
    call(cluster, "PUT", kinds.SANDBOX_WARM_POOL.path(namespace, "shown") + "/status", pool)
    claim = create(
        cluster, ext("SandboxClaim", "shown", {"sandboxTemplateRef": {"name": "tpl"}}), namespace
    )
    claim["status"] = {"sandbox": {"name": "shown"}, "conditions": sb["status"]["conditions"]}
    call(cluster, "PUT", kinds.SANDBOX_CLAIM.path(namespace, "shown") + "/status", claim)

    out = cluster.kubectl("get", "-n", namespace, "sandboxes,sandboxwarmpools").stdout
    sandboxes, pools = out.strip().split("\n\n")
    rows = table(sandboxes)
    assert rows[0] == ["NAME", "READY", "REASON", "REPLICAS", "AGE"]
    assert rows[1][:4] == ["sandbox.agents.x-k8s.io/shown", "True", "DependenciesReady", "1"]
    rows = table(pools)
    assert rows[0] == ["NAME", "DESIRED", "CURRENT", "READY", "TEMPLATE", "AGE"]
    assert rows[1][:5] == ["sandboxwarmpool.extensions.agents.x-k8s.io/shown", "3", "3", "2", "tpl"]

    rows = table(cluster.kubectl("get", "-n", namespace, "sandboxclaims").stdout)
    assert rows[0] == ["NAME", "READY", "SANDBOX", "REASON", "AGE"]
    assert rows[1][:4] == ["shown", "True", "shown", "DependenciesReady"]

    wide = table(cluster.kubectl("get", "-n", namespace, "sandbox", "-o", "wide").stdout)
    assert wide[0][-3:] == ["POD IPS", "SERVICE", "SHUTDOWN TIME"]
    assert wide[1][-1] == '["10.0.0.7"]'

    rows = table(cluster.kubectl("get", "-n", namespace, "swp").stdout)  # short name
    assert rows[1][0] == "shown"
