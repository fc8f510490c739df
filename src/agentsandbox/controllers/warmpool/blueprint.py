"""SandboxWarmPool: the blueprint rules (pure): the Sandbox a pool creates, and whether a member
still matches its template (staleness, by hash labels or by full comparison).

The pool's decision (:mod:`agentsandbox.controllers.warmpool.plan`) builds every create from
:func:`build_blueprint` and deletes what :func:`is_sandbox_stale` finds stale; the claim
controller asks the same question before handing out a sandbox of a ``Recreate`` pool.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults, service_links_defaulted
from agentsandbox.api.equality import pod_spec_equal, typed_equal
from agentsandbox.api.gojson import GoJSONError
from agentsandbox.api.hashing import name_hash, sandbox_blueprint_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_reference

Obj = Mapping[str, Any]

SAFE_TO_EVICT_TRUE = "true"
_PVC_SPEC = "@k8s.io/api/core/v1.PersistentVolumeClaimSpec"


def template_pod_spec(template: Obj) -> dict[str, Any]:
    return dict(template.get("spec", {}).get("podTemplate", {}).get("spec") or {})


def pod_specs_match(template: Obj, actual: Obj | None) -> bool:
    """Upstream's comparePodSpecs: template spec + secure defaults, semantically equal
    (docs/design/warmpool.md, "Comparing pod specs"). The ``enableServiceLinks: false``
    default counts as met by a sandbox without the field (one made before that default):
    adding a default recreates no warm pool."""
    tpl_spec = template_pod_spec(template)
    expected = apply_sandbox_secure_defaults(template, tpl_spec)
    got = dict(actual or {})
    if service_links_defaulted(tpl_spec, got):
        expected.pop("enableServiceLinks", None)
    return pod_spec_equal(expected, got)


def volume_claim_templates_match(template: Obj, actual: Sequence[Obj] | None) -> bool:
    """Upstream's compareVolumeClaimTemplates (#1102): same length, and index by index the same
    ``metadata.name`` and a semantically equal ``spec`` (PVC labels/annotations do not count;
    order does, as the list is atomic and hashed in order)."""
    expected = template.get("spec", {}).get("volumeClaimTemplates") or []
    got = actual or []
    if len(expected) != len(got):
        return False
    for want, have in zip(expected, got, strict=True):
        if ((want or {}).get("metadata") or {}).get("name", "") != (
            (have or {}).get("metadata") or {}
        ).get("name", ""):
            return False
        if not typed_equal((want or {}).get("spec"), (have or {}).get("spec"), _PVC_SPEC):
            return False
    return True


def services_match(template: Obj, actual: Obj) -> bool:
    """``service`` is a ``*bool``: unset, ``false`` and ``true`` are three different things."""
    return typed_equal(template.get("spec", {}).get("service"), actual.get("service"), "*bool")


def blueprints_match(template: Obj, sb: Obj) -> bool:
    """Upstream's compareSandboxBlueprint (#1102): the pod spec (normalised with the secure
    defaults), the volume claim templates (names + specs, index-wise) and ``service``."""
    spec = sb.get("spec") or {}
    return (
        pod_specs_match(template, (spec.get("podTemplate") or {}).get("spec"))
        and volume_claim_templates_match(template, spec.get("volumeClaimTemplates"))
        and services_match(template, spec)
    )


def is_sandbox_stale(
    sb: Obj,
    template: Obj,
    pod_hash: str,
    vetted: dict[str, bool],
    *,
    orphan: bool,
    blueprint_hash: str | None = None,
) -> bool:
    """Layered staleness check (docs/design/warmpool.md, "Staleness"; upstream #1102's
    blueprint).

    1. The template-ref hash label differs: stale.
    2. An orphan: never trust its labels; full comparison (:func:`blueprints_match`).
    3. Hashing the template failed (an empty hash): not stale, never mass-delete on that.
    4. ``agents.x-k8s.io/sandbox-template-hash`` equals the blueprint hash: fresh. Set but
       different: the full comparison decides (a blueprint that only serialises differently is
       not churned), memoised per label value in ``vetted``.
    5. Only the deprecated ``sandbox-pod-template-hash`` label (a sandbox from an older
       controller): that label vouches for the pod template only, so the pod spec comparison is
       skipped when it equals ``pod_hash`` (else done once per label value, memoised) and the
       volume claim templates and ``service`` are always compared — cheap, and sandboxes with
       the same pod hash may still differ there. Unchanged: fresh, not churned; a change of the
       VCTs or the service alone: stale.
    6. No hash label at all: the full comparison.

    ``blueprint_hash`` is computed from the template when not given.
    """
    labels = sb.get("metadata", {}).get("labels") or {}
    if labels.get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH) != name_hash(template["metadata"]["name"]):
        return True
    if orphan:  # never trust labels on an object we do not own
        return not blueprints_match(template, sb)
    if blueprint_hash is None:
        try:
            blueprint_hash = sandbox_blueprint_hash(template.get("spec") or {})
        except (GoJSONError, TypeError, ValueError):
            blueprint_hash = ""
    if not pod_hash or not blueprint_hash:
        return False  # hashing failed: never mass-delete on that
    new = labels.get(keys.LABEL_SANDBOX_TEMPLATE_HASH, "")
    if new:
        if new == blueprint_hash:
            return False
        key = f"{keys.LABEL_SANDBOX_TEMPLATE_HASH}={new}"
        if key not in vetted:
            vetted[key] = not blueprints_match(template, sb)
        return vetted[key]
    old = labels.get(keys.LABEL_SANDBOX_POD_TEMPLATE_HASH, "")
    spec = sb.get("spec") or {}
    if old and old != pod_hash:
        key = f"{keys.LABEL_SANDBOX_POD_TEMPLATE_HASH}={old}"
        if key not in vetted:  # memoised: the pod part is stale
            pod = (spec.get("podTemplate") or {}).get("spec")
            vetted[key] = not pod_specs_match(template, pod)
        pod_ok = not vetted[key]
    elif old:
        pod_ok = True
    else:
        return not blueprints_match(template, sb)
    return not (
        pod_ok
        and volume_claim_templates_match(template, spec.get("volumeClaimTemplates"))
        and services_match(template, spec)
    )


def build_blueprint(
    pool: Obj, template: Obj, pod_hash: str, blueprint_hash: str | None = None
) -> dict[str, Any]:
    """The sandbox every create posts (docs/design/warmpool.md, "The blueprint").

    Labelled (metadata and pod template) with both hashes, as upstream since #1102: the
    blueprint hash ``agents.x-k8s.io/sandbox-template-hash`` that staleness reads, and the
    deprecated pod-template hash kept for external readers and older controllers.
    ``blueprint_hash`` is computed from the template when not given (may raise GoJSONError).
    """
    meta = pool["metadata"]
    tspec = template.get("spec", {})
    ref_name = pool["spec"]["sandboxTemplateRef"]["name"]
    if blueprint_hash is None:
        blueprint_hash = sandbox_blueprint_hash(tspec)
    pool_labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash(meta["name"]),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(ref_name),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_hash,
        keys.LABEL_SANDBOX_TEMPLATE_HASH: blueprint_hash,
    }
    ptpl = tspec.get("podTemplate", {})
    pod_meta = ptpl.get("metadata") or {}
    pod_labels = {**(pod_meta.get("labels") or {}), **pool_labels}
    pod_spec = apply_sandbox_secure_defaults(template, copy.deepcopy(ptpl.get("spec") or {}))
    spec: dict[str, Any] = {
        "replicas": 1,
        "podTemplate": {
            "metadata": {"labels": pod_labels},
            "spec": pod_spec,
        },
    }
    if pod_meta.get("annotations"):
        spec["podTemplate"]["metadata"]["annotations"] = dict(pod_meta["annotations"])
    if tspec.get("service") is not None:
        spec["service"] = tspec["service"]
    if tspec.get("volumeClaimTemplates"):
        spec["volumeClaimTemplates"] = copy.deepcopy(tspec["volumeClaimTemplates"])
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": {**pool_labels, keys.LABEL_CREATED_BY: "controller"},  # upstream #1039
            "annotations": {keys.ANNOTATION_SANDBOX_TEMPLATE_REF: ref_name},
            "ownerReferences": [controller_reference(pool, SANDBOX_WARM_POOL)],
        },
        "spec": spec,
    }


def with_eviction_annotation(blueprint: dict[str, Any], template: Obj) -> dict[str, Any]:
    """``--enable-warm-pool-eviction``: the pool's pods carry
    ``cluster-autoscaler.kubernetes.io/safe-to-evict: "true"`` (an idle warm pod must not keep
    a node alive), unless the template's pod metadata sets that key itself. A claim adopting the
    sandbox removes it again (:func:`.claim.claimed_sandbox.adoption_patch`)."""
    tpl_meta = (template.get("spec") or {}).get("podTemplate", {}).get("metadata") or {}
    if keys.ANNOTATION_SAFE_TO_EVICT in (tpl_meta.get("annotations") or {}):
        return blueprint
    pod_meta = blueprint["spec"]["podTemplate"].setdefault("metadata", {})
    pod_meta["annotations"] = {
        **(pod_meta.get("annotations") or {}),
        keys.ANNOTATION_SAFE_TO_EVICT: SAFE_TO_EVICT_TRUE,
    }
    return blueprint
