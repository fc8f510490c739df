"""SandboxClaim: the Sandbox a claim gets (pure): its pod metadata, the patch adopting a pool
sandbox, and the cold sandbox built from the template.

The claim's ``additionalPodMetadata`` is validated and merged here, its ``env`` injected and its
volume claim templates merged by the template's policies; a rule broken is a
:class:`~agentsandbox.controllers.claim.plan.ClaimFailure`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM
from agentsandbox.api.owners import controller_reference
from agentsandbox.controllers.claim.config import DEFAULT_LABEL_DOMAINS
from agentsandbox.controllers.claim.plan import (
    REASON_ENV_REJECTED,
    REASON_INVALID_METADATA,
    REASON_VCT_ERROR,
    ClaimFailure,
)

Obj = Mapping[str, Any]

RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
#: Annotations of a restricted domain a claim may still set: how a pod asks the cluster
#: autoscaler not to evict it.
EXEMPT_ANNOTATIONS = frozenset({keys.ANNOTATION_SAFE_TO_EVICT})
#: Service-mesh and node-lifecycle domains (and their subdomains): sidecar injection, egress
#: capture and node pinning are the platform's to set, never a claim's.
MESH_AND_NODE_DOMAINS = ("istio.io", "linkerd.io", "karpenter.sh")
#: Sandbox-runtime keys, reversed-domain style with no prefix (CRI-O, Kata, gVisor): honoured by
#: the very runtimes that isolate sandboxes when the node allows them.
RUNTIME_KEY_PREFIXES = ("io.kubernetes.cri-o.", "io.katacontainers.", "dev.gvisor.")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# pool labels a claimed sandbox sheds (the template-ref hash stays: upstream #864)
POOL_LABELS = (
    keys.LABEL_WARM_POOL_SANDBOX,
    keys.LABEL_SANDBOX_POD_TEMPLATE_HASH,
    keys.LABEL_SANDBOX_TEMPLATE_HASH,
)


# ---------------------------------------------------------------------------------- metadata
def _domain(key: str) -> str:
    return key.split("/", 1)[0].lower() if "/" in key else ""


def _in_domains(domain: str, domains: Sequence[str]) -> bool:
    """``domain`` is one of ``domains`` or a subdomain of one."""
    return any(domain == d or domain.endswith("." + d) for d in domains)


def _key_problem(key: str) -> str | None:
    """Kubernetes qualified-name syntax: an optional DNS-subdomain prefix and a name of at most
    63 characters."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a key has at most one '/'"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f'prefix "{prefix}" must be a lower-case DNS subdomain'
    if not name or len(name) > 63 or not _NAME.match(name):
        return (
            "name part must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and "
            "ending with an alphanumeric character"
        )
    return None


def _mesh_or_runtime(key: str) -> bool:
    """A key of :data:`MESH_AND_NODE_DOMAINS` (or a subdomain), or one starting with one of
    :data:`RUNTIME_KEY_PREFIXES` (prefix or name part)."""
    domain = _domain(key)
    if _in_domains(domain, MESH_AND_NODE_DOMAINS):
        return True
    lowered = key.lower()
    name = lowered.rpartition("/")[2]
    return any(lowered.startswith(p) or name.startswith(p) for p in RUNTIME_KEY_PREFIXES)


def validate_additional_metadata(
    extra: Obj | None, label_domains: Sequence[str] = DEFAULT_LABEL_DOMAINS
) -> str | None:
    """The rules for ``additionalPodMetadata`` (docs/design/claim.md, "Pod metadata and env"):
    valid keys; no system domains (but the annotations of :data:`EXEMPT_ANNOTATIONS`); no
    service-mesh, sandbox-runtime or node-lifecycle keys; labels only in ``label_domains`` or
    their subdomains (an unprefixed label such as ``app`` or ``role``, or one of another domain,
    would opt the pod into the Services and NetworkPolicies selecting it); valid label values;
    and never ``app=sandbox-router`` (that label is the ingress the default NetworkPolicy
    admits). The error text, or None."""
    if not extra:
        return None
    for kind, entries in (("label", extra.get("labels")), ("annotation", extra.get("annotations"))):
        for key, value in (entries or {}).items():
            problem = _key_problem(str(key))
            if problem is not None:
                return f'failed to validate {kind} "{key}": invalid key: {problem}'
            if kind == "label" and key == keys.LABEL_APP and value == keys.SANDBOX_ROUTER_APP:
                return (
                    f'failed to validate label "{key}": "{key}={value}" is reserved for the '
                    "sandbox router (the default NetworkPolicy admits traffic from it)"
                )
            domain = _domain(key)
            exempt = kind == "annotation" and key in EXEMPT_ANNOTATIONS
            if not exempt and _in_domains(domain, RESTRICTED_DOMAINS):
                return (
                    f'failed to validate {kind} "{key}": restricted system domain: "{key}" is '
                    "not allowed in AdditionalPodMetadata"
                )
            if _mesh_or_runtime(str(key)):
                return (
                    f'failed to validate {kind} "{key}": service-mesh, sandbox-runtime and '
                    f'node-lifecycle keys are not allowed in AdditionalPodMetadata: "{key}"'
                )
            if kind == "label" and not domain:
                return (
                    f'failed to validate label "{key}": label "{key}" must have a domain prefix '
                    "(e.g. 'sandbox.users.io/my-label') to prevent opting into unintended "
                    "policy domains"
                )
            if kind == "label" and not _in_domains(domain, label_domains):
                allowed = ", ".join(f'"{d}"' for d in label_domains)
                return (
                    f'failed to validate label "{key}": label domain "{domain}" is not one of '
                    f"the allowed label domains ({allowed}, with their subdomains); the "
                    "allowed-label-domains key of the agent-sandbox-config ConfigMap in the "
                    "controller's namespace lists them"
                )
            if kind == "label" and (len(str(value)) > 63 or not _LABEL_VALUE.match(str(value))):
                return (
                    f'failed to validate label "{key}": invalid label value: "{value}" does not '
                    "match allowed pattern: must be no more than 63 characters and consist of "
                    "alphanumeric characters, '-', '_' or '.', starting and ending with an "
                    "alphanumeric character"
                )
    return None


def merge_pod_metadata(base: Obj, extra: Obj | None) -> dict[str, Any]:
    """``base`` (pod template metadata) plus the claim's extras; a key the template sets to
    another value is a conflict (:class:`ClaimFailure` ``InvalidMetadata``)."""
    out: dict[str, Any] = {
        "labels": dict(base.get("labels") or {}),
        "annotations": dict(base.get("annotations") or {}),
    }
    for kind, plural in (("label", "labels"), ("annotation", "annotations")):
        for key, value in ((extra or {}).get(plural) or {}).items():
            have = out[plural].get(key)
            if have is not None and have != value:
                raise ClaimFailure(
                    REASON_INVALID_METADATA,
                    f'metadata override conflict: {kind} "{key}" is defined in template with '
                    f'value "{have}", but claim requests "{value}"',
                )
            out[plural][key] = value
    return {k: v for k, v in out.items() if v}


def claimed_pod_metadata(claim: Obj, template: Obj | None, current: Obj | None) -> dict[str, Any]:
    """The pod template metadata of a claimed sandbox: the template's pod metadata (or, without
    a template, what the sandbox has minus the pool labels), the claim's UID and template-ref
    hash, then the claim's additional pod metadata."""
    if template is not None:
        base = copy.deepcopy((template.get("spec") or {}).get("podTemplate", {}).get("metadata"))
        ref_hash = name_hash(template["metadata"]["name"])
    else:
        base = copy.deepcopy(dict(current or {}))
        for label in POOL_LABELS:
            (base.get("labels") or {}).pop(label, None)
        ref_hash = (base.get("labels") or {}).get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH, "")
    base = dict(base or {})
    labels = dict(base.get("labels") or {})
    labels[keys.LABEL_CLAIM_UID] = claim["metadata"]["uid"]
    if ref_hash:
        labels[keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] = ref_hash
    base["labels"] = labels
    return merge_pod_metadata(base, (claim.get("spec") or {}).get("additionalPodMetadata"))


def _map_patch(old: Obj | None, new: Obj) -> dict[str, Any]:
    """Merge-patch entries turning map ``old`` into ``new`` (null removes a key)."""
    old = old or {}
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update({k: v for k, v in new.items() if old.get(k) != v})
    return patch


# ---------------------------------------------------------------------------------- adoption
def _without_pool_eviction(pod_meta: Obj, template: Obj | None) -> Obj:
    """The pool's ``safe-to-evict: "true"`` (``--enable-warm-pool-eviction``) does not follow
    a sandbox out of the pool: dropped unless the template sets that key itself."""
    tpl = ((template or {}).get("spec") or {}).get("podTemplate", {}).get("metadata") or {}
    annotations = pod_meta.get("annotations") or {}
    key = keys.ANNOTATION_SAFE_TO_EVICT
    if annotations.get(key) != "true" or key in (tpl.get("annotations") or {}):
        return pod_meta
    kept = {k: v for k, v in annotations.items() if k != key}
    return {**pod_meta, "annotations": kept}


def adoption_patch(sb: Obj, claim: Obj, template: Obj | None) -> dict[str, Any]:
    """The one merge patch that hands pool sandbox ``sb`` to ``claim`` (docs/design/claim.md,
    "Adopting a pool sandbox"):

    - ``metadata.resourceVersion`` = the version we vetted: the apiserver refuses the patch
      (409) if anyone changed the sandbox since, e.g. another claim adopting it;
    - the claim becomes the only owner (controller, blockOwnerDeletion); the pool lets go;
    - the pool labels go, ``claim-uid`` comes; ``pod-name`` names the sandbox's pod;
    - ``created-by`` becomes the claim's, or goes when the claim has none (on the sandbox and
      its pod template);
    - the pod template metadata becomes the claimed one (:func:`claimed_pod_metadata`), which
      the Sandbox controller then carries to the running pod. The PodSpec is not touched.
    """
    meta = sb.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    new_labels = {k: v for k, v in labels.items() if k not in POOL_LABELS}
    new_labels[keys.LABEL_CLAIM_UID] = claim["metadata"]["uid"]
    new_labels[keys.LABEL_LAUNCH_TYPE] = keys.LAUNCH_TYPE_WARM
    # the claim's created-by, or none: the pool's "controller" never stays on a claimed sandbox
    new_labels.pop(keys.LABEL_CREATED_BY, None)
    new_labels.update(created_by_label(claim))
    annotations: dict[str, Any] = {}
    current_annotations = meta.get("annotations") or {}
    if current_annotations.get(keys.ANNOTATION_POD_NAME) != meta["name"]:
        annotations[keys.ANNOTATION_POD_NAME] = meta["name"]
    trace = ((claim.get("metadata") or {}).get("annotations") or {}).get(
        keys.ANNOTATION_TRACE_CONTEXT
    )
    if trace and current_annotations.get(keys.ANNOTATION_TRACE_CONTEXT) != trace:
        annotations[keys.ANNOTATION_TRACE_CONTEXT] = trace
    current_pod_meta = (sb.get("spec") or {}).get("podTemplate", {}).get("metadata") or {}
    pod_meta = claimed_pod_metadata(
        claim, template, _without_pool_eviction(current_pod_meta, template)
    )
    pod_labels = {
        k: v for k, v in (pod_meta.get("labels") or {}).items() if k != keys.LABEL_CREATED_BY
    }
    pod_meta = {**pod_meta, "labels": {**pod_labels, **created_by_label(claim)}}
    pod_patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        diff = _map_patch(current_pod_meta.get(field), pod_meta.get(field) or {})
        if diff:
            pod_patch[field] = diff
    metadata: dict[str, Any] = {
        "resourceVersion": meta["resourceVersion"],
        "labels": _map_patch(labels, new_labels),
        "ownerReferences": [controller_reference(claim, SANDBOX_CLAIM)],
    }
    if annotations:
        metadata["annotations"] = annotations
    patch: dict[str, Any] = {"metadata": metadata}
    if pod_patch:
        patch["spec"] = {"podTemplate": {"metadata": pod_patch}}
    return patch


# ---------------------------------------------------------------------------------- cold path
def inject_env(pod_spec: dict[str, Any], env: Sequence[Obj], policy: str) -> None:
    """Env injection into ``pod_spec`` (in place), or :class:`ClaimFailure`
    (docs/design/claim.md, "Pod metadata and env")."""
    if policy not in ("Allowed", "Overrides"):
        raise ClaimFailure(
            REASON_ENV_REJECTED,
            "environment variable injection is not allowed by the template policy",
        )
    init = pod_spec.get("initContainers") or []
    regular = pod_spec.get("containers") or []
    names = {c.get("name") for c in [*init, *regular]}
    targeted: dict[str, list[Obj]] = {}
    default: list[Obj] = []
    for var in env:
        target = var.get("containerName")
        if target:
            targeted.setdefault(target, []).append(var)
        else:
            default.append(var)
    for target, vars_ in targeted.items():
        if target not in names:
            raise ClaimFailure(
                REASON_ENV_REJECTED,
                f'target container "{target}" not found in template for environment variable '
                f'"{vars_[0].get("name")}"',
            )
    for container in init:
        _set_env(container, targeted.get(container.get("name"), []), policy)
    for i, container in enumerate(regular):
        wanted = list(targeted.get(container.get("name"), []))
        if i == 0:
            wanted += default
        _set_env(container, wanted, policy)


def _set_env(container: dict[str, Any], wanted: Sequence[Obj], policy: str) -> None:
    """``wanted`` into ``container``. Under ``Allowed`` (add, never override) a container with
    ``envFrom`` takes none: its variables from a Secret or ConfigMap are not known here, and an
    explicit ``env`` entry would take precedence over them."""
    if not wanted:
        return
    if policy == "Allowed" and container.get("envFrom"):
        raise ClaimFailure(
            REASON_ENV_REJECTED,
            f'container "{container.get("name")}" takes variables from envFrom sources, so the '
            "template policy (envVarsInjectionPolicy: Allowed) cannot ensure that the claim's "
            f'variable "{wanted[0].get("name")}" does not override one of them',
        )
    env = container.setdefault("env", [])
    for var in wanted:
        entry = {"name": var["name"], "value": var.get("value", "")}
        for i, existing in enumerate(env):
            if existing.get("name") == var["name"]:
                if policy != "Overrides":
                    raise ClaimFailure(
                        REASON_ENV_REJECTED,
                        "environment variable override is not allowed by the template policy "
                        f'for variable "{var["name"]}"',
                    )
                env[i] = entry
                break
        else:
            env.append(entry)


def _vct_names_problem(vcts: Sequence[Obj], side: str) -> ClaimFailure | None:
    """Each volume claim template needs a name of its own: it names the PVC and the pod
    volume the PVC replaces."""
    seen: set[str] = set()
    for i, vct in enumerate(vcts):
        name = str((vct.get("metadata") or {}).get("name") or "")
        if not name:
            problem = f"the {side}'s volumeClaimTemplates[{i}] has no name"
        elif name in seen:
            problem = f'the {side}\'s duplicate volume claim template name "{name}"'
        else:
            seen.add(name)
            continue
        return ClaimFailure(REASON_VCT_ERROR, f"invalid volume claim templates: {problem}")
    return None


def merge_volume_claim_templates(
    base: Sequence[Obj], extra: Sequence[Obj], policy: str, pod_volumes: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The template's volume claim templates plus the claim's, by the template's
    ``volumeClaimTemplatesPolicy`` (upstream #960): ``Disallowed`` (default) refuses any,
    ``Allowed`` adds new names only, ``Overrides`` may also replace one of the template's.

    First, under any policy, every name on either side must be present and unique within its
    side (the template's are checked even when the claim brings none: a Sandbox with a repeated
    name would get a pod with two volumes of one name, which the API server refuses).

    A claim VCT replaces the pod volume of the same name (the Sandbox controller mounts the
    PVC in its place), so under ``Allowed`` every name the template defines is refused: its
    VCTs and also ``pod_volumes``, the names of its pod's own volumes (a configMap or CA bundle
    a trusted container mounts must not become a user's PVC)."""
    for vcts, side in ((base, "template"), (extra, "claim")):
        failure = _vct_names_problem(vcts, side)
        if failure is not None:
            raise failure
    out = [copy.deepcopy(dict(v)) for v in base]
    if not extra:
        return out
    if policy not in ("Allowed", "Overrides"):
        raise ClaimFailure(
            REASON_VCT_ERROR,
            "volume claim templates are not allowed by the template policy "
            "(volumeClaimTemplatesPolicy: Disallowed)",
        )
    for vct in extra:
        name = (vct.get("metadata") or {}).get("name")
        at = next(
            (i for i, v in enumerate(out) if (v.get("metadata") or {}).get("name") == name), None
        )
        if policy == "Overrides" and at is not None:
            out[at] = copy.deepcopy(dict(vct))
        elif policy == "Overrides" or (at is None and name not in pod_volumes):
            out.append(copy.deepcopy(dict(vct)))
        else:
            what = "volume claim template" if at is not None else "pod volume"
            raise ClaimFailure(
                REASON_VCT_ERROR,
                f'volume claim template "{name}" would replace the {what} "{name}" the '
                "template defines, and the template policy does not allow overriding it "
                "(volumeClaimTemplatesPolicy: Allowed)",
            )
    return out


def created_by_label(claim: Obj) -> dict[str, str]:
    """The claim's ``agents.x-k8s.io/created-by`` label (e.g. ``python-client``), for the
    Sandbox it gets (upstream #1039); empty when the claim has none."""
    value = ((claim.get("metadata") or {}).get("labels") or {}).get(keys.LABEL_CREATED_BY)
    return {keys.LABEL_CREATED_BY: str(value)} if value else {}


def cold_sandbox(claim: Obj, template: Obj) -> dict[str, Any]:
    """The Sandbox a claim creates when no pool sandbox serves it (docs/design/claim.md, "The
    cold sandbox")."""
    meta = claim["metadata"]
    tspec = template.get("spec") or {}
    spec = claim.get("spec") or {}
    volume_claims = merge_volume_claim_templates(
        tspec.get("volumeClaimTemplates") or [],
        spec.get("volumeClaimTemplates") or [],
        str(tspec.get("volumeClaimTemplatesPolicy") or "Disallowed"),
        [
            str(v.get("name"))
            for v in ((tspec.get("podTemplate") or {}).get("spec") or {}).get("volumes") or []
        ],
    )
    pod_template = copy.deepcopy(tspec.get("podTemplate") or {})
    pod_spec = dict(pod_template.get("spec") or {})
    if spec.get("env"):
        inject_env(pod_spec, spec["env"], str(tspec.get("envVarsInjectionPolicy") or ""))
    pod_template["spec"] = apply_sandbox_secure_defaults(template, pod_spec)
    pod_meta = claimed_pod_metadata(claim, template, None)
    # the pod carries the claim's created-by too, or none (whatever the template says)
    pod_labels = {
        k: v for k, v in (pod_meta.get("labels") or {}).items() if k != keys.LABEL_CREATED_BY
    }
    pod_template["metadata"] = {**pod_meta, "labels": {**pod_labels, **created_by_label(claim)}}
    annotations = {keys.ANNOTATION_SANDBOX_TEMPLATE_REF: template["metadata"]["name"]}
    trace = (meta.get("annotations") or {}).get(keys.ANNOTATION_TRACE_CONTEXT)
    if trace:
        annotations[keys.ANNOTATION_TRACE_CONTEXT] = trace
    sandbox_spec: dict[str, Any] = {"replicas": 1, "podTemplate": pod_template}
    if tspec.get("service") is not None:
        sandbox_spec["service"] = tspec["service"]
    if volume_claims:
        sandbox_spec["volumeClaimTemplates"] = volume_claims
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": SANDBOX.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {
                keys.LABEL_CLAIM_UID: meta["uid"],
                keys.LABEL_LAUNCH_TYPE: keys.LAUNCH_TYPE_COLD,
                **created_by_label(claim),
            },
            "annotations": annotations,
            "ownerReferences": [controller_reference(claim, SANDBOX_CLAIM)],
        },
        "spec": sandbox_spec,
    }
