"""Sandboxes whose status an earlier version of the controller wrote (a Ready condition, no
Suspended, no PodScheduled, no nodeName) get upstream v1.0.1's status on the first pass of a
controller started over them: one status write each, nothing else (docs/design/sandbox.md,
"Status fields" and "Migration of existing sandboxes").

The module runs its own controllers, one after the other: the first brings the Sandboxes up, the
test then rewrites their statuses in the older form, and a second one, started over them, is
watched through a client that records every call it makes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsandbox.api.conditions import find_condition
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import Resource
from tests.polling import eventually, stays

from .runtime_helpers import running
from .test_sandbox_controller import new_sandbox

N = 20


@dataclass(frozen=True)
class Call:
    at: float
    verb: str
    kind: str
    namespace: str | None
    name: str
    subresource: str | None


#: Where each recorded method takes the namespace among its positional arguments.
NAMESPACE_AT = {"get": 2, "create": 2, "patch": 3, "delete": 2}


def recording(client: Client) -> list[Call]:
    """Record every get, create, patch and delete ``client`` is asked for (the reconciler's
    reads and writes; lists and watches are the informers')."""
    calls: list[Call] = []

    def wrap(verb: str) -> Any:
        original = getattr(client, verb)
        pos = NAMESPACE_AT[verb]

        async def call(*args: Any, **kw: Any) -> Any:
            resource: Resource = args[0]
            name = args[1]["metadata"]["name"] if verb == "create" else args[1]
            namespace = args[pos] if len(args) > pos else kw.get("namespace")
            what = Call(
                time.monotonic(), verb, resource.kind, namespace, name, kw.get("subresource")
            )
            calls.append(what)
            return await original(*args, **kw)

        return call

    for verb in NAMESPACE_AT:
        setattr(client, verb, wrap(verb))
    return calls


def new_form(sb: Mapping[str, Any]) -> bool:
    status = sb.get("status") or {}
    conditions = status.get("conditions")
    return (
        find_condition(conditions, "Suspended") is not None
        and find_condition(conditions, "PodScheduled") is not None
        and bool(status.get("nodeName"))
    )


async def sandboxes(client: Client, ns: str) -> list[dict[str, Any]]:
    return list((await client.list(SANDBOXES, ns)).items)


async def test_an_older_status_gets_the_new_conditions_with_one_status_write_each(
    client: Client, kubeconfig: str, namespace: str
) -> None:
    ns = namespace
    names = [f"old-{i:03d}" for i in range(N)]

    # 1. the Sandboxes, Ready, under a first controller
    async with Client.from_kubeconfig(kubeconfig, qps=0) as first_client:
        first = Manager(first_client)
        sandbox_controller.setup(first, workers=4)
        async with running(first):
            await asyncio.wait_for(first.wait_started(), 10)
            await asyncio.gather(*(client.create(SANDBOXES, new_sandbox(n), ns) for n in names))

            async def all_ready() -> bool:
                listed = await sandboxes(client, ns)
                return len(listed) == N and all(
                    (find_condition((s.get("status") or {}).get("conditions"), "Ready") or {}).get(
                        "status"
                    )
                    == "True"
                    for s in listed
                )

            await eventually(all_ready, within=60.0, what=f"{N} sandboxes Ready")

    # 2. their statuses as an earlier version wrote them: Ready alone, no nodeName
    for sb in await sandboxes(client, ns):
        status = sb["status"]
        ready = find_condition(status["conditions"], "Ready")
        assert ready is not None and new_form(sb)
        older = {"status": {"nodeName": None, "conditions": [dict(ready)]}}
        await client.patch(SANDBOXES, sb["metadata"]["name"], older, ns, subresource="status")
    assert not any(new_form(sb) for sb in await sandboxes(client, ns))

    # 3. a controller started over them (the binary's defaults: one worker, no QPS limit)
    async with Client.from_kubeconfig(kubeconfig, qps=0) as second_client:
        calls = recording(second_client)
        second = Manager(second_client)
        sandbox_controller.setup(second)
        async with running(second):
            await asyncio.wait_for(second.wait_started(), 10)

            async def migrated() -> bool:
                listed = await sandboxes(client, ns)
                return len(listed) == N and all(new_form(s) for s in listed)

            await eventually(migrated, within=60.0, what="every sandbox in the new form")
            ours = [c for c in calls if c.namespace == ns]
            # and then nothing more: the pass our own write triggers writes nothing
            await stays(
                lambda: len([c for c in calls if c.namespace == ns]),
                accept=lambda n: n == len(ours),
                for_=1.0,
                what="no call after the migration",
            )

    assert sorted((c.verb, c.kind, c.name, c.subresource) for c in ours) == [
        ("patch", SANDBOXES.kind, n, "status") for n in names
    ]
    for sb in await sandboxes(client, ns):
        conditions = sb["status"]["conditions"]
        # Ready keeps its place (and its transition time); the new ones are appended
        assert [c["type"] for c in conditions] == ["Ready", "Suspended", "PodScheduled"]
        assert conditions[1]["reason"] == "NotSuspended"
        assert conditions[2]["status"] == "True"
