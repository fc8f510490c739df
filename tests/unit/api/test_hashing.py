"""Hashes: FNV-1a name hashes (known vectors) and the Go-compatible pod-template hash.

The pod-template vectors below were computed by Go itself: ``go run ./hack/openapi/gojson hash``
unmarshals each template into the typed structs (k8s.io/api v0.36.3) and hashes ``json.Marshal``
of it, exactly as upstream does. Our serialisation must match byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.gojson import GoJSONError, go_string, go_types
from agentsandbox.api.hashing import (
    fnv1a32,
    name_hash,
    pod_template_hash,
    pod_template_json,
    sandbox_blueprint_hash,
    sandbox_blueprint_json,
    sandbox_selector,
    template_ref_hash,
    warm_pool_selector,
)

# NameHash vectors (docs/design/architecture.md, "Names and hashes")
SPEC_VECTORS = [
    ("sandbox-name", "ab179450"),
    ("test-sandbox", "86489827"),
    ("my-sandbox", "374de8f5"),
    ("", "811c9dc5"),
    ("test-pool", "59733166"),
    ("test-template", "69155462"),
    ("other-template", "c349d772"),
    ("pool", "91dd7983"),
    ("tpl", "9d22159f"),
]


@pytest.mark.parametrize(("text", "expected"), SPEC_VECTORS)
def test_name_hash_spec_vectors(text: str, expected: str) -> None:
    assert name_hash(text) == expected


def test_fnv1a32_is_the_32_bit_fnv1a_primitive() -> None:
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C  # published FNV-1a test vector
    assert fnv1a32(b"foobar") == 0xBF9CF968  # published FNV-1a test vector


def test_name_hash_is_always_eight_lower_case_hex_digits() -> None:
    for text in ("a", "x" * 300, "ünïcødé", "sandbox-0"):
        h = name_hash(text)
        assert len(h) == 8
        assert h == h.lower()
        int(h, 16)


def test_name_hash_hashes_utf8_bytes() -> None:
    assert name_hash("é") == f"{fnv1a32('é'.encode()):08x}"


def test_template_ref_hash_is_the_name_hash_of_the_template_name() -> None:
    assert template_ref_hash("test-template") == "69155462"
    assert template_ref_hash("other-template") == "c349d772"


def test_selectors_use_the_tracking_labels() -> None:
    assert sandbox_selector("sandbox-name") == f"{keys.LABEL_SANDBOX_NAME_HASH}=ab179450"
    assert warm_pool_selector("test-pool") == f"{keys.LABEL_WARM_POOL_SANDBOX}=59733166"


# --------------------------------------------------------------------------- pod-template hash
def test_pod_template_hash_spec_example_json_and_hash() -> None:
    tpl = {"spec": {"containers": [{"name": "test-container", "image": "test-image"}]}}
    assert pod_template_json(tpl) == (
        '{"spec":{"containers":[{"name":"test-container","image":"test-image",'
        '"resources":{}}]},"metadata":{}}'
    )
    assert pod_template_hash(tpl) == "2473a66c"


def test_pod_template_hash_ignores_key_order_and_unknown_fields() -> None:
    a = {"spec": {"containers": [{"image": "test-image", "name": "test-container"}]}}
    b = {
        "metadata": {},
        "spec": {"containers": [{"name": "test-container", "image": "test-image", "x": 1}]},
    }
    assert pod_template_hash(a) == pod_template_hash(b) == "2473a66c"


GO_VECTORS: list[tuple[dict[str, Any], str]] = [
    (
        {
            "metadata": {"labels": {"b": "2", "a": "1"}, "annotations": {"x": "<&>"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "i",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "resources": {
                            "limits": {"cpu": "1.5", "memory": "1024Mi"},
                            "requests": {
                                "cpu": "500m",
                                "memory": "1e3",
                                "ephemeral-storage": "0.5Gi",
                            },
                        },
                    }
                ],
                "automountServiceAccountToken": False,
                "dnsPolicy": "None",
                "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]},
            },
        },
        "197765a0",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "i",
                        "readinessProbe": {
                            "httpGet": {"path": "/", "port": 8888},
                            "periodSeconds": 1,
                            "initialDelaySeconds": 0,
                        },
                        "livenessProbe": {"tcpSocket": {"port": "http"}},
                        "env": [
                            {"name": "A", "value": ""},
                            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        ],
                        "securityContext": {"allowPrivilegeEscalation": False, "runAsUser": 0},
                    }
                ],
                "restartPolicy": "OnFailure",
                "volumes": [
                    {"name": "v", "emptyDir": {"sizeLimit": "1Gi"}},
                    {
                        "name": "d",
                        "downwardAPI": {
                            "items": [{"path": "p", "resourceFieldRef": {"resource": "limits.cpu"}}]
                        },
                    },
                    {
                        "name": "e",
                        "ephemeral": {
                            "volumeClaimTemplate": {
                                "metadata": {"labels": {"a": "b"}},
                                "spec": {
                                    "accessModes": ["ReadWriteOnce"],
                                    "resources": {"requests": {"storage": "1Gi"}},
                                },
                            }
                        },
                    },
                ],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": ""}],
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
                "initContainers": [],
                "nodeSelector": {},
            }
        },
        "7618a97a",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "q",
                        "image": "i",
                        "resources": {
                            "limits": {
                                "a": "+1",
                                "b": "01Ki",
                                "c": "1E3",
                                "d": "1000",
                                "e": "1.5Ki",
                                "f": "0.1n",
                                "g": "100",
                                "h": "12e6",
                                "i": "1.5e3",
                                "j": "-500m",
                                "k": "2048",
                                "l": "1Mi",
                                "m": "0.0001",
                                "n": "5Ei",
                                "o": "1e-3",
                                "p": "7Ki",
                                "q": "8Ki",
                                "r": "0",
                                "s": "0Mi",
                                "t": 123456789012,
                                "u": "1.G",
                                "v": "10e2",
                                "w": "1024Ki",
                                "x": "1.1Ki",
                                "y": "0.5Ki",
                                "z": "100E",
                            }
                        },
                    }
                ],
                "terminationGracePeriodSeconds": 0,
                "hostNetwork": False,
                "overhead": {"cpu": "0.25"},
            }
        },
        "7be22639",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "unicode",
                        "image": "i",
                        "command": ["echo", "héllo \u2028 \t\n \u0001 \u007f \b \f 😀"],
                        "args": [],
                    }
                ]
            }
        },
        "5f09d69c",
    ),
    (
        {
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "securityContext": {},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "k", "operator": "In", "values": ["v"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "z",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"a": "b"}},
                    }
                ],
            },
            "metadata": {},
        },
        "756bf5e1",
    ),
]


@pytest.mark.parametrize(("template", "expected"), GO_VECTORS, ids=[h for _, h in GO_VECTORS])
def test_pod_template_hash_matches_go(template: dict[str, Any], expected: str) -> None:
    assert pod_template_hash(template) == expected


def test_pod_template_json_go_details() -> None:
    """The Go rules that matter: struct order, omitempty, zero structs, canonical quantities."""
    out = json.loads(pod_template_json(GO_VECTORS[1][0]))
    volumes = out["spec"]["volumes"]
    assert list(out["spec"])[:2] == ["volumes", "containers"]  # Go field order, not ours
    # non-pointer Quantity without omitzero: written as "0" even though absent
    assert volumes[1]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"] == "0"
    # empty non-pointer slices/maps with omitempty vanish; explicit false/0 on pointers stay
    assert "initContainers" not in out["spec"]
    assert "nodeSelector" not in out["spec"]
    assert out["spec"]["containers"][0]["securityContext"]["runAsUser"] == 0
    assert out["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]


def test_pod_template_hash_rejects_what_go_cannot_decode() -> None:
    with pytest.raises(GoJSONError):
        pod_template_hash({"spec": {"containers": [{"name": 5}]}})
    with pytest.raises(GoJSONError):
        pod_template_hash({"spec": {"containers": "nope"}})
    with pytest.raises(GoJSONError):
        pod_template_hash(
            {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "lots"}}}]}}
        )


def test_go_string_escapes_like_go() -> None:
    assert go_string("<a&b>") == '"\\u003ca\\u0026b\\u003e"'
    assert go_string("\u2028\u2029") == '"\\u2028\\u2029"'
    assert go_string('"\\\n\t\b\f\x01') == '"\\"\\\\\\n\\t\\b\\f\\u0001"'
    assert go_string("é😀") == '"é😀"'


# --------------------------------------------------------------------------- Go layout table
def _openapi_defs() -> dict[str, Any]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "hack" / "openapi"
    defs: dict[str, Any] = {}
    for name in ("core-v1.json", "networking-v1.json"):
        defs.update(json.loads((root / name).read_text())["schemas"])
    return defs


def test_go_layout_covers_every_openapi_field_of_the_same_kubernetes_version() -> None:
    """The Go struct table and the OpenAPI snapshot describe the same types field for field."""
    types = go_types()
    defs = _openapi_defs()
    compared = 0
    for go_name, fields in types.structs.items():
        if not go_name.startswith(("k8s.io/api/", "k8s.io/apimachinery/")):
            continue
        oa_name = "io." + go_name.replace("/", ".").replace("k8s.io.", "k8s.", 1)
        if oa_name not in defs or "properties" not in defs[oa_name]:
            continue
        assert {f.name for f in fields} == set(defs[oa_name]["properties"]), go_name
        compared += 1
    assert compared > 90
    assert types.roots["podTemplate"] == "@agentsandbox.PodTemplate"
    assert [f.name for f in types.structs["agentsandbox.PodTemplate"]] == ["spec", "metadata"]


# --------------------------------------------------------------------------- blueprint hash
# agents.x-k8s.io/sandbox-template-hash (upstream c409f9fa, #1102) = NameHash(json.Marshal of the
# template's typed SandboxBlueprint). The Go types are upstream's api/v1beta1 SandboxBlueprint,
# PersistentVolumeClaimTemplate (embedded EmbeddedObjectMetadata tagged "metadata") and
# EmbeddedObjectMetadata (da3b5688, #995), mirrored in hack/openapi/gojson/main.go with the same
# field order and json tags (read from kubernetes-sigs/agent-sandbox api/v1beta1/sandbox_types.go).
# Expected hashes and JSON were computed by Go, locally and offline (module cache, GOPROXY=off):
#   cd hack/openapi/gojson && go run . blueprint-hash < blueprints.json
# i.e. json.Unmarshal into SandboxBlueprint (k8s.io/api v0.36.3), json.Marshal, FNV-1a 32.
_C = {"containers": [{"name": "test-container", "image": "test-image"}]}
BLUEPRINT_GO_VECTORS: list[tuple[dict[str, Any], str, str]] = [
    (
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            }
        },
        "c972d31f",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}]},"metadata":{}}}',
    ),
    (
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "volumeClaimTemplates": [],
        },
        "c972d31f",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}]},"metadata":{}}}',
    ),
    (
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "service": True,
        },
        "80224234",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}]},"metadata":{}},"service":true}',
    ),
    (
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "service": False,
        },
        "10094a53",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}]},"metadata":{}},"service":false}',
    ),
    (
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]},
                "metadata": {"labels": {"app": "x"}},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
        "0836b1d4",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}]},"metadata":{"labels":{"app":"x"}}},"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]}',
    ),
    (
        {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": "test-image"}]}
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "2Gi"}},
                    },
                }
            ],
        },
        "c1fb1707",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}]},"metadata":{}},"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"2Gi"}}}}]}',
    ),
    (
        {
            "networkPolicyManagement": "Unmanaged",
            "podTemplate": {
                "metadata": {"annotations": {"a": "<b&c>"}},
                "spec": {
                    "containers": [{"name": "test-container", "image": "test-image"}],
                    "automountServiceAccountToken": False,
                },
            },
            "service": True,
            "volumeClaimTemplates": [
                {
                    "metadata": {
                        "name": "data",
                        "labels": {"tier": "fast"},
                        "annotations": {"note": "x"},
                    },
                    "spec": {
                        "storageClassName": "standard",
                        "volumeMode": "Filesystem",
                        "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                        "resources": {
                            "requests": {"storage": "1024Mi"},
                            "limits": {"storage": "1.5Gi"},
                        },
                        "selector": {
                            "matchLabels": {"disk": "ssd"},
                            "matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}],
                        },
                        "dataSource": {
                            "kind": "VolumeSnapshot",
                            "name": "snap",
                            "apiGroup": "snapshot.storage.k8s.io",
                        },
                    },
                },
                {"metadata": {}, "spec": {"resources": {}}},
                {
                    "spec": {
                        "accessModes": ["ReadWriteMany"],
                        "volumeAttributesClassName": "gold",
                        "dataSourceRef": {
                            "kind": "PersistentVolumeClaim",
                            "name": "src",
                            "namespace": "other",
                        },
                    }
                },
            ],
        },
        "d46c316b",
        '{"podTemplate":{"spec":{"containers":[{"name":"test-container","image":"test-image","resources":{}}],"automountServiceAccountToken":false},"metadata":{"annotations":{"a":"\\u003cb\\u0026c\\u003e"}}},"volumeClaimTemplates":[{"metadata":{"name":"data","labels":{"tier":"fast"},"annotations":{"note":"x"}},"spec":{"accessModes":["ReadWriteOnce","ReadOnlyMany"],"selector":{"matchLabels":{"disk":"ssd"},"matchExpressions":[{"key":"z","operator":"In","values":["a"]}]},"resources":{"limits":{"storage":"1536Mi"},"requests":{"storage":"1Gi"}},"storageClassName":"standard","volumeMode":"Filesystem","dataSource":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"snap"}}},{"metadata":{},"spec":{"resources":{}}},{"metadata":{},"spec":{"accessModes":["ReadWriteMany"],"resources":{},"dataSourceRef":{"apiGroup":null,"kind":"PersistentVolumeClaim","name":"src","namespace":"other"},"volumeAttributesClassName":"gold"}}],"service":true}',
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected", "go_json"),
    BLUEPRINT_GO_VECTORS,
    ids=[h for _, h, _ in BLUEPRINT_GO_VECTORS],
)
def test_sandbox_blueprint_hash_matches_go(
    spec: dict[str, Any], expected: str, go_json: str
) -> None:
    assert sandbox_blueprint_json(spec) == go_json
    assert sandbox_blueprint_hash(spec) == expected


def test_sandbox_blueprint_hash_covers_every_blueprint_field_and_only_those() -> None:
    base = {"podTemplate": {"spec": _C}}
    h = sandbox_blueprint_hash(base)
    # empty VCT list and unset service are omitted (omitempty), like Go
    assert sandbox_blueprint_hash({**base, "volumeClaimTemplates": [], "service": None}) == h
    # fields outside the blueprint (the template's network policy, lifecycle) do not count
    assert sandbox_blueprint_hash({**base, "networkPolicyManagement": "Unmanaged"}) == h
    assert sandbox_blueprint_hash({**base, "service": False}) != h
    assert sandbox_blueprint_hash({**base, "service": True}) != h
    vct = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
    with_vct = sandbox_blueprint_hash({**base, "volumeClaimTemplates": [vct]})
    assert with_vct != h
    # quantities are canonical: 1024Mi is 1Gi
    vct2 = {
        "metadata": {"name": "data"},
        "spec": {"resources": {"requests": {"storage": "1024Mi"}}},
    }
    assert sandbox_blueprint_hash({**base, "volumeClaimTemplates": [vct2]}) == with_vct
    # the blueprint's pod part is the pod-template hash's input, wrapped
    assert (
        sandbox_blueprint_json(base)
        == f'{{"podTemplate":{pod_template_json(base["podTemplate"])}}}'
    )


def test_sandbox_blueprint_hash_rejects_what_go_cannot_decode() -> None:
    base = {"podTemplate": {"spec": _C}}
    with pytest.raises(GoJSONError):
        sandbox_blueprint_hash({**base, "service": "yes"})
    with pytest.raises(GoJSONError):
        sandbox_blueprint_hash({**base, "volumeClaimTemplates": {"data": {}}})
    with pytest.raises(GoJSONError):
        sandbox_blueprint_hash(
            {
                **base,
                "volumeClaimTemplates": [{"spec": {"resources": {"requests": {"storage": "x"}}}}],
            }
        )
