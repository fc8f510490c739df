"""The SandboxTemplate act step: :class:`TemplateWriter`, the writes that carry out a plan.

Every write carries a precondition: the create can only make a new object (AlreadyExists), the
update and the template label carry the resourceVersion they were decided on, the delete the
policy's UID and resourceVersion. A 409 means the cache was behind: look again shortly.

The cache lags our own writes, and the label written on the template re-queues it at once; so
the writer remembers the object each write returned until the informer has shown it, and the
reconciler decides on that instead of the stale cache entry (no second create answered
AlreadyExists).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentsandbox.api.resources import SANDBOX_TEMPLATES
from agentsandbox.controllers.template.plan import (
    REASON_NETWORK_POLICY_CONFLICT,
    REASON_NETWORK_POLICY_FAILED,
    Action,
    Plan,
    network_policy_name,
)
from agentsandbox.kube.client import Client, PatchType
from agentsandbox.kube.errors import AlreadyExists, ApiError, Conflict, KubeError, NotFound
from agentsandbox.kube.events import WARNING, EventRecorder
from agentsandbox.kube.resources import NETWORKPOLICIES
from agentsandbox.kube.store import KubeObject

log = logging.getLogger("agentsandbox.template")

WRITE_MEMORY = 30.0  # seconds: trust a remembered write over the cache at most this long


@dataclass(frozen=True)
class Written:
    """Our last write to one NetworkPolicy: the object the API returned (None: we deleted it)."""

    uid: str
    resource_version: str
    obj: KubeObject | None
    at: float


def _uid_rv(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class TemplateWriter:
    """Writes each template's NetworkPolicy, the template's ref-hash label and the Events on
    the template, and remembers what those writes returned while the caches lag them."""

    def __init__(
        self,
        client: Client,
        recorder: EventRecorder | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self._written: dict[str, Written] = {}  # by "<namespace>/<policy name>"
        # template key -> (uid, resourceVersion) our label patch was based on
        self._labelled: dict[str, tuple[str, str]] = {}
        # template key -> the last refusal announced by an Event (not repeated every retry)
        self._refusals: dict[str, str] = {}

    # ---------------------------------------------------------------- write memory
    def seen(self, obj: KubeObject) -> None:
        written = self._written.get(_key(obj))
        if (
            written is not None
            and written.obj is not None
            and _uid_rv(obj)
            == (
                written.uid,
                written.resource_version,
            )
        ):
            del self._written[_key(obj)]  # the cache now holds our write (or later)

    def seen_update(self, _old: KubeObject, new: KubeObject) -> None:
        self.seen(new)

    def seen_delete(self, obj: KubeObject) -> None:
        written = self._written.get(_key(obj))
        if written is not None and _uid_rv(obj)[0] == written.uid:
            del self._written[_key(obj)]

    def network_policy(
        self, namespace: str, name: str, cached: KubeObject | None
    ) -> KubeObject | None:
        """The policy ``name`` as our last write left it while the cache (``cached``) lags it;
        else ``cached``."""
        written = self._written.get(f"{namespace}/{name}")
        np = cached
        if written is not None:
            if self.clock() - written.at > WRITE_MEMORY:
                self._written.pop(f"{namespace}/{name}", None)  # an event was lost: trust the cache
            elif written.obj is None:
                if cached is not None and _uid_rv(cached)[0] == written.uid:
                    np = None  # deleted by us; the cache has not seen it yet
            elif cached is None or _uid_rv(cached)[0] == written.uid:
                np = written.obj  # created or updated by us; the cache is behind
        return np

    def template_seen(self, template: KubeObject) -> None:
        """Forget a label write the template's cached version has moved past."""
        labelled = self._labelled.get(_key(template))
        if labelled is not None and labelled != _uid_rv(template):
            del self._labelled[_key(template)]

    def template_gone(self, key: str) -> None:
        """The template ``<namespace>/<name>`` is gone: forget its label write and refusal."""
        self._labelled.pop(key, None)
        self._refusals.pop(key, None)

    # ---------------------------------------------------------------- writes
    async def write_network_policy(
        self, template: KubeObject, p: Plan, errors: list[BaseException]
    ) -> bool:
        """Apply the NetworkPolicy half of the plan. Returns True when a precondition failed
        (the cache was behind): the caller looks again shortly."""
        meta = template["metadata"]
        ns, tname = meta["namespace"], meta["name"]
        name = network_policy_name(tname)
        key = f"{ns}/{name}"
        try:
            if p.action is Action.CREATE and p.body is not None:
                created = await self.client.create(NETWORKPOLICIES, p.body, ns)
                self._remember(key, created)
                log.info("created NetworkPolicy", extra={"template": f"{ns}/{tname}", "np": name})
            elif p.action is Action.UPDATE and p.body is not None:
                updated = await self.client.update(NETWORKPOLICIES, p.body, ns)
                self._remember(key, updated)
                log.info("updated NetworkPolicy", extra={"template": f"{ns}/{tname}", "np": name})
            elif p.action is Action.DELETE and p.existing is not None:
                uid, rv = _uid_rv(p.existing)
                await self.client.delete(
                    NETWORKPOLICIES, name, ns, uid=uid, resource_version=rv or None
                )
                self._written[key] = Written(uid, rv, None, self.clock())
                log.info(
                    "deleted NetworkPolicy (Unmanaged)",
                    extra={"template": f"{ns}/{tname}", "np": name},
                )
            elif p.action is Action.CONFLICT:
                log.warning(p.message, extra={"template": f"{ns}/{tname}"})
                if self.recorder is not None:
                    self.recorder.event(
                        template,
                        WARNING,
                        REASON_NETWORK_POLICY_CONFLICT,
                        p.message,
                        action="Reconciling",
                    )
            elif p.action is Action.LEAVE:
                log.debug(p.message, extra={"template": f"{ns}/{tname}"})
        except (AlreadyExists, Conflict):
            self._written.pop(key, None)
            return True
        except NotFound:
            self._written.pop(key, None)
            return p.action is not Action.DELETE  # updated a policy that is gone: create it
        except KubeError as err:
            errors.append(err)
            if isinstance(err, ApiError) and 400 <= err.status < 500 and err.status != 429:
                # refused (invalid, forbidden): retrying will not help until someone acts, and
                # a template has no status: say it on the template, once per distinct message
                self._refused(template, p.action, err)
            return False
        self._refusals.pop(_key(template), None)
        return False

    def _refused(self, template: KubeObject, action: Action, err: ApiError) -> None:
        key, note = _key(template), f"cannot {action.value} NetworkPolicy: {err.message}"
        if self._refusals.get(key) == note or self.recorder is None:
            return
        self._refusals[key] = note
        self.recorder.event(
            template, WARNING, REASON_NETWORK_POLICY_FAILED, note, action="Reconciling"
        )

    def _remember(self, key: str, obj: KubeObject) -> None:
        uid, rv = _uid_rv(obj)
        self._written[key] = Written(uid, rv, obj, self.clock())

    async def label_template(
        self, template: KubeObject, p: Plan, errors: list[BaseException]
    ) -> bool:
        """Upstream #864: label the template with its ref hash (merge patch, resourceVersion
        precondition), once: a second pass on the same cached version does not repeat it."""
        if p.template_label_patch is None:
            return False
        key = _key(template)
        if self._labelled.get(key) == _uid_rv(template):
            return False
        try:
            await self.client.patch(
                SANDBOX_TEMPLATES,
                template["metadata"]["name"],
                p.template_label_patch,
                template["metadata"]["namespace"],
                patch_type=PatchType.MERGE,
            )
        except Conflict:
            return True
        except NotFound:
            return False
        except KubeError as err:
            errors.append(err)
            return False
        self._labelled[key] = _uid_rv(template)
        return False


__all__ = ["WRITE_MEMORY", "TemplateWriter", "Written"]
