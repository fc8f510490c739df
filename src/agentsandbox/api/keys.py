"""Every label and annotation key of the agent-sandbox API, with the values that are fixed.

Keys marked *later* were added upstream after the version we implement; they are listed so that
code reading objects written by newer upstream controllers (or writing compatible ones) uses the
exact strings.
"""

from __future__ import annotations

from typing import Final

# --- core (api/v1beta1, controllers) --------------------------------------------------------
#: Label on the Pod, Service and PVCs of a Sandbox; value = ``name_hash(sandbox name)``.
LABEL_SANDBOX_NAME_HASH: Final = "agents.x-k8s.io/sandbox-name-hash"
#: Annotation on a Sandbox: the pod it tracks (set on warm adoption and on cold create).
ANNOTATION_POD_NAME: Final = "agents.x-k8s.io/pod-name"
#: Annotation on a Sandbox: the SandboxTemplate it was made from (metrics label).
ANNOTATION_SANDBOX_TEMPLATE_REF: Final = "agents.x-k8s.io/sandbox-template-ref"
#: Annotations on a Pod: sorted, comma-joined keys copied from ``podTemplate.metadata``.
ANNOTATION_PROPAGATED_LABELS: Final = "agents.x-k8s.io/propagated-labels"
ANNOTATION_PROPAGATED_ANNOTATIONS: Final = "agents.x-k8s.io/propagated-annotations"
#: Annotation holding a JSON map of W3C trace headers (``{"traceparent": "00-…-01"}``).
ANNOTATION_TRACE_CONTEXT: Final = "opentelemetry.io/trace-context"
#: Ours (not upstream's): on a claim, the count of cold sandboxes its controller decided to make.
ANNOTATION_COLD_START: Final = "agentsandbox.dev/cold-start"
#: Annotations on a SandboxClaim: first-seen times (RFC 3339 with nanoseconds) for metrics.
ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: Final = "agents.x-k8s.io/controller-first-observed-at"
ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT: Final = "agents.x-k8s.io/webhook-first-observed-at"
#: Opt-in label: an unowned Pod/Service/PVC with this label set to "true" may be adopted by the
#: Sandbox of the same name (upstream's later fix against hijacking; we apply it from the start).
LABEL_ADOPTABLE: Final = "agents.x-k8s.io/adoptable"
ADOPTABLE_TRUE: Final = "true"

# --- extensions (SandboxWarmPool, SandboxClaim, SandboxTemplate) ------------------------------
#: Label on a warm Sandbox and its pod template; value = ``name_hash(pool name)``.
LABEL_WARM_POOL_SANDBOX: Final = "agents.x-k8s.io/warm-pool-sandbox"
#: Label; value = ``template_ref_hash(template name)``. Also the NetworkPolicy pod selector.
LABEL_SANDBOX_TEMPLATE_REF_HASH: Final = "agents.x-k8s.io/sandbox-template-ref-hash"
#: Label on a warm Sandbox and its pod template; value = ``pod_template_hash(...)``.
LABEL_SANDBOX_POD_TEMPLATE_HASH: Final = "agents.x-k8s.io/sandbox-pod-template-hash"
#: Label on a claimed Sandbox and its pod template; value = the claim's UID.
LABEL_CLAIM_UID: Final = "agents.x-k8s.io/claim-uid"
#: Label on a SandboxClaim: name of the Sandbox it adopted.
LABEL_SANDBOX_NAME: Final = "agents.x-k8s.io/sandbox-name"
#: Peer selector of the default NetworkPolicy ingress rule: pods labelled ``app=sandbox-router``.
LABEL_APP: Final = "app"
SANDBOX_ROUTER_APP: Final = "sandbox-router"

# --- later upstream keys -------------------------------------------------------------------
#: *later*: label ``warm`` | ``cold`` telling how a Sandbox was launched.
LABEL_LAUNCH_TYPE: Final = "agents.x-k8s.io/launch-type"
LAUNCH_TYPE_WARM: Final = "warm"
LAUNCH_TYPE_COLD: Final = "cold"
#: *later*: label naming the creator (``controller`` for pools, ``python-client`` for the SDK).
LABEL_CREATED_BY: Final = "agents.x-k8s.io/created-by"
#: *later*: label; hash of the whole sandbox blueprint (pod template, claims, service).
LABEL_SANDBOX_TEMPLATE_HASH: Final = "agents.x-k8s.io/sandbox-template-hash"
#: *later*: claim annotations guarding latency metrics against double counting.
ANNOTATION_CREATION_LATENCY_RECORDED: Final = "agents.x-k8s.io/creation-latency-recorded"
ANNOTATION_CLAIM_FIRST_READY_AT: Final = "agents.x-k8s.io/claim-first-ready-at"
ANNOTATION_CLIENT_FIRST_REQUESTED_AT: Final = "agents.x-k8s.io/client-first-requested-at"
#: *later*: state stashed by the v1alpha1 conversion webhook (we serve v1alpha1 unconverted).
ANNOTATION_V1ALPHA1_SANDBOX_STATE: Final = "api.agents.x-k8s.io/v1alpha1-sandbox-state"
ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: Final = "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state"
#: *later*: pod annotation set on warm pods so the cluster autoscaler may evict them.
ANNOTATION_SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
