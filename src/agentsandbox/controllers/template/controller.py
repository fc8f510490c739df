"""The SandboxTemplate controller: wiring, observe (caches) and the reconciler: observe -> decide
(:mod:`.plan`) -> act (:mod:`.act`); the NetworkPolicy-name mapping is :mod:`.handlers`.

Wiring (docs/design/template.md, "Wiring"): ``For(SandboxTemplate)``, ``Owns(NetworkPolicy)``,
plus a watch
that maps *any* NetworkPolicy named ``<template>-network-policy`` to its template, so that when a
conflicting policy of someone else goes away the template's own is created at once (the backoff
retry is only the safety net).

The writes, each with its precondition, are :class:`~.act.TemplateWriter`'s, which the
reconciler holds; observe decides on what the writer's last writes returned while the cache lags
them.
"""

from __future__ import annotations

from agentsandbox.api.resources import SANDBOX_TEMPLATES
from agentsandbox.controllers.common.errors import ReconcileErrors
from agentsandbox.controllers.template.act import TemplateWriter
from agentsandbox.controllers.template.handlers import template_for_policy
from agentsandbox.controllers.template.plan import (
    Action,
    Snapshot,
    network_policy_name,
    plan,
)
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import NETWORKPOLICIES
from agentsandbox.kube.store import KubeObject

CONTROLLER_NAME = "sandboxtemplate"
EVENT_SOURCE = "sandboxtemplate-controller"
CONFLICT_RECHECK = 1.0  # seconds: look again this soon after a write lost a race


class TemplateReconciler:
    """Keeps each SandboxTemplate's NetworkPolicy as the template says, and labels the template
    with its ref hash."""

    def __init__(
        self,
        writer: TemplateWriter,
        templates: Informer,
        network_policies: Informer,
        egress_except: tuple[str, ...] = (),
    ) -> None:
        self.writer = writer
        self.templates = templates
        self.network_policies = network_policies
        self.egress_except = egress_except
        network_policies.add_handler(writer.seen, writer.seen_update, writer.seen_delete)

    # ---------------------------------------------------------------- observe
    def observe(self, template: KubeObject) -> Snapshot:
        meta = template["metadata"]
        ns, name = meta["namespace"], network_policy_name(meta["name"])
        np = self.writer.network_policy(ns, name, self.network_policies.get(name, ns))
        self.writer.template_seen(template)
        return Snapshot(template=template, network_policy=np, egress_except=self.egress_except)

    # ---------------------------------------------------------------- reconcile
    async def reconcile(self, req: Request) -> Result | None:
        template = self.templates.get(req.name, req.namespace)
        if template is None:
            self.writer.template_gone(str(req))
            return None
        decision = plan(self.observe(template))
        errors: list[BaseException] = []
        retry_soon = await self.writer.write_network_policy(template, decision, errors)
        retry_soon |= await self.writer.label_template(template, decision, errors)
        if errors:
            raise errors[0] if len(errors) == 1 else ReconcileErrors(errors)
        if retry_soon:
            return Result(requeue_after=CONFLICT_RECHECK)
        if decision.action is Action.CONFLICT:
            return Result(requeue=True)  # rate-limited backoff until the other policy goes
        return None


def setup(mgr: Manager, workers: int = 1, egress_except: tuple[str, ...] = ()) -> Controller:
    """Register the SandboxTemplate controller with a manager. ``egress_except``: extra
    except-CIDRs of the default policy's egress (``--network-policy-egress-except``)."""
    templates = mgr.get_informer(SANDBOX_TEMPLATES)
    network_policies = mgr.get_informer(NETWORKPOLICIES)
    reconciler = TemplateReconciler(
        TemplateWriter(mgr.client, mgr.event_recorder(EVENT_SOURCE)),
        templates,
        network_policies,
        egress_except,
    )
    return (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOX_TEMPLATES)
        .owns(NETWORKPOLICIES)
        .watches(NETWORKPOLICIES, template_for_policy)
        .workers(workers)
        .complete(reconciler)
    )


__all__ = ["CONTROLLER_NAME", "TemplateReconciler", "setup"]
