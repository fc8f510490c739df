"""Bad input for every kind, against the real control plane (issue 13, item 5).

Every case ends one of two ways, never in a crash, a hot loop or an unbounded burst:

- **rejected** by the apiserver, with a message that says what is wrong (the schema's bounds,
  enums and required fields, and our CEL rules, ``hack/gen_crds.py``): the test asserts on the
  text a user sees;
- **accepted, then reported**: a status condition on the object and a Kubernetes Event say why it
  does not progress, after which the object is left alone (its resourceVersion stays put and the
  controllers make only backoff-paced passes over it).

And a pool of 10^6 replicas (``--sandbox-warm-pool-max-batch-size=100``, a small
``--kube-api-qps``): creates per pass ≤ 100, creates/s within the QPS flag, progress in
``status.replicas``, and deleting the pool stops the creates within 5 s.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim import controller as claim_controller
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.template import controller as template_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import Settings
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import AlreadyExists, ApiError, NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import EVENTS, NAMESPACES, NETWORKPOLICIES, PODS, Resource
from tests.polling import eventually, stays

from .invariants import SandboxHistory, checked_history, controller_process
from .runtime_helpers import running

IMAGE = "example/python:1"


@pytest.fixture(scope="module", autouse=True)
async def claim_history(
    cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of the module's tests, checked against the claim rules at its
    end (tests/integration/invariants.py): one history for the module, whose many short tests
    make a few claims each (one per test would cost more than the tests)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


# ------------------------------------------------------------------------------------ builders
def template(name: str, *, container: str = "main", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": container, "image": IMAGE}]}},
            **spec,
        },
    }


def pool(name: str, tpl: str = "tpl", replicas: Any = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": tpl}, **spec},
    }


def claim(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def sandbox(name: str, *, container: str = "main", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": container, "image": IMAGE}]}},
            **spec,
        },
    }


def with_meta(body: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], **meta}}


def without_spec(body: dict[str, Any], *path: str) -> dict[str, Any]:
    """``body`` without ``spec.<path...>`` (without ``spec`` when no path is given)."""
    out = {k: v for k, v in body.items() if k != "spec"}
    if not path:
        return out
    spec = dict(body["spec"])
    node = spec
    for part in path[:-1]:
        node[part] = dict(node[part])
        node = node[part]
    node.pop(path[-1])
    return {**out, "spec": spec}


LONG_NAME = "n" * 254  # one over the apiserver's 253
LONG_VALUE = "v" * 64  # one over a label value's 63


@dataclasses.dataclass(frozen=True)
class Rejected:
    resource: Resource
    body: dict[str, Any]
    message: tuple[str, ...]  # every fragment must be in the apiserver's message


REJECTED: dict[str, Rejected] = {
    # ---- Sandbox
    "sandbox-negative-replicas": Rejected(
        SANDBOXES,
        sandbox("s", replicas=-1),
        ("spec.replicas", "should be greater than or equal to 0"),
    ),
    "sandbox-replicas-over-one": Rejected(
        SANDBOXES, sandbox("s", replicas=2), ("spec.replicas", "should be less than or equal to 1")
    ),
    "sandbox-unknown-operating-mode": Rejected(
        SANDBOXES,
        sandbox("s", operatingMode="Paused"),
        ('spec.operatingMode: Unsupported value: "Paused"', '"Running"', '"Suspended"'),
    ),
    "sandbox-unknown-shutdown-policy": Rejected(
        SANDBOXES,
        sandbox("s", shutdownPolicy="Archive"),
        ('spec.shutdownPolicy: Unsupported value: "Archive"', '"Delete"', '"Retain"'),
    ),
    "sandbox-missing-spec": Rejected(
        SANDBOXES, without_spec(sandbox("s")), ("spec: Required value",)
    ),
    "sandbox-missing-pod-template": Rejected(
        SANDBOXES, without_spec(sandbox("s"), "podTemplate"), ("spec.podTemplate: Required value",)
    ),
    "sandbox-no-containers": Rejected(
        SANDBOXES,
        sandbox("s", podTemplate={"spec": {"containers": []}}),
        ("podTemplate.spec.containers must list at least one container",),
    ),
    "sandbox-container-without-image-name": Rejected(
        SANDBOXES,
        sandbox("s", podTemplate={"spec": {"containers": [{"image": IMAGE}]}}),
        ("spec.podTemplate.spec.containers[0].name: Required value",),
    ),
    "sandbox-name-too-long": Rejected(
        SANDBOXES, with_meta(sandbox("s"), name=LONG_NAME), ("must be no more than 253 characters",)
    ),
    "sandbox-label-value-too-long": Rejected(
        SANDBOXES,
        with_meta(sandbox("s"), labels={"team": LONG_VALUE}),
        ("metadata.labels", "must be no more than 63 bytes"),
    ),
    # ---- SandboxTemplate
    "template-missing-pod-template": Rejected(
        SANDBOX_TEMPLATES,
        without_spec(template("t"), "podTemplate"),
        ("spec.podTemplate: Required value",),
    ),
    "template-missing-spec": Rejected(
        SANDBOX_TEMPLATES, without_spec(template("t")), ("spec: Required value",)
    ),
    "template-no-containers": Rejected(
        SANDBOX_TEMPLATES,
        template("t", podTemplate={"spec": {"containers": []}}),
        ("podTemplate.spec.containers must list at least one container",),
    ),
    "template-unknown-network-policy-management": Rejected(
        SANDBOX_TEMPLATES,
        template("t", networkPolicyManagement="Sometimes"),
        ('spec.networkPolicyManagement: Unsupported value: "Sometimes"', '"Managed"'),
    ),
    "template-unknown-env-injection-policy": Rejected(
        SANDBOX_TEMPLATES,
        template("t", envVarsInjectionPolicy="Always"),
        ('spec.envVarsInjectionPolicy: Unsupported value: "Always"', '"Allowed"'),
    ),
    "template-name-too-long": Rejected(
        SANDBOX_TEMPLATES,
        with_meta(template("t"), name=LONG_NAME),
        ("must be no more than 253 characters",),
    ),
    "template-name-too-long-for-its-network-policy": Rejected(
        SANDBOX_TEMPLATES,
        with_meta(template("t"), name="t" * 239),
        ("a SandboxTemplate name has at most 238 characters (its NetworkPolicy is named",),
    ),
    "template-label-value-too-long": Rejected(
        SANDBOX_TEMPLATES,
        with_meta(template("t"), labels={"team": LONG_VALUE}),
        ("must be no more than 63 bytes",),
    ),
    # ---- SandboxWarmPool
    "pool-negative-replicas": Rejected(
        SANDBOX_WARM_POOLS,
        pool("p", replicas=-1),
        ("spec.replicas", "should be greater than or equal to 0"),
    ),
    "pool-replicas-not-an-int32": Rejected(
        SANDBOX_WARM_POOLS, pool("p", replicas=2**31), ("spec.replicas", "int32")
    ),
    "pool-replicas-a-string": Rejected(
        SANDBOX_WARM_POOLS, pool("p", replicas="3"), ("spec.replicas", "must be of type integer")
    ),
    "pool-unknown-update-strategy": Rejected(
        SANDBOX_WARM_POOLS,
        pool("p", updateStrategy={"type": "Rolling"}),
        ('spec.updateStrategy.type: Unsupported value: "Rolling"', '"Recreate"', '"OnReplenish"'),
    ),
    "pool-missing-spec": Rejected(
        SANDBOX_WARM_POOLS, without_spec(pool("p")), ("spec: Required value",)
    ),
    "pool-missing-template-ref": Rejected(
        SANDBOX_WARM_POOLS,
        without_spec(pool("p"), "sandboxTemplateRef"),
        ("spec.sandboxTemplateRef: Required value",),
    ),
    "pool-empty-template-name": Rejected(
        SANDBOX_WARM_POOLS,
        pool("p", tpl=""),
        ("sandboxTemplateRef.name must name a SandboxTemplate in the same namespace",),
    ),
    "pool-template-name-no-object-can-have": Rejected(
        SANDBOX_WARM_POOLS,
        pool("p", tpl="Bad_Name"),
        (
            "spec.sandboxTemplateRef.name",
            "sandboxTemplateRef.name must be the name of a SandboxTemplate",
        ),
    ),
    "pool-template-name-too-long": Rejected(
        SANDBOX_WARM_POOLS,
        pool("p", tpl="t" * 254),
        ("spec.sandboxTemplateRef.name: Too long: may not be more than 253",),
    ),
    "pool-template-ref-namespace": Rejected(
        SANDBOX_WARM_POOLS,
        pool("p", sandboxTemplateRef={"name": "tpl", "namespace": "elsewhere"}),
        (
            "spec.sandboxTemplateRef.namespace: Forbidden",
            "the SandboxTemplate must be in the same namespace as this object",
        ),
    ),
    "pool-name-too-long": Rejected(
        SANDBOX_WARM_POOLS,
        with_meta(pool("p"), name=LONG_NAME),
        ("must be no more than 253 characters",),
    ),
    "pool-label-value-too-long": Rejected(
        SANDBOX_WARM_POOLS,
        with_meta(pool("p"), labels={"team": LONG_VALUE}),
        ("must be no more than 63 bytes",),
    ),
    # ---- SandboxClaim (the union of both client generations: docs/api.md)
    "claim-template-and-pool": Rejected(
        SANDBOX_CLAIMS,
        claim("c", sandboxTemplateRef={"name": "tpl"}, warmPoolRef={"name": "pool"}),
        ("exactly one of spec.sandboxTemplateRef and spec.warmPoolRef must be set",),
    ),
    "claim-no-reference": Rejected(
        SANDBOX_CLAIMS,
        claim("c"),
        ("exactly one of spec.sandboxTemplateRef and spec.warmPoolRef must be set",),
    ),
    "claim-missing-spec": Rejected(
        SANDBOX_CLAIMS, without_spec(claim("c")), ("spec: Required value",)
    ),
    "claim-policy-with-pool-ref": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": "pool"}, warmpool="none"),
        ("spec.warmpool is only allowed with spec.sandboxTemplateRef",),
    ),
    "claim-unknown-warmpool-policy": Rejected(
        SANDBOX_CLAIMS,
        claim("c", sandboxTemplateRef={"name": "tpl"}, warmpool="Any_Pool"),
        ('warmpool must be "none", "default" or the name of a SandboxWarmPool',),
    ),
    "claim-unknown-shutdown-policy": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": "pool"}, lifecycle={"shutdownPolicy": "Archive"}),
        ('spec.lifecycle.shutdownPolicy: Unsupported value: "Archive"', '"DeleteForeground"'),
    ),
    "claim-negative-ttl": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": "pool"}, lifecycle={"ttlSecondsAfterFinished": -1}),
        ("spec.lifecycle.ttlSecondsAfterFinished", "should be greater than or equal to 0"),
    ),
    "claim-env-without-value": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": "pool"}, env=[{"name": "A"}]),
        ("spec.env[0].value: Required value",),
    ),
    "claim-empty-pool-name": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": ""}),
        ("warmPoolRef.name must name a SandboxWarmPool in the same namespace",),
    ),
    "claim-pool-name-no-object-can-have": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": "Pool!"}),
        ("spec.warmPoolRef.name", "warmPoolRef.name must be the name of a SandboxWarmPool"),
    ),
    "claim-template-ref-namespace": Rejected(
        SANDBOX_CLAIMS,
        claim("c", sandboxTemplateRef={"name": "tpl", "namespace": "elsewhere"}),
        ("spec.sandboxTemplateRef.namespace: Forbidden", "must be in the same namespace"),
    ),
    "claim-pool-ref-namespace": Rejected(
        SANDBOX_CLAIMS,
        claim("c", warmPoolRef={"name": "pool", "namespace": "elsewhere"}),
        ("spec.warmPoolRef.namespace: Forbidden", "must be in the same namespace"),
    ),
    "claim-name-too-long": Rejected(
        SANDBOX_CLAIMS,
        with_meta(claim("c", warmPoolRef={"name": "pool"}), name=LONG_NAME),
        ("must be no more than 253 characters",),
    ),
    "claim-label-value-too-long": Rejected(
        SANDBOX_CLAIMS,
        with_meta(claim("c", warmPoolRef={"name": "pool"}), labels={"team": LONG_VALUE}),
        ("must be no more than 63 bytes",),
    ),
}


# ------------------------------------------------------------------------------------ fixtures
@contextlib.asynccontextmanager
async def fresh_namespace(client: Client) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await client.create(NAMESPACES, {"metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await client.delete(NAMESPACES, name)


@pytest.fixture(scope="module")
async def home(module_client: Client) -> AsyncIterator[str]:
    async with fresh_namespace(module_client) as ns:
        yield ns


@pytest.fixture(scope="module")
async def elsewhere(module_client: Client) -> AsyncIterator[str]:
    async with fresh_namespace(module_client) as ns:
        yield ns


# ------------------------------------------------------------------------------------ rejected
@pytest.mark.parametrize("version", ["v1beta1", "v1alpha1"])  # both served, one schema
@pytest.mark.parametrize("case", list(REJECTED.values()), ids=list(REJECTED))
async def test_rejected_by_the_apiserver_with_a_clear_message(
    client: Client, home: str, case: Rejected, version: str
) -> None:
    resource = dataclasses.replace(case.resource, version=version)
    body = {**case.body, "apiVersion": f"{case.resource.group}/{version}"}
    with pytest.raises(ApiError) as caught:
        await client.create(resource, body, home)
    err = caught.value
    assert err.status in (400, 422), (err.status, err.message)
    for fragment in case.message:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"
    # and nothing was stored
    stored = {o["metadata"]["name"] for o in (await client.list(case.resource, home)).items}
    assert body["metadata"]["name"] not in stored


# ------------------------------------------------------------------------------------ accepted
GRACE = 3.0  # the pool's readiness grace period here: a sandbox that cannot start is held sooner


@pytest.fixture(scope="class")
async def manager(module_client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(module_client)
    sandbox_controller.setup(mgr, 4, "cluster.local")
    warmpool.setup(mgr, Settings(readiness_grace_period=GRACE), workers=2)
    claim_controller.setup(mgr, workers=4)
    template_controller.setup(mgr, workers=1)
    with counting_passes():
        async with running(mgr):
            await asyncio.wait_for(mgr.wait_started(), 20)
            await asyncio.wait_for(mgr.informers.wait_synced(), 20)
            yield mgr


def ready_of(obj: dict[str, Any]) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return dict(cond)
    return {}


async def reported(
    client: Client, resource: Resource, name: str, ns: str, reason: str, within: float = 20.0
) -> dict[str, Any]:
    """The object once its Ready condition is False with ``reason``."""

    async def check() -> dict[str, Any] | None:
        obj = await client.get(resource, name, ns)
        cond = ready_of(obj)
        return obj if cond.get("status") == "False" and cond.get("reason") == reason else None

    return dict(
        await eventually(check, within=within, what=f"{resource.kind} {name}: Ready=False {reason}")
    )


async def event(
    client: Client, name: str, ns: str, reason: str | None, within: float = 10.0
) -> dict[str, Any]:
    """The Warning Event ``reason`` (None: any) about the object ``name``."""

    async def check() -> dict[str, Any] | None:
        listed = await client.list(EVENTS, ns, field_selector=f"regarding.name={name}")
        for ev in listed.items:
            if reason in (None, ev.get("reason")) and ev.get("type") == "Warning":
                return dict(ev)
        return None

    try:
        return dict(
            await eventually(check, within=within, what=f"a Warning event {reason} about {name}")
        )
    except AssertionError as err:
        raise NoEvent(str(err)) from None


class NoEvent(AssertionError):
    """No Event reported the problem (bugs 1 and 2 failed with exactly this, before their fix)."""


class Passes(logging.Handler):
    """Counts reconcile passes per ``namespace/name``, from the controllers' one debug line per
    pass (``reconciled``, with ``controller`` and ``request``), so a hot loop on one object
    shows whatever else the cluster is doing."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.by_key: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "reconciled":
            self.by_key[str(getattr(record, "request", ""))] += 1


PASSES = Passes()


@contextlib.contextmanager
def counting_passes() -> Iterator[Passes]:
    logger = logging.getLogger("agentsandbox.kube.controller")
    level = logger.level
    logger.addHandler(PASSES)
    logger.setLevel(logging.DEBUG)
    try:
        yield PASSES
    finally:
        logger.removeHandler(PASSES)
        logger.setLevel(level)


async def assert_left_alone(
    client: Client, resource: Resource, name: str, ns: str, seconds: float = 1.0
) -> None:
    """No hot loop: over ``seconds`` the object is not written again and the controllers run
    only a few passes over it (backoff and requeues, not a loop)."""
    key = f"{ns}/{name}"
    before = (await client.get(resource, name, ns))["metadata"]["resourceVersion"]
    counted = PASSES.by_key[key]

    async def version() -> str:
        return str((await client.get(resource, name, ns))["metadata"]["resourceVersion"])

    await stays(
        version,
        accept=lambda after: after == before,
        for_=seconds,
        what=f"{resource.kind} {name} not written again while reported",
    )
    ran = PASSES.by_key[key] - counted
    assert PASSES.by_key[key] >= 1, f"no pass over {key} was ever counted"
    # exponential backoff from 5 ms makes ~8 passes in an error's first second; a loop, 100s
    assert ran <= 10, f"{ran} passes over {key} in {seconds}s: a hot loop"


BAD_POD_CONTAINER = "Main_1"  # fine for the CRD schema, not a container name the Pod API takes
POD_API_SAYS = f'spec.containers[0].name: Invalid value: "{BAD_POD_CONTAINER}"'


@pytest.mark.usefixtures("manager")
class TestAcceptedThenReported:
    async def test_pool_whose_template_is_in_another_namespace(
        self, client: Client, home: str, elsewhere: str
    ) -> None:
        await client.create(SANDBOX_TEMPLATES, template("only-elsewhere"), elsewhere)
        await client.create(SANDBOX_WARM_POOLS, pool("p-elsewhere", "only-elsewhere", 2), home)
        p = await reported(client, SANDBOX_WARM_POOLS, "p-elsewhere", home, "TemplateNotFound")
        assert 'SandboxTemplate "only-elsewhere" not found' in ready_of(p)["message"]
        ev = await event(client, "p-elsewhere", home, "WarmPoolNotProgressing")
        assert "only-elsewhere" in ev["note"]
        await assert_left_alone(client, SANDBOX_WARM_POOLS, "p-elsewhere", home)
        selector = f"{keys.LABEL_WARM_POOL_SANDBOX}={name_hash('p-elsewhere')}"
        assert (await client.list(SANDBOXES, home, label_selector=selector)).items == []

    @pytest.mark.parametrize(
        "form",
        [
            "sandboxTemplateRef",
            "warmPoolRef",
        ],
    )
    async def test_claim_whose_template_or_pool_is_in_another_namespace(
        self, client: Client, home: str, elsewhere: str, form: str
    ) -> None:
        with contextlib.suppress(AlreadyExists):  # shared by both forms
            await client.create(SANDBOX_TEMPLATES, template("tpl-away"), elsewhere)
        with contextlib.suppress(AlreadyExists):
            await client.create(SANDBOX_WARM_POOLS, pool("pool-away", "tpl-away", 0), elsewhere)
        await client.get(SANDBOX_TEMPLATES, "tpl-away", elsewhere)  # both there (else NotFound)
        await client.get(SANDBOX_WARM_POOLS, "pool-away", elsewhere)
        name = f"c-away-{form.lower()}"
        if form == "sandboxTemplateRef":
            body, reason, what = (
                claim(name, sandboxTemplateRef={"name": "tpl-away"}),
                ("TemplateNotFound"),
                "tpl-away",
            )
        else:
            body, reason, what = (
                claim(name, warmPoolRef={"name": "pool-away"}),
                ("WarmPoolNotFound"),
                "pool-away",
            )
        await client.create(SANDBOX_CLAIMS, body, home)
        c = await reported(client, SANDBOX_CLAIMS, name, home, reason)
        assert what in ready_of(c)["message"]
        await assert_left_alone(client, SANDBOX_CLAIMS, name, home)
        assert (
            await client.list(SANDBOXES, home, field_selector=f"metadata.name={name}")
        ).items == []
        ev = await event(client, name, home, reason, within=1.0)
        assert what in ev["note"]

    async def test_pool_whose_pod_spec_the_apiserver_rejects_is_held_not_churned(
        self, client: Client, home: str
    ) -> None:
        """The CRD takes the template (the PodSpec schema has no name syntax); the Pod API
        refuses every pod. Each sandbox reports the Pod API's message (condition and Event);
        after the grace period the pool holds them (SandboxesBlocked, a Warning) instead of
        replacing them over and over."""
        await client.create(
            SANDBOX_TEMPLATES, template("tpl-badpod", container=BAD_POD_CONTAINER), home
        )
        created: list[str] = []

        def on_add(sb: dict[str, Any]) -> None:
            labels = sb["metadata"].get("labels") or {}
            if labels.get(keys.LABEL_WARM_POOL_SANDBOX) == name_hash("p-badpod"):
                created.append(sb["metadata"]["name"])

        watch = Informer(client, SANDBOXES, home)
        watch.add_handler(on_add)
        watch.start()
        try:
            await asyncio.wait_for(watch.wait_synced(), 10)
            await client.create(SANDBOX_WARM_POOLS, pool("p-badpod", "tpl-badpod", 2), home)
            await eventually(lambda: len(created) >= 2, within=20.0, what="two pool sandboxes")
            sb = await reported(client, SANDBOXES, created[0], home, "ReconcilerError")
            assert POD_API_SAYS in ready_of(sb)["message"]
            ev = await event(client, created[0], home, "ReconcilerError")
            assert POD_API_SAYS in ev["note"]
            p = await reported(
                client, SANDBOX_WARM_POOLS, "p-badpod", home, "SandboxesBlocked", GRACE + 15
            )
            assert POD_API_SAYS in ready_of(p)["message"]
            ev = await event(client, "p-badpod", home, "WarmPoolNotProgressing")
            assert POD_API_SAYS in ev["note"]
            await assert_left_alone(client, SANDBOX_WARM_POOLS, "p-badpod", home)
            await assert_left_alone(client, SANDBOXES, created[0], home)
        finally:
            await watch.stop()
        assert len(created) == 2, f"the pool replaced sandboxes that cannot start: {created}"

    async def test_cold_claim_whose_pod_spec_the_apiserver_rejects(
        self, client: Client, home: str
    ) -> None:
        with contextlib.suppress(AlreadyExists):  # the pool's test may have made it
            await client.create(
                SANDBOX_TEMPLATES, template("tpl-badpod", container=BAD_POD_CONTAINER), home
            )
        await client.get(SANDBOX_TEMPLATES, "tpl-badpod", home)  # there (else NotFound)
        await client.create(
            SANDBOX_CLAIMS,
            claim("c-badpod", sandboxTemplateRef={"name": "tpl-badpod"}, warmpool="none"),
            home,
        )
        c = await reported(client, SANDBOX_CLAIMS, "c-badpod", home, "ReconcilerError")
        assert POD_API_SAYS in ready_of(c)["message"]
        ev = await event(client, "c-badpod", home, "ReconcilerError")  # about the Sandbox
        assert ev["regarding"]["kind"] == "Sandbox"
        assert POD_API_SAYS in ev["note"]
        await assert_left_alone(client, SANDBOX_CLAIMS, "c-badpod", home)

    async def test_sandbox_whose_pod_spec_the_apiserver_rejects(
        self, client: Client, home: str
    ) -> None:
        await client.create(SANDBOXES, sandbox("s-badpod", container=BAD_POD_CONTAINER), home)
        sb = await reported(client, SANDBOXES, "s-badpod", home, "ReconcilerError")
        assert POD_API_SAYS in ready_of(sb)["message"]
        ev = await event(client, "s-badpod", home, "ReconcilerError")
        assert POD_API_SAYS in ev["note"]
        await assert_left_alone(client, SANDBOXES, "s-badpod", home)

    @pytest.mark.parametrize(
        ("name", "says"),
        [
            ("s" * 253, "must be no more than 63 characters"),
            ("has.dots", "must not contain dots"),
        ],
        ids=["253-characters", "dots"],
    )
    async def test_sandbox_with_a_service_and_a_name_no_service_can_have(
        self, client: Client, home: str, name: str, says: str
    ) -> None:
        """A Sandbox name may be a 253-character DNS subdomain; its Service's name must be a
        63-character DNS label. The pod runs, the Service is refused: reported, not retried hot."""
        await client.create(SANDBOXES, sandbox(name, service=True), home)
        sb = await reported(client, SANDBOXES, name, home, "ReconcilerError")
        assert f'Service "{name}" is invalid' in ready_of(sb)["message"]
        assert says in ready_of(sb)["message"]
        ev = await event(client, name, home, "ReconcilerError")
        assert says in ev["note"]
        await assert_left_alone(client, SANDBOXES, name, home)

    async def test_claim_with_a_pod_label_value_too_long(self, client: Client, home: str) -> None:
        """The claim's additionalPodMetadata is a free map in the schema; the controller checks
        it (docs/design/claim.md, "Pod metadata and env") and reports instead of creating a pod
        the apiserver would refuse."""
        await client.create(SANDBOX_TEMPLATES, template("tpl-meta"), home)
        await client.create(
            SANDBOX_CLAIMS,
            claim(
                "c-meta",
                sandboxTemplateRef={"name": "tpl-meta"},
                additionalPodMetadata={"labels": {"sandbox.users.io/team": LONG_VALUE}},
            ),
            home,
        )
        c = await reported(client, SANDBOX_CLAIMS, "c-meta", home, "InvalidMetadata")
        assert "must be no more than 63 characters" in ready_of(c)["message"]
        await assert_left_alone(client, SANDBOX_CLAIMS, "c-meta", home)
        ev = await event(client, "c-meta", home, "InvalidMetadata", within=1.0)
        assert LONG_VALUE in ev["note"]

    async def test_template_whose_network_policy_the_apiserver_rejects(
        self, client: Client, home: str
    ) -> None:
        """The CRD takes any string as a CIDR; the NetworkPolicy API does not. The policy is
        never created (so the template's sandboxes would run without it): a Warning Event on
        the template must say why, and the controller backs off."""
        body = template(
            "tpl-badnp", networkPolicy={"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}
        )
        await client.create(SANDBOX_TEMPLATES, body, home)
        await eventually(  # a template has no status to report on: its first pass
            lambda: PASSES.by_key[f"{home}/tpl-badnp"],
            within=20.0,
            what="a first pass over tpl-badnp",
        )
        await assert_left_alone(client, SANDBOX_TEMPLATES, "tpl-badnp", home)
        with pytest.raises(NotFound):
            await client.get(NETWORKPOLICIES, "tpl-badnp-network-policy", home)
        ev = await event(client, "tpl-badnp", home, None, within=1.0)
        assert 'Invalid value: "10.0.0.0/33"' in ev["note"]

    async def test_longest_names_every_kind_accepts_serve_a_claim(
        self, client: Client, home: str
    ) -> None:
        """The longest names each kind accepts: 253 characters (the most the apiserver takes)
        for the pool and the claim, 238 for a template with a managed NetworkPolicy (named
        ``<template>-network-policy``, 253), 253 for an Unmanaged one. The policy exists, the
        pool's sandboxes get generated names, labels carry hashes, and the warm claim is
        served."""
        tpl, pl, cl = "t" * 238, "p" * 253, "c" * 253
        await client.create(
            SANDBOX_TEMPLATES, template("u" * 253, networkPolicyManagement="Unmanaged"), home
        )
        await client.create(SANDBOX_TEMPLATES, template(tpl), home)
        await client.create(SANDBOX_WARM_POOLS, pool(pl, tpl, 1), home)

        async def pool_ready() -> bool:
            return ready_of(await client.get(SANDBOX_WARM_POOLS, pl, home)).get("status") == "True"

        await eventually(pool_ready, within=30, what="the pool with a 253-character name Ready")
        await client.create(SANDBOX_CLAIMS, claim(cl, warmPoolRef={"name": pl}), home)

        async def claim_ready() -> dict[str, Any] | None:
            c = await client.get(SANDBOX_CLAIMS, cl, home)
            return c if ready_of(c).get("status") == "True" else None

        c = await eventually(
            claim_ready, within=30, what="the claim with a 253-character name Ready"
        )
        served = c["status"]["sandbox"]["name"]
        assert served.startswith("p" * 50) and len(served) <= 63
        policy = await client.get(NETWORKPOLICIES, f"{tpl}-network-policy", home)
        assert len(policy["metadata"]["name"]) == 253


# ------------------------------------------------------------------------------------ 10^6
QPS = 40
# the pool's batch: small enough that two passes (the progress the test waits for) take about
# 5 s at QPS, not 15 s, large enough that a pass is many creates
BATCH = 100


class CreatesAfterDelete(AssertionError):
    """A create that started more than 5 s after the pool's delete (fixed: the pool's delete
    cancels its create batch, warmpool_act.py ``_unless``)."""


async def drain(client: Client, ns: str, within: float = 40.0) -> float:
    """Delete the namespace's sandboxes and wait for them and their pods to be gone, so that
    the hundreds this test made do not load the control plane under the tests after it.
    Returns how long it took."""
    t0 = time.monotonic()
    await client.delete_collection(SANDBOXES, ns, propagation_policy="Background")

    async def left() -> int:
        return len((await client.list(SANDBOXES, ns)).items) + len(
            (await client.list(PODS, ns)).items
        )

    with contextlib.suppress(AssertionError):  # best effort: the namespace goes anyway
        await eventually(
            left, accept=lambda n: n == 0, within=within, what="an empty namespace", interval=0.5
        )
    return time.monotonic() - t0


async def test_a_million_replicas_are_created_in_bounded_passes_and_stop_with_the_pool(
    client: Client, cluster: DevCluster, tmp_path: Path
) -> None:
    """Runs at most 30 s. ``--kube-api-qps`` bounds every request the process makes, so the
    pool's creates stay within ``burst + qps * t``; a pass creates at most the batch size (100),
    counted as the creates between two of the pool's status writes; status.replicas shows
    progress; after the pool is deleted, no create starts more than 5 s later."""
    started = time.monotonic()
    hard_stop = started + 30
    creates: list[float] = []
    writes: list[tuple[float, int, int]] = []  # (when, creates seen so far, status.replicas)
    pool_hash = name_hash("huge")

    def on_sandbox(sb: dict[str, Any]) -> None:
        if (sb["metadata"].get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX) == pool_hash:
            creates.append(time.monotonic())

    progress = asyncio.Event()  # status.replicas > 0: a second pass is over, a third begins

    def on_pool(old: dict[str, Any], new: dict[str, Any]) -> None:
        if old.get("status") != new.get("status"):
            replicas = (new.get("status") or {}).get("replicas", 0)
            writes.append((time.monotonic(), len(creates), replicas))
            if replicas > 0:
                progress.set()

    async with fresh_namespace(client) as ns:
        sandboxes = Informer(client, SANDBOXES, ns)
        sandboxes.add_handler(on_sandbox)
        pools = Informer(client, SANDBOX_WARM_POOLS, ns)
        pools.add_handler(None, on_pool)
        for inf in (sandboxes, pools):
            inf.start()
        try:
            await asyncio.wait_for(sandboxes.wait_synced(), 10)
            await asyncio.wait_for(pools.wait_synced(), 10)
            await client.create(SANDBOX_TEMPLATES, template("tpl"), ns)
            flags = (
                f"--kube-api-qps={QPS}",
                f"--kube-api-burst={QPS}",
                f"--sandbox-warm-pool-max-batch-size={BATCH}",
                # one Sandbox worker: fewer pods competing with the pool for the limiter
                "--sandbox-concurrent-workers=1",
                "--zap-log-level=info",
            )
            with controller_process(cluster, tmp_path / "controller.log", flags=flags) as proc:
                await client.create(SANDBOX_WARM_POOLS, pool("huge", "tpl", 10**6), ns)
                # until a second pass has started (more than one batch), or 20 s
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(progress.wait(), started + 22 - time.monotonic())
                deleted_at = time.monotonic()
                await client.delete(SANDBOX_WARM_POOLS, "huge", ns)
                # creates 5 s after the delete or later would be seen by now
                await stays(
                    lambda: proc.poll() is None,
                    for_=min(6.5, max(0.0, hard_stop - time.monotonic())),
                    what="the controller running",
                )
        finally:
            for inf in (sandboxes, pools):
                await inf.stop()
            cleanup = await drain(client, ns)
    first = creates[0]
    during = [t for t in creates if t <= deleted_at]
    span = deleted_at - first
    print(f"\n10^6 replicas: cleaned up in {cleanup:.1f}s")
    print(
        f"10^6 replicas: {len(during)} creates in {span:.1f}s ({len(during) / span:.1f}/s, "
        f"QPS {QPS}); pool status writes: {[(round(t - first, 1), n, r) for t, n, r in writes]};"
        f" {len(creates) - len(during)} creates after the delete, the last "
        f"{max(creates) - deleted_at:.1f}s after it"
    )
    assert len(during) <= QPS + QPS * span + 5, "creates beyond --kube-api-qps"
    marks = [
        (first, 0, 0),
        *[w for w in writes if w[0] <= deleted_at],
        (deleted_at, len(during), 0),
    ]
    per_pass = [b[1] - a[1] for a, b in itertools.pairwise(marks)]
    assert per_pass and max(per_pass) <= BATCH, f"a pass created more than {BATCH}: {per_pass}"
    assert max(r for _, _, r in writes) > 0, "no progress in status.replicas"
    assert time.monotonic() - started <= 45
    if max(creates) - deleted_at > 5.0:
        raise CreatesAfterDelete(
            f"creates went on {max(creates) - deleted_at:.1f}s after the pool was deleted"
        )
