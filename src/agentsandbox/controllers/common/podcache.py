"""The one pod informer the Sandbox and SandboxWarmPool controllers share, and what it keeps.

Pods are the largest objects we cache (a kwok pod is ~10 KB of Python dicts, a real one more),
and neither controller reads a pod's spec or its container statuses: the Sandbox controller reads
the pod's metadata (name, uid, resourceVersion, labels, annotations, owners, deletion), its phase,
conditions and IPs; the warm pool reads its Ready and PodScheduled conditions. Every pod write
is a merge patch built from the Sandbox, never a PUT of a cached pod, so a slimmed cache object
is never written back. The transform keeps exactly that and ``spec.nodeName`` (for messages).
"""

from __future__ import annotations

from typing import Any, Final

from agentsandbox.api import keys
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import PODS

#: Pods of sandboxes carry the tracking label; only those are cached.
POD_SELECTOR: Final = keys.LABEL_SANDBOX_NAME_HASH
#: Status fields a controller reads (everything else, e.g. containerStatuses, is dropped).
KEPT_STATUS: Final = ("phase", "conditions", "podIP", "podIPs", "reason", "message")


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The cached form of ``pod``: its metadata, ``spec.nodeName`` and :data:`KEPT_STATUS`.

    Changes ``pod`` in place (the informer just decoded it) and returns it.
    """
    spec = pod.get("spec")
    if isinstance(spec, dict):
        node = spec.get("nodeName")
        pod["spec"] = {"nodeName": node} if node else {}
    status = pod.get("status")
    if isinstance(status, dict):
        pod["status"] = {k: status[k] for k in KEPT_STATUS if k in status}
    return pod


def pod_informer(mgr: Manager) -> Informer:
    """The shared informer of sandbox pods (same scope and transform for every caller)."""
    return mgr.get_informer(PODS, label_selector=POD_SELECTOR, transform=slim_pod)


__all__ = ["KEPT_STATUS", "POD_SELECTOR", "pod_informer", "slim_pod"]
