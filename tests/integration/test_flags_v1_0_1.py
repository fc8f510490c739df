"""Two flags of upstream v1.0.1 against the real local control plane (pods run by kwok), each
with the controllers registered from the parsed flags as the binary registers them.

- ``--cache-label-selectors``: both values start the controller, and under both a
  pre-provisioned ``agents.x-k8s.io/adoptable`` pod without the tracking label is adopted; our
  pod cache stays scoped to the tracking label under ``false`` too.
- ``--sandbox-write-behind-window``: with a window, a burst of pod template edits leaves the
  pod with the same labels and annotations as without one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.cli.controller import register_controllers
from agentsandbox.cli.options import Options, build_flagset, given_flags
from agentsandbox.controllers.common.podcache import pod_informer
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import PODS
from tests.polling import eventually

from .runtime_helpers import running
from .test_sandbox_controller import new_sandbox, user_pod, wait_event, wait_ready


def options(*argv: str) -> Options:
    values, _ = build_flagset().parse(list(argv))
    return Options.from_values(values, given_flags(list(argv)))


@asynccontextmanager
async def controller(client: Client, *argv: str) -> AsyncIterator[Manager]:
    """The Sandbox controller (no --extensions), registered from ``argv``, running."""
    opts = options(*argv)
    assert opts.errors() == []
    mgr = Manager(client)
    register_controllers(mgr, opts)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 10)
        await asyncio.wait_for(mgr.informers.wait_synced(), 10)
        yield mgr


# ------------------------------------------------------------------ --cache-label-selectors
@pytest.mark.parametrize("value", ["true", "false"])
async def test_an_adoptable_pod_without_the_tracking_label_is_adopted_under_both_values(
    client: Client, namespace: str, value: str
) -> None:
    """Upstream's caveat (with the flag on, such a pod must carry the tracking label to be
    seen) does not apply here: the create is answered AlreadyExists, the controller reads the
    pod from the API and adopts it, whatever the flag says."""
    name = f"pre-{value}"
    mine = await client.create(
        PODS, user_pod(name, {"app": "mine", keys.LABEL_ADOPTABLE: "true"}), namespace
    )
    bystander = await client.create(PODS, user_pod(f"other-{value}"), namespace)
    assert keys.LABEL_SANDBOX_NAME_HASH not in mine["metadata"]["labels"]
    async with controller(client, f"--cache-label-selectors={value}") as mgr:
        created = await client.create(SANDBOXES, new_sandbox(name), namespace)
        await wait_ready(client, name, namespace)
        pod = await client.get(PODS, name, namespace)
        assert pod["metadata"]["uid"] == mine["metadata"]["uid"]  # adopted, not replaced
        [ref] = pod["metadata"]["ownerReferences"]
        assert (ref["uid"], ref["controller"]) == (created["metadata"]["uid"], True)
        assert pod["metadata"]["labels"][keys.LABEL_SANDBOX_NAME_HASH] == name_hash(name)
        await wait_event(client, namespace, name, "Normal", "Adopted")
        # the pod cache is scoped under both values: it shows the adopted pod (labelled after
        # the bystander was created, so a cache of every pod would have shown the bystander
        # first) and never the unlabelled bystander
        cache = pod_informer(mgr)
        await eventually(
            lambda: cache.get(name, namespace) is not None,
            within=10.0,
            what="the adopted pod in the pod cache",
        )
        assert cache.get(bystander["metadata"]["name"], namespace) is None


# ------------------------------------------------------------ --sandbox-write-behind-window
# merge patches of the pod template's metadata, one after the other
EDITS: list[dict[str, Any]] = [
    {"labels": {"team": "b"}, "annotations": {"note": "one"}},
    {"labels": {"team": "c", "tier": "gold"}, "annotations": {"note": "two"}},
    {"labels": {"team": None, "tier": "silver"}, "annotations": {"note": "three", "extra": "x"}},
]
FINAL_LABELS = {"tier": "silver"}
FINAL_ANNOTATIONS = {"note": "three", "extra": "x"}


def template_metadata(pod: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The pod's labels without the tracking label (it hashes the Sandbox's own name), and its
    annotations."""
    labels = dict(pod["metadata"]["labels"])
    labels.pop(keys.LABEL_SANDBOX_NAME_HASH)
    return labels, dict(pod["metadata"].get("annotations") or {})


async def edited_pod(client: Client, namespace: str, name: str, *argv: str) -> dict[str, Any]:
    """Create a Sandbox, wait for it to be Ready, edit its pod template's metadata three times in
    a row, and return its pod once the pod carries the last edit's labels and annotations."""
    async with controller(client, *argv):
        sb = new_sandbox(name, labels={"team": "a"})
        await client.create(SANDBOXES, sb, namespace)
        await wait_ready(client, name, namespace)
        first = await client.get(PODS, name, namespace)
        for edit in EDITS:
            patch = {"spec": {"podTemplate": {"metadata": edit}}}
            await client.patch(SANDBOXES, name, patch, namespace)
        want = {**FINAL_LABELS, keys.LABEL_SANDBOX_NAME_HASH: name_hash(name)}

        async def synced() -> dict[str, Any] | None:
            pod = await client.get(PODS, name, namespace)
            return pod if pod["metadata"]["labels"] == want else None

        pod: dict[str, Any] = await eventually(synced, within=15.0, what="the last edit on the pod")
        assert pod["metadata"]["uid"] == first["metadata"]["uid"]
        await wait_ready(client, name, namespace)
        return pod


async def test_with_a_window_the_pod_ends_as_without_one(client: Client, namespace: str) -> None:
    plain = await edited_pod(client, namespace, "plain")
    deferred = await edited_pod(client, namespace, "deferred", "--sandbox-write-behind-window=1s")
    assert template_metadata(deferred) == template_metadata(plain)
    labels, annotations = template_metadata(deferred)
    assert labels == FINAL_LABELS
    assert annotations == {
        **FINAL_ANNOTATIONS,
        keys.ANNOTATION_PROPAGATED_LABELS: "tier",
        keys.ANNOTATION_PROPAGATED_ANNOTATIONS: "extra,note",
    }
