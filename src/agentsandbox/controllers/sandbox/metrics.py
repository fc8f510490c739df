"""The ``agent_sandboxes`` gauge (docs/metrics.md, "Always registered") and the Sandbox label
helpers it shares with the SandboxClaim metrics (:mod:`agentsandbox.controllers.claim.metrics`).

``agent_sandboxes{namespace, ready_condition, expired, launch_type, sandbox_template, owned_by,
created_by}`` is computed on every scrape, one sample per distinct label tuple with the number
of Sandboxes carrying it. Upstream LISTs all Sandboxes from controller-runtime's cache (5 s
timeout); we read the Sandbox informer's cache directly — the same informer the Sandbox
controller watches with — so a scrape costs no API request and cannot time out. The metrics
handler runs on the event loop that feeds the informer, so the cache does not change during a
scrape. Before the informer's first LIST has arrived the family is exposed without samples
(upstream's cache read would block, then fail and emit nothing).

``launch_type`` (a deliberate fix of upstream 35b9757f, which looks only at the pod-name
annotation and so labels every cold Sandbox ``warm`` once its pod exists — docs/design/sandbox.md,
"Upstream quirks, reproduced or fixed"):

1. the label ``agents.x-k8s.io/launch-type`` when it is ``warm`` or ``cold`` (written by the
   SandboxClaim controller on adoption / cold create, as upstream does since #797);
2. else, a Sandbox whose controller is a SandboxWarmPool (not claimed yet) is ``warm``: upstream
   HEAD's pool labels every sandbox it creates ``launch-type=warm``, so it reports them so;
3. else upstream 35b9757f's rule: ``warm`` iff the ``agents.x-k8s.io/pod-name`` annotation is
   non-empty, otherwise ``cold``. This covers Sandboxes written before the label existed (it
   still says ``warm`` for an unlabelled cold Sandbox whose pod exists, as upstream did).

``created_by`` (upstream HEAD, #1039) is the Sandbox's ``agents.x-k8s.io/created-by`` label:
``controller`` for a pool's sandboxes, the claim's value (``python-client`` from the released
1.0.x client) for a claimed one, empty when the Sandbox has none. The label is written by
claim creators, so its value is bounded as upstream v1.0.1's ``NormalizeCreatedBy`` bounds it:
anything but ``go-client``, ``python-client`` and ``controller`` counts as ``unknown``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, NamedTuple

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agentsandbox.api import keys
from agentsandbox.api.conditions import CONDITION_READY, REASON_SANDBOX_EXPIRED, find_condition
from agentsandbox.api.kinds import EXTENSIONS_GROUP, SANDBOX_CLAIM, SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of
from agentsandbox.kube.informer import Informer

AGENT_SANDBOXES: Final = "agent_sandboxes"
AGENT_SANDBOXES_HELP: Final = "Monitor the point-in-time number of sandboxes in the cluster."
LABELS: Final = (
    "namespace",
    "ready_condition",
    "expired",
    "launch_type",
    "sandbox_template",
    "owned_by",
    "created_by",
)

LAUNCH_TYPE_WARM: Final = keys.LAUNCH_TYPE_WARM
LAUNCH_TYPE_COLD: Final = keys.LAUNCH_TYPE_COLD
#: ``sandbox_template`` of a Sandbox without the template annotation (Sandbox-scoped metrics).
UNKNOWN_TEMPLATE: Final = "unknown"
#: ``owned_by`` of a Sandbox not controlled by a SandboxClaim or SandboxWarmPool.
OWNED_BY_NONE: Final = "None"

Obj = Mapping[str, Any]


class SandboxLabels(NamedTuple):
    namespace: str
    ready_condition: str
    expired: str
    launch_type: str
    sandbox_template: str
    owned_by: str
    created_by: str


def _meta(sandbox: Obj) -> Obj:
    return sandbox.get("metadata") or {}


def owned_by(sandbox: Obj) -> str:
    """``SandboxClaim`` / ``SandboxWarmPool`` when the controller reference is one of ours by
    group and kind (any version: references written under v1alpha1 keep that apiVersion), else
    ``None``."""
    ref = controller_of(sandbox)
    if ref is None:
        return OWNED_BY_NONE
    group = str(ref.get("apiVersion", "")).rpartition("/")[0]
    kind = ref.get("kind")
    if group == EXTENSIONS_GROUP and kind in (SANDBOX_CLAIM.kind, SANDBOX_WARM_POOL.kind):
        return str(kind)
    return OWNED_BY_NONE


def launch_type(sandbox: Obj) -> str:
    """``warm`` or ``cold``: the launch-type label, else pool-owned ⇒ warm, else the pod-name
    rule (see the module docstring)."""
    meta = _meta(sandbox)
    label = (meta.get("labels") or {}).get(keys.LABEL_LAUNCH_TYPE)
    if label in (LAUNCH_TYPE_WARM, LAUNCH_TYPE_COLD):
        return str(label)
    if owned_by(sandbox) == SANDBOX_WARM_POOL.kind:
        return LAUNCH_TYPE_WARM
    if (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME):
        return LAUNCH_TYPE_WARM
    return LAUNCH_TYPE_COLD


#: The ``created_by`` metric label values besides ``""`` (no label) and :data:`CREATED_BY_OTHER`.
CREATED_BY_KNOWN: Final = frozenset({"go-client", "python-client", "controller"})
CREATED_BY_OTHER: Final = "unknown"


def created_by(obj: Obj) -> str:
    """The ``agents.x-k8s.io/created-by`` label of a Sandbox or claim as a metric label value:
    ``""`` when absent, the value when it is one of :data:`CREATED_BY_KNOWN`, else ``unknown``
    (a user-chosen value must not add a series)."""
    value = str((_meta(obj).get("labels") or {}).get(keys.LABEL_CREATED_BY) or "")
    if not value or value in CREATED_BY_KNOWN:
        return value
    return CREATED_BY_OTHER


def template_annotation(sandbox: Obj) -> str | None:
    """The ``agents.x-k8s.io/sandbox-template-ref`` annotation, None when absent or empty."""
    value = (_meta(sandbox).get("annotations") or {}).get(keys.ANNOTATION_SANDBOX_TEMPLATE_REF)
    return str(value) if value else None


def sandbox_labels(sandbox: Obj) -> SandboxLabels:
    """The ``agent_sandboxes`` label values of one Sandbox."""
    ready = find_condition((sandbox.get("status") or {}).get("conditions"), CONDITION_READY)
    return SandboxLabels(
        namespace=str(_meta(sandbox).get("namespace", "")),
        ready_condition="true" if ready is not None and ready.get("status") == "True" else "false",
        expired=(
            "true"
            if ready is not None and ready.get("reason") == REASON_SANDBOX_EXPIRED
            else "false"
        ),
        launch_type=launch_type(sandbox),
        sandbox_template=template_annotation(sandbox) or UNKNOWN_TEMPLATE,
        owned_by=owned_by(sandbox),
        created_by=created_by(sandbox),
    )


def count_sandboxes(sandboxes: Iterable[Obj]) -> dict[SandboxLabels, int]:
    """Sandboxes per distinct label tuple."""
    return dict(Counter(sandbox_labels(s) for s in sandboxes))


class SandboxCollector(Collector):
    """``agent_sandboxes``, computed per scrape from the Sandbox informer's cache (not a LIST:
    the cache is already here and current)."""

    def __init__(self, sandboxes: Informer) -> None:
        self._sandboxes = sandboxes

    def describe(self) -> Iterable[GaugeMetricFamily]:
        # Registration calls describe(), not collect(): no cache read before the manager runs.
        return [GaugeMetricFamily(AGENT_SANDBOXES, AGENT_SANDBOXES_HELP, labels=LABELS)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(AGENT_SANDBOXES, AGENT_SANDBOXES_HELP, labels=LABELS)
        if self._sandboxes.has_synced():
            for labels, count in sorted(count_sandboxes(self._sandboxes.list()).items()):
                family.add_metric(list(labels), float(count))
        yield family


__all__ = [
    "AGENT_SANDBOXES",
    "LABELS",
    "OWNED_BY_NONE",
    "UNKNOWN_TEMPLATE",
    "SandboxCollector",
    "SandboxLabels",
    "count_sandboxes",
    "created_by",
    "launch_type",
    "owned_by",
    "sandbox_labels",
    "template_annotation",
]
