"""SandboxTemplate: the decision step (pure). Snapshot in, plan out; no I/O, no clock reads.

Upstream 35b9757f keeps one NetworkPolicy per template, ``<template>-network-policy`` in the
template's namespace: the secure default when the template declares no ``networkPolicy``, the
template's own rules otherwise, none under ``networkPolicyManagement: Unmanaged``
(docs/design/template.md, "The NetworkPolicy a template gets"). Later upstream changes and our
own (docs/design/template.md, "The default policy", "Whose policy it is", "Comparing policy
specs", "The template's own label"):

- #827: the default IPv6 egress rule also excepts link-local ``fe80::/10``;
- #828: the policy is updated or deleted only if the template *controls* it (controller owner
  reference with the template's UID). A same-name policy of anyone else (no owner, another
  controller, a deleted template of the same name) is never touched: under ``Managed`` it is a
  conflict, reported with a Warning event and retried with backoff; under ``Unmanaged`` it is
  somebody's own policy and is left alone silently;
- #864: the template itself carries ``agents.x-k8s.io/sandbox-template-ref-hash``;
- specs compare after the API server's defaulting (``ports[].protocol: TCP``, ``policyTypes``)
  and Go's nil-versus-empty rules, so an unchanged template never rewrites its policy.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from agentsandbox.api import keys
from agentsandbox.api.defaults import NETWORK_POLICY_UNMANAGED
from agentsandbox.api.hashing import template_ref_hash
from agentsandbox.api.kinds import SANDBOX_TEMPLATE
from agentsandbox.api.owners import controller_of, controller_reference

Obj = Mapping[str, Any]

NETWORK_POLICY_SUFFIX: Final = "-network-policy"
NETWORK_POLICY_API_VERSION: Final = "networking.k8s.io/v1"

#: Warning event on the template: a same-name NetworkPolicy it does not control is in the way.
REASON_NETWORK_POLICY_CONFLICT: Final = "NetworkPolicyConflict"
#: Warning on the template: the apiserver refused its NetworkPolicy (invalid, forbidden).
REASON_NETWORK_POLICY_FAILED: Final = "NetworkPolicyFailed"

#: RFC 1918, link-local (metadata servers), then our additions to upstream's list: the CGNAT
#: range 100.64.0.0/10 (pod ranges on some clouds, a cloud metadata server) and the reserved
#: 240.0.0.0/4 (used as pod and service ranges).
DEFAULT_IPV4_EXCEPT: Final = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "240.0.0.0/4",
)
#: ULA, link-local (upstream #827), and our addition: the NAT64 prefix 64:ff9b::/96, which
#: reaches internal IPv4 addresses where DNS64/NAT64 is used.
DEFAULT_IPV6_EXCEPT: Final = ("fc00::/7", "fe80::/10", "64:ff9b::/96")

INGRESS: Final = "Ingress"
EGRESS: Final = "Egress"


class Action(Enum):
    """What to do with the template's NetworkPolicy this pass."""

    NONE = "none"  # absent and not wanted, or present and as desired
    CREATE = "create"
    UPDATE = "update"  # ours, spec differs: PUT with its resourceVersion
    DELETE = "delete"  # ours, Unmanaged: delete with UID + resourceVersion preconditions
    CONFLICT = "conflict"  # Managed, a same-name policy we do not control: report, retry
    LEAVE = "leave"  # Unmanaged, a same-name policy we do not control: not ours to delete
    WAIT = "wait"  # the policy is being deleted: its delete event brings us back


@dataclass(frozen=True)
class Snapshot:
    """The template and the same-name NetworkPolicy (None: absent), as the cache shows them."""

    template: Obj
    network_policy: Obj | None
    #: extra except-CIDRs of the default policy's egress (``--network-policy-egress-except``)
    egress_except: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    action: Action
    #: the object to create, or the updated copy of the existing one (CREATE, UPDATE)
    body: dict[str, Any] | None = None
    #: the existing policy the decision was made on (its UID and resourceVersion are the
    #: preconditions of a DELETE)
    existing: Obj | None = None
    #: why the existing policy is not ours (CONFLICT, LEAVE)
    message: str = ""
    #: JSON merge patch labelling the template with its ref hash (with a resourceVersion
    #: precondition), or None when the label is already right
    template_label_patch: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------- desired
def network_policy_name(template_name: str) -> str:
    return f"{template_name}{NETWORK_POLICY_SUFFIX}"


def template_for_network_policy(np_name: str) -> str | None:
    """The template a NetworkPolicy name belongs to (inverse of :func:`network_policy_name`)."""
    if np_name.endswith(NETWORK_POLICY_SUFFIX) and len(np_name) > len(NETWORK_POLICY_SUFFIX):
        return np_name[: -len(NETWORK_POLICY_SUFFIX)]
    return None


def pod_selector(template_name: str) -> dict[str, Any]:
    return {"matchLabels": {keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: template_ref_hash(template_name)}}


def is_managed(template: Obj) -> bool:
    """``networkPolicyManagement`` unset, ``""`` or ``Managed`` (anything but ``Unmanaged``)."""
    management = (template.get("spec") or {}).get("networkPolicyManagement") or ""
    return bool(management != NETWORK_POLICY_UNMANAGED)


def default_network_policy_spec(
    template_name: str, extra_except: Sequence[str] = ()
) -> dict[str, Any]:
    """Secure by default: ingress only from the sandbox router in the same namespace; egress to
    the public internet only (no cluster networks, link-local or metadata addresses, hence no
    cluster DNS: the pods get public resolvers, docs/design/template.md, "Secure defaults for
    sandbox pods"). ``extra_except``: more CIDRs to except, each put in the block of its family
    (an IPv6 CIDR has a colon)."""
    v4 = [*DEFAULT_IPV4_EXCEPT, *(c for c in extra_except if ":" not in c)]
    v6 = [*DEFAULT_IPV6_EXCEPT, *(c for c in extra_except if ":" in c)]
    return {
        "podSelector": pod_selector(template_name),
        "policyTypes": [INGRESS, EGRESS],
        "ingress": [
            {"from": [{"podSelector": {"matchLabels": {keys.LABEL_APP: keys.SANDBOX_ROUTER_APP}}}]}
        ],
        "egress": [
            {
                "to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(dict.fromkeys(v4))}},
                    {"ipBlock": {"cidr": "::/0", "except": list(dict.fromkeys(v6))}},
                ]
            }
        ],
    }


def desired_network_policy_spec(template: Obj, extra_except: Sequence[str] = ()) -> dict[str, Any]:
    """The default spec without ``spec.networkPolicy`` (with ``extra_except``), else the
    template's rules (an empty or absent list denies all traffic in that direction)."""
    name = template["metadata"]["name"]
    custom = (template.get("spec") or {}).get("networkPolicy")
    if custom is None:
        return default_network_policy_spec(name, extra_except)
    return {
        "podSelector": pod_selector(name),
        "policyTypes": [INGRESS, EGRESS],
        "ingress": copy.deepcopy(list(custom.get("ingress") or [])),
        "egress": copy.deepcopy(list(custom.get("egress") or [])),
    }


def build_network_policy(template: Obj, extra_except: Sequence[str] = ()) -> dict[str, Any]:
    """The NetworkPolicy a create posts: controlled by the template (blockOwnerDeletion)."""
    meta = template["metadata"]
    return {
        "apiVersion": NETWORK_POLICY_API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(meta["name"]),
            "namespace": meta["namespace"],
            "ownerReferences": [controller_reference(template, SANDBOX_TEMPLATE)],
        },
        "spec": desired_network_policy_spec(template, extra_except),
    }


# ---------------------------------------------------------------------------------- equality
def _selector(sel: Obj | None) -> Any:
    """A LabelSelector: label order is irrelevant, expression and value order are kept (Go's
    DeepEqual compares slices in order)."""
    if sel is None:
        return None
    labels = tuple(sorted((str(k), str(v)) for k, v in (sel.get("matchLabels") or {}).items()))
    exprs = tuple(
        (e.get("key") or "", e.get("operator") or "", tuple(e.get("values") or ()))
        for e in sel.get("matchExpressions") or ()
    )
    return (labels, exprs)


def _int_or_string(v: Any) -> Any:
    return None if v is None else (isinstance(v, str), v)


def _port(p: Obj) -> Any:
    # the API server defaults a port's protocol to TCP
    return (p.get("protocol") or "TCP", _int_or_string(p.get("port")), p.get("endPort"))


def _peer(p: Obj) -> Any:
    block = p.get("ipBlock")
    return (
        _selector(p.get("podSelector")),  # pointers: absent differs from {} (all pods)
        _selector(p.get("namespaceSelector")),  # absent: this namespace; {}: all namespaces
        None if block is None else (block.get("cidr") or "", tuple(block.get("except") or ())),
    )


def _rules(rules: Sequence[Obj] | None, peers: str) -> Any:
    return tuple(
        (tuple(_port(p) for p in r.get("ports") or ()), tuple(_peer(p) for p in r.get(peers) or ()))
        for r in rules or ()
    )


def canonical_network_policy_spec(spec: Obj | None) -> Any:
    """A hashable form of a NetworkPolicySpec in which two specs are equal exactly when the API
    server would store them alike and ``equality.Semantic.DeepEqual`` would call them equal."""
    spec = spec or {}
    egress = _rules(spec.get("egress"), "to")
    types = tuple(spec.get("policyTypes") or ())
    if not types:  # the API server's default
        types = (INGRESS, EGRESS) if egress else (INGRESS,)
    return (
        _selector(spec.get("podSelector") or {}),
        _rules(spec.get("ingress"), "from"),
        egress,
        types,
    )


def network_policy_specs_equal(a: Obj | None, b: Obj | None) -> bool:
    return bool(canonical_network_policy_spec(a) == canonical_network_policy_spec(b))


# ---------------------------------------------------------------------------------- decide
def controlled_by(obj: Obj, template: Obj) -> bool:
    """``obj``'s controller is this very template (kind, group and UID)."""
    ref = controller_of(obj)
    return (
        ref is not None
        and ref.get("kind") == SANDBOX_TEMPLATE.kind
        and str(ref.get("apiVersion", "")).rpartition("/")[0] == SANDBOX_TEMPLATE.group
        and bool(ref.get("uid"))
        and ref.get("uid") == template["metadata"].get("uid")
    )


def describe_foreign(np: Obj, template: Obj) -> str:
    """Why ``np`` is not the template's, naming it and its controller."""
    meta = np["metadata"]
    tname = template["metadata"]["name"]
    ref = controller_of(np)
    if ref is None:
        whose = "it has no controller"
    elif ref.get("kind") == SANDBOX_TEMPLATE.kind and ref.get("name") == tname:
        whose = (
            f"it belongs to an earlier SandboxTemplate of that name (UID {ref.get('uid')}), "
            "which the garbage collector removes"
        )
    else:
        whose = f'its controller is {ref.get("kind")} "{ref.get("name")}"'
    return (
        f'NetworkPolicy "{meta.get("namespace", "")}/{meta["name"]}" is not controlled by '
        f'SandboxTemplate "{tname}" ({whose}); it is left untouched'
    )


def template_label_patch(template: Obj) -> dict[str, Any] | None:
    """Upstream #864: the template is labelled with its own ref hash (a merge patch carrying the
    resourceVersion it was decided on)."""
    meta = template["metadata"]
    want = template_ref_hash(meta["name"])
    if (meta.get("labels") or {}).get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH) == want:
        return None
    return {
        "metadata": {
            "labels": {keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: want},
            "resourceVersion": meta.get("resourceVersion"),
        }
    }


def plan(snap: Snapshot) -> Plan:
    template = snap.template
    if template["metadata"].get("deletionTimestamp"):
        return Plan(Action.NONE)  # the garbage collector removes a policy we control
    label = template_label_patch(template)
    np = snap.network_policy
    managed = is_managed(template)
    if np is None:
        if not managed:
            return Plan(Action.NONE, template_label_patch=label)
        body = build_network_policy(template, snap.egress_except)
        return Plan(Action.CREATE, body, template_label_patch=label)
    ours = controlled_by(np, template)
    if np["metadata"].get("deletionTimestamp"):
        return Plan(Action.WAIT, existing=np, template_label_patch=label)
    if not ours:
        return Plan(
            Action.CONFLICT if managed else Action.LEAVE,
            existing=np,
            message=describe_foreign(np, template),
            template_label_patch=label,
        )
    if not managed:
        return Plan(Action.DELETE, existing=np, template_label_patch=label)
    desired = desired_network_policy_spec(template, snap.egress_except)
    if network_policy_specs_equal(np.get("spec"), desired):
        return Plan(Action.NONE, existing=np, template_label_patch=label)
    body = copy.deepcopy(dict(np))
    body["spec"] = desired
    return Plan(Action.UPDATE, body, existing=np, template_label_patch=label)
