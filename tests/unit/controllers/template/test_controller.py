"""The SandboxTemplate controller: the pure plan (upstream ``TestSandboxTemplateReconcileNetwork
Policy``, plus the later upstream changes; docs/design/template.md, "Tests") and the act step
through the fake API (write order, preconditions, 409s, the memory of our own writes)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX_TEMPLATE
from agentsandbox.api.resources import SANDBOX_TEMPLATES
from agentsandbox.controllers.template.act import WRITE_MEMORY, TemplateWriter
from agentsandbox.controllers.template.controller import CONFLICT_RECHECK, TemplateReconciler
from agentsandbox.controllers.template.handlers import template_for_policy
from agentsandbox.controllers.template.plan import (
    REASON_NETWORK_POLICY_CONFLICT,
    REASON_NETWORK_POLICY_FAILED,
    Action,
    Snapshot,
    default_network_policy_spec,
    desired_network_policy_spec,
    network_policy_specs_equal,
    plan,
    template_for_network_policy,
)
from agentsandbox.kube.errors import Conflict, InternalError, Invalid, NotFound
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import NETWORKPOLICIES, Resource
from tests.unit.fakes import FakeApi, FakeInformer, FakeRecorder

NS = "default"
NP = "networkpolicies"
TPL = "sandboxtemplates"
_uids = itertools.count(1)


def template(
    name: str = "test-template",
    *,
    network_policy: dict[str, Any] | None = None,
    management: str | None = None,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "podTemplate": {"spec": {"containers": [{"name": "main", "image": "img"}]}}
    }
    if network_policy is not None:
        spec["networkPolicy"] = network_policy
    if management is not None:
        spec["networkPolicyManagement"] = management
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"tpl-uid-{next(_uids)}",
        "resourceVersion": "7",
    }
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": SANDBOX_TEMPLATE.api_version, "kind": "SandboxTemplate",
            "metadata": meta, "spec": spec}  # fmt: skip


def network_policy(
    tpl: dict[str, Any] | None,
    spec: dict[str, Any] | None = None,
    *,
    name: str = "test-template-network-policy",
    owner_uid: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"np-{next(_uids)}",
                            "resourceVersion": "11"}  # fmt: skip
    if tpl is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": SANDBOX_TEMPLATE.api_version,
                "kind": "SandboxTemplate",
                "name": tpl["metadata"]["name"],
                "uid": owner_uid or tpl["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": spec if spec is not None else {"podSelector": {}},
    }


def custom_rules() -> dict[str, Any]:
    return {
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "ingress"}}}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
    }


# ------------------------------------------------------------- TestSandboxTemplateReconcileNP
def test_default_network_policy_is_created_secure_by_default() -> None:
    tpl = template()
    p = plan(Snapshot(tpl, None))
    assert p.action is Action.CREATE and p.body is not None
    np = p.body
    assert np["metadata"]["name"] == "test-template-network-policy"
    assert np["metadata"]["namespace"] == NS
    spec = np["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {"app": "sandbox-router"}
    assert spec["egress"][0]["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert spec["podSelector"]["matchLabels"] == {
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")
    }
    (owner,) = np["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "name": "test-template",
        "uid": tpl["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_default_egress_also_excepts_ipv6_link_local() -> None:
    """Upstream #827 (1f1b3bc3): the IPv6 egress block excepts fe80::/10 besides fc00::/7; the
    IPv4 block excepts the private ranges and link-local (metadata) addresses. Then our own
    additions (CGNAT, reserved, NAT64: tests/unit/controllers/template/test_egress_defaults.py)."""
    to = default_network_policy_spec("t")["egress"][0]["to"]
    assert to == [
        {
            "ipBlock": {
                "cidr": "0.0.0.0/0",
                "except": [
                    *("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"),
                    *("100.64.0.0/10", "240.0.0.0/4"),
                ],
            }
        },
        {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10", "64:ff9b::/96"]}},
    ]


def test_custom_network_policy_uses_the_template_rules_and_its_ref_hash() -> None:
    tpl = template("test-template-custom", network_policy=custom_rules())
    p = plan(Snapshot(tpl, None))
    assert p.action is Action.CREATE and p.body is not None
    spec = p.body["spec"]
    assert spec["podSelector"]["matchLabels"] == {
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template-custom")
    }
    assert spec["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {"app": "ingress"}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert p.body["metadata"]["name"] == "test-template-custom-network-policy"


def test_custom_network_policy_with_empty_lists_denies_all() -> None:
    spec = desired_network_policy_spec(template(network_policy={}))
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [] and spec["egress"] == []


def test_unmanaged_template_gets_no_network_policy() -> None:
    p = plan(Snapshot(template(management="Unmanaged"), None))
    assert p.action is Action.NONE and p.body is None


def test_empty_management_means_managed() -> None:
    assert plan(Snapshot(template(management=""), None)).action is Action.CREATE
    assert plan(Snapshot(template(management="Managed"), None)).action is Action.CREATE


def test_unmanaged_with_an_existing_controlled_network_policy_deletes_it() -> None:
    tpl = template(management="Unmanaged")
    np = network_policy(tpl, default_network_policy_spec("test-template"))
    p = plan(Snapshot(tpl, np))
    assert p.action is Action.DELETE
    assert p.existing is np  # its UID and resourceVersion are the delete's preconditions


def test_outdated_network_policy_is_updated_to_the_desired_spec() -> None:
    tpl = template()
    np = network_policy(tpl, {"podSelector": {"matchLabels": {"old-label": "x"}}})
    p = plan(Snapshot(tpl, np))
    assert p.action is Action.UPDATE and p.body is not None
    assert p.body["spec"] == default_network_policy_spec("test-template")
    assert p.body["metadata"]["resourceVersion"] == "11"  # the update's precondition
    assert p.body["metadata"]["uid"] == np["metadata"]["uid"]
    assert np["spec"] == {"podSelector": {"matchLabels": {"old-label": "x"}}}  # input untouched


def test_up_to_date_network_policy_is_left_alone() -> None:
    tpl = template(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")})
    np = network_policy(tpl, default_network_policy_spec("test-template"))
    p = plan(Snapshot(tpl, np))
    assert p.action is Action.NONE and p.body is None and p.template_label_patch is None


# ------------------------------------------------------------ later upstream changes (#828, #864)
def test_unmanaged_never_deletes_a_same_name_policy_it_does_not_control() -> None:
    """Upstream #828 (37fd0def): upstream 35b9757f deleted whatever policy had the name; now
    only one the template controls. Someone's own policy under Unmanaged is left alone,
    unreported (docs/design/template.md, "Whose policy it is")."""
    tpl = template(management="Unmanaged")
    for np in (network_policy(None), network_policy(template("other"))):
        p = plan(Snapshot(tpl, np))
        assert p.action is Action.LEAVE, np
        assert p.body is None
        assert "test-template-network-policy" in p.message


def test_managed_never_updates_a_same_name_policy_it_does_not_control() -> None:
    """Upstream #828 (37fd0def): upstream 35b9757f overwrote the spec of any same-name policy;
    now the update is refused and reported (a Warning event, retried with backoff;
    docs/design/template.md, "Whose policy it is")."""
    tpl = template()
    foreign = network_policy(None, {"podSelector": {}})
    p = plan(Snapshot(tpl, foreign))
    assert p.action is Action.CONFLICT and p.body is None
    assert p.message == (
        'NetworkPolicy "default/test-template-network-policy" is not controlled by '
        'SandboxTemplate "test-template" (it has no controller); it is left untouched'
    )
    owned = network_policy(template("someone"))
    p = plan(Snapshot(tpl, owned))
    assert p.action is Action.CONFLICT
    assert 'its controller is SandboxTemplate "someone"' in p.message


def test_a_policy_of_an_earlier_template_of_the_same_name_is_not_ours() -> None:
    """#828: control is by UID. A template deleted and re-created under its name finds the old
    policy (the garbage collector has yet to remove it): not updated, reported."""
    tpl = template()
    np = network_policy(tpl, owner_uid="the-old-uid")
    p = plan(Snapshot(tpl, np))
    assert p.action is Action.CONFLICT
    assert "earlier" in p.message and "garbage collector" in p.message


def test_a_terminating_policy_is_waited_for() -> None:
    tpl = template()
    np = network_policy(tpl, {"podSelector": {}})
    np["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert plan(Snapshot(tpl, np)).action is Action.WAIT


def test_a_deleting_template_is_left_to_the_garbage_collector() -> None:
    tpl = template(management="Unmanaged")
    tpl["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    p = plan(Snapshot(tpl, network_policy(tpl)))
    assert p.action is Action.NONE and p.template_label_patch is None


def test_the_template_is_labelled_with_its_ref_hash() -> None:
    """Upstream #864 (0e438905): the template carries its own ref-hash label; the merge patch
    carries the resourceVersion it was decided on. Under Unmanaged too."""
    for tpl in (template(), template(management="Unmanaged"), template(labels={"a": "b"})):
        p = plan(Snapshot(tpl, None))
        assert p.template_label_patch == {
            "metadata": {
                "labels": {keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")},
                "resourceVersion": "7",
            }
        }
    wrong = template(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: "00000000"})
    assert plan(Snapshot(wrong, None)).template_label_patch is not None


# ------------------------------------------------------------- semantic equality
def test_api_server_defaults_do_not_count_as_a_difference() -> None:
    """What a round trip through the API server changes: ``ports[].protocol`` defaults to TCP,
    empty lists are dropped, ``policyTypes`` is defaulted when absent."""
    desired = desired_network_policy_spec(
        template(
            network_policy={
                "ingress": [{"ports": [{"port": 8080}], "from": [{"ipBlock": {"cidr": "::/0"}}]}],
                "egress": [],
            }
        )
    )
    stored = copy.deepcopy(desired)
    stored["ingress"][0]["ports"][0]["protocol"] = "TCP"
    del stored["egress"]
    assert network_policy_specs_equal(stored, desired)
    assert network_policy_specs_equal(
        {"podSelector": {}, "ingress": []}, {"podSelector": {}, "policyTypes": ["Ingress"]}
    )
    assert network_policy_specs_equal(
        {"podSelector": {"matchLabels": {"a": "1", "b": "2"}}},
        {"podSelector": {"matchLabels": {"b": "2", "a": "1"}}, "policyTypes": ["Ingress"]},
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # all namespaces vs this namespace only
        ({"from": [{"namespaceSelector": {}}]}, {"from": [{"podSelector": {}}]}),
        ({"ports": [{"port": 53, "protocol": "UDP"}]}, {"ports": [{"port": 53}]}),
        ({"ports": [{"port": 80}]}, {"ports": [{"port": "80"}]}),
        (
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]},
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
        ),
        ({}, {"from": [{"podSelector": {}}]}),
    ],
)
def test_real_differences_are_differences(a: dict[str, Any], b: dict[str, Any]) -> None:
    base = {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert not network_policy_specs_equal({**base, "ingress": [a]}, {**base, "ingress": [b]})


def test_policy_types_and_rule_direction_matter() -> None:
    ingress_only = {"podSelector": {}, "policyTypes": ["Ingress"]}
    both = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert not network_policy_specs_equal(ingress_only, both)  # deny-all egress is not nothing


def test_policy_names_map_back_to_templates() -> None:
    assert template_for_network_policy("py-network-policy") == "py"
    assert template_for_network_policy("-network-policy") is None
    assert template_for_network_policy("something-else") is None
    np = network_policy(None, name="web-network-policy")
    assert template_for_policy(np) == [Request(NS, "web")]


# ------------------------------------------------------------- act, through the fake API
class Api(FakeApi):
    """FakeApi plus a full PUT with a resourceVersion precondition (NetworkPolicy updates)."""

    async def update(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        self._record("update", resource.plural, name)
        key = (resource.plural, namespace or "", name)
        found = self.objects.get(key)
        if found is None:
            raise NotFound(404, "NotFound", f'{resource.plural} "{name}" not found')
        if obj["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        new = copy.deepcopy(obj)
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = new
        return copy.deepcopy(new)


class Rig:
    def __init__(self) -> None:
        self.api = Api()
        self.templates = FakeInformer()
        self.nps = FakeInformer()
        self.recorder = FakeRecorder()
        self.now = 1000.0
        self.r = TemplateReconciler(
            TemplateWriter(
                self.api,  # type: ignore[arg-type]
                self.recorder,  # type: ignore[arg-type]
                clock=lambda: self.now,
            ),
            self.templates,  # type: ignore[arg-type]
            self.nps,  # type: ignore[arg-type]
        )

    def add_template(self, tpl: dict[str, Any]) -> dict[str, Any]:
        stored = self.api.seed(TPL, tpl)
        self.templates.put(stored)
        return stored

    def add_np(self, np: dict[str, Any]) -> dict[str, Any]:
        stored = self.api.seed(NP, np)
        self.nps.put(stored)
        return stored

    def sync(self) -> None:
        """The informers catch up with the API."""
        for obj in self.api.all(TPL):
            self.templates.put(obj)
        live = {o["metadata"]["name"]: o for o in self.api.all(NP)}
        for obj in self.nps.list():
            if obj["metadata"]["name"] not in live:
                self.nps.remove(obj)
        for obj in live.values():
            self.nps.put(obj)

    async def reconcile(self, name: str = "test-template") -> Result | None:
        self.api.calls.clear()
        return await self.r.reconcile(Request(NS, name))


async def test_create_then_label_then_nothing_while_the_cache_lags() -> None:
    rig = Rig()
    tpl = rig.add_template(template())
    assert await rig.reconcile() is None
    assert rig.api.writes() == [
        ("create", NP, "test-template-network-policy"),
        ("patch", TPL, "test-template"),
    ]
    np = rig.api.stored(NP, NS, "test-template-network-policy")
    assert np is not None
    assert np["metadata"]["ownerReferences"][0]["uid"] == tpl["metadata"]["uid"]
    labelled = rig.api.stored(TPL, NS, "test-template")
    assert labelled is not None
    assert labelled["metadata"]["labels"] == {
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")
    }
    # reconciled again before either informer has seen the writes: no second create, no
    # second label patch
    assert await rig.reconcile() is None
    assert rig.api.writes() == []
    # the caches catch up: still nothing to write
    rig.sync()
    assert await rig.reconcile() is None
    assert rig.api.writes() == []


async def test_a_remembered_write_expires_when_its_event_is_lost() -> None:
    rig = Rig()
    rig.add_template(
        template(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")})
    )
    await rig.reconcile()
    # the policy is deleted behind our back and the informer never told us anything
    del rig.api.objects[(NP, NS, "test-template-network-policy")]
    await rig.reconcile()
    assert rig.api.writes() == []  # still trusting the write
    rig.now += WRITE_MEMORY + 1
    await rig.reconcile()
    assert rig.api.writes() == [("create", NP, "test-template-network-policy")]


async def test_update_carries_the_resource_version_and_a_409_looks_again() -> None:
    rig = Rig()
    tpl = rig.add_template(template(network_policy=custom_rules()))
    np = rig.add_np(network_policy(tpl, {"podSelector": {"matchLabels": {"old-label": "x"}}}))
    # someone else writes the policy; our cache still holds the older version
    changed = copy.deepcopy(np)
    changed["metadata"]["labels"] = {"touched": "yes"}
    await rig.api.update(NETWORKPOLICIES, changed, NS)
    assert await rig.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    assert ("update", NP, "test-template-network-policy") in rig.api.writes()
    live = rig.api.stored(NP, NS, "test-template-network-policy")
    assert live is not None and live["spec"]["podSelector"]["matchLabels"] == {"old-label": "x"}
    rig.sync()
    await rig.reconcile()
    live = rig.api.stored(NP, NS, "test-template-network-policy")
    assert live is not None
    assert live["spec"] == desired_network_policy_spec(tpl)
    assert live["metadata"]["labels"] == {"touched": "yes"}  # only the spec is ours


async def test_unmanaged_deletes_its_policy_with_uid_and_version_preconditions() -> None:
    rig = Rig()
    tpl = rig.add_template(template(management="Unmanaged"))
    rig.add_np(network_policy(tpl, default_network_policy_spec("test-template")))
    await rig.reconcile()
    assert rig.api.writes()[0] == ("delete", NP, "test-template-network-policy")
    assert rig.api.stored(NP, NS, "test-template-network-policy") is None
    # the cache still shows the policy: no second delete
    await rig.reconcile()
    assert [w for w in rig.api.writes() if w[1] == NP] == []


async def test_unmanaged_delete_precondition_protects_a_replaced_policy() -> None:
    """The cache shows our policy, but it was replaced by someone else's of the same name:
    the UID precondition fails the delete, the new policy survives, we look again."""
    rig = Rig()
    tpl = rig.add_template(template(management="Unmanaged"))
    rig.add_np(network_policy(tpl))
    del rig.api.objects[(NP, NS, "test-template-network-policy")]
    rig.api.seed(NP, network_policy(None))  # same name, new UID, nobody's
    assert await rig.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    assert rig.api.stored(NP, NS, "test-template-network-policy") is not None
    rig.sync()
    assert await rig.reconcile() is None
    assert [w for w in rig.api.writes() if w[1] == NP] == []  # LEAVE: not ours


async def test_a_foreign_policy_is_reported_never_written_and_retried_with_backoff() -> None:
    """#828: the same-name policy of someone else is neither updated nor deleted; a Warning
    event on the template names it; the key is retried with the rate-limited backoff."""
    rig = Rig()
    rig.add_template(
        template(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")})
    )
    before = rig.add_np(network_policy(None, {"podSelector": {}}))
    assert await rig.reconcile() == Result(requeue=True)
    assert rig.api.writes() == []
    assert rig.api.stored(NP, NS, "test-template-network-policy") == before
    ((kind, reason, note, _),) = rig.recorder.events
    assert (kind, reason) == ("Warning", REASON_NETWORK_POLICY_CONFLICT)
    assert '"default/test-template-network-policy"' in note
    # the other policy goes away: ours is created
    rig.nps.remove(before)
    del rig.api.objects[(NP, NS, "test-template-network-policy")]
    assert await rig.reconcile() is None
    assert rig.api.writes() == [("create", NP, "test-template-network-policy")]


async def test_create_answered_already_exists_looks_again() -> None:
    rig = Rig()
    rig.add_template(
        template(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")})
    )
    rig.api.seed(NP, network_policy(None))  # not in the cache yet
    assert await rig.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    rig.sync()
    assert await rig.reconcile() == Result(requeue=True)  # now seen: a conflict


async def test_label_patch_409_looks_again_and_other_errors_are_raised() -> None:
    rig = Rig()
    rig.add_template(template())
    rig.api.fail[("patch", TPL)] = [Conflict(409, "Conflict", "modified")]
    assert await rig.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    assert rig.api.writes() == [
        ("create", NP, "test-template-network-policy"),
        ("patch", TPL, "test-template"),
    ]
    rig2 = Rig()
    rig2.add_template(template())
    rig2.api.fail[("create", NP)] = [InternalError(500, "InternalError", "boom")]
    with pytest.raises(InternalError):
        await rig2.reconcile()
    # the label patch was still sent: errors are collected, not short-circuited
    assert ("patch", TPL, "test-template") in rig2.api.writes()


async def test_a_refused_network_policy_is_a_warning_event_once_per_message() -> None:
    """Bug found by the bad-input suite: the apiserver refusing the policy (an invalid CIDR the
    CRD schema accepts) was only logged, and a template has no status. Now a Warning
    NetworkPolicyFailed on the template carries the apiserver's message, once per distinct
    message (the backoff retries do not repeat it); a 5xx is retried without an Event."""
    rig = Rig()
    rig.add_template(
        template(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("test-template")})
    )
    invalid = Invalid(422, "Invalid", 'spec.egress[0].to[0].ipBlock.cidr: Invalid value: "x"')
    rig.api.fail[("create", NP)] = [invalid, invalid, InternalError(500, "InternalError", "boom")]
    for _ in range(2):
        with pytest.raises(Invalid):
            await rig.reconcile()
    ((kind, reason, note, _),) = rig.recorder.events
    assert (kind, reason) == ("Warning", REASON_NETWORK_POLICY_FAILED)
    assert note.startswith("cannot create NetworkPolicy: ") and 'Invalid value: "x"' in note
    with pytest.raises(InternalError):
        await rig.reconcile()
    assert len(rig.recorder.events) == 1
    assert await rig.reconcile() is None  # fixed (the template changed): created, no Event
    assert len(rig.recorder.events) == 1


async def test_missing_template_does_nothing() -> None:
    rig = Rig()
    assert await rig.reconcile("nope") is None
    assert rig.api.calls == []


async def test_update_of_a_vanished_policy_looks_again() -> None:
    rig = Rig()
    tpl = rig.add_template(template())
    rig.add_np(network_policy(tpl, {"podSelector": {}}))
    del rig.api.objects[(NP, NS, "test-template-network-policy")]
    assert await rig.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    rig.sync()
    await rig.reconcile()
    assert ("create", NP, "test-template-network-policy") in rig.api.writes()


def test_template_resource_is_the_storage_version() -> None:
    assert SANDBOX_TEMPLATES.version == "v1beta1"
