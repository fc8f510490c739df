#!/usr/bin/env python3
"""Generate ``docs/compatibility.md``: every upstream flag, label/annotation key, condition reason
and metric, with ours beside it.

Our side is read from the code, never typed by hand: flags from the flag set
(``agentsandbox.cli.options.build_flagset``), keys from ``agentsandbox.api.keys``, condition
reasons from the ``REASON_*`` constants of the modules that write conditions, metrics from the
registry after importing the controllers and registering the collectors. The upstream side
(names, defaults, meanings) describes upstream at 35b9757f
(https://github.com/kubernetes-sigs/agent-sandbox/tree/35b9757f) and later upstream (``HEAD``
below; most entries name the pull request) and is kept below as data, with a note wherever we
differ on purpose (docs/design/architecture.md, "Which upstream we follow").

    python hack/gen_compat.py           # write docs/compatibility.md
    python hack/gen_compat.py --check   # exit 1 if docs/compatibility.md is stale
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "compatibility.md"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "hack"))  # conformance.report: the section "Upstream's e2e suite"

SEED = "35b9757f"
HEAD = "HEAD"
#: for flags: added after 35b9757f and in the released v1.0.1, whose defaults ours are
RELEASE = "v1.0.1"

# ------------------------------------------------------------------------------ upstream: flags
#: name -> (type, default as upstream prints it, version, meaning): upstream v1.0.1's flags (since
#: 35b9757f or added by v1.0.1; type and default are v1.0.1's, which
#: tests/integration/test_flags_upstream.py reads from the pinned module) and later upstream's
#: (HEAD, not in v1.0.1); the rules in docs/design/architecture.md, "The flags". Where we have no
#: record of upstream's default, "—" (see the note).
UPSTREAM_FLAGS: dict[str, tuple[str, str, str, str]] = {
    "version": ("bool", "false", SEED, "print the version block and exit"),
    "cluster-domain": ("string", "cluster.local", SEED, "suffix of status.serviceFQDN"),
    "metrics-bind-address": ("string", ":8080", SEED, "/metrics address; 0 disables"),
    "health-probe-bind-address": ("string", ":8081", SEED, "/healthz and /readyz address"),
    "leader-elect": ("bool", "true", SEED, "Lease leader election"),
    "leader-election-namespace": ("string", "", SEED, "namespace of the Lease"),
    "extensions": ("bool", "false", SEED, "run the claim, template and warm pool controllers"),
    "enable-tracing": ("bool", "false", SEED, "OTLP/gRPC tracing"),
    "enable-pprof": ("bool", "false", SEED, "Go pprof profile endpoint"),
    "enable-pprof-debug": ("bool", "false", SEED, "all Go pprof endpoints"),
    "pprof-block-profile-rate": ("int", "1000000", SEED, "Go block profile rate"),
    "pprof-mutex-profile-fraction": ("int", "10", SEED, "Go mutex profile fraction"),
    "kube-api-qps": ("float", "-1", SEED, "client QPS; <= 0 no limiter"),
    "kube-api-burst": ("int", "10", SEED, "client burst; > 0"),
    "sandbox-concurrent-workers": ("int", "100", SEED, "Sandbox workers (35b9757f: 1; #1220)"),
    "sandbox-claim-concurrent-workers": ("int", "50", SEED, "claim workers (35b9757f: 1; #996)"),
    "sandbox-warm-pool-concurrent-workers": ("int", "1", SEED, "warm pool workers"),
    "sandbox-template-concurrent-workers": ("int", "1", SEED, "template workers"),
    "sandbox-warm-pool-max-batch-size": ("int", "300", SEED, "creates/deletes per pass"),
    "zap-devel": ("bool", "false", SEED, "development logging"),
    "zap-encoder": ("string", "", SEED, "json or console"),
    "zap-log-level": ("string", "", SEED, "log level"),
    "zap-stacktrace-level": ("string", "", SEED, "stack trace level"),
    "zap-time-encoding": ("string", "", SEED, "time encoding"),
    "kubeconfig": ("string", "", SEED, "kubeconfig path"),
    "enable-webhook": ("bool", "true", HEAD, "run the (conversion) webhook server"),
    "manage-webhook-certs": ("bool", "true", HEAD, "create/rotate the webhook certificates"),
    "webhook-port": ("int", "9443", HEAD, "webhook server port"),
    "webhook-cert-dir": (
        "string",
        "/tmp/k8s-webhook-server/serving-certs",
        HEAD,
        "webhook certificate directory",
    ),
    "webhook-cert-name": ("string", "—", HEAD, "webhook certificate file name (#1255)"),
    "webhook-key-name": ("string", "—", HEAD, "webhook key file name (#1255)"),
    "webhook-service-name": (
        "string",
        "agent-sandbox-webhook-service",
        HEAD,
        "webhook Service",
    ),
    "webhook-namespace": ("string", "agent-sandbox-system", HEAD, "webhook namespace"),
    "cache-label-selectors": ("bool", "false", RELEASE, "label-scoped Pod/Service caches (#1253)"),
    "separate-watch-connection": ("bool", "false", RELEASE, "dedicated watch connection (#1240)"),
    "api-connections": ("int", "1", RELEASE, "HTTP/2 API connection sharding (#1240)"),
    "disable-claim-events": ("bool", "false", RELEASE, "no claim Events (#1250)"),
    "disable-claim-observability-annotations": (
        "bool",
        "false",
        RELEASE,
        "no claim observability annotation write (#1250)",
    ),
    "sandbox-write-behind-window": ("duration", "0s", RELEASE, "defer pod metadata writes"),
    "sandbox-warm-pool-replenish-delay": ("duration", "0s", RELEASE, "delay replacements (#1251)"),
    "sandbox-warm-pool-max-refill-rate": ("float", "0", RELEASE, "creates/s per pool (#1251)"),
    "sandbox-warm-pool-readiness-grace-period": ("duration", "5m", RELEASE, "stuck grace (#1290)"),
    "sandbox-warm-pool-unschedulable-recheck-interval": (
        "duration",
        "1m",
        RELEASE,
        "held sandbox re-check (#1290)",
    ),
    "enable-warm-pool-eviction": ("bool", "true", RELEASE, "safe-to-evict on pool pods (#713)"),
}

#: flags with upstream's name, type and default whose effect here differs (see the note)
FLAG_EFFECT_DIFFERS: frozenset[str] = frozenset({"cache-label-selectors"})

FLAG_NOTES: dict[str, str] = {
    "enable-pprof": "Go runtime profiling has no Python equivalent",
    "enable-pprof-debug": "Go runtime profiling has no Python equivalent",
    "pprof-block-profile-rate": "Go runtime profiling has no Python equivalent",
    "pprof-mutex-profile-fraction": "Go runtime profiling has no Python equivalent",
    "enable-tracing": "OTLP over HTTP, not gRPC; SandboxClaim spans only (docs/tracing.md)",
    "sandbox-concurrent-workers": "v1.0.1's default; exactly N in flight (see Decisions)",
    "sandbox-claim-concurrent-workers": "v1.0.1's default; exactly N in flight (see Decisions)",
    "enable-webhook": "no webhook server here: v1alpha1 is served without conversion",
    "manage-webhook-certs": "no webhook server here",
    "webhook-port": "no webhook server here",
    "webhook-cert-dir": "no webhook server here",
    "webhook-cert-name": "no webhook server here; ours is controller-runtime's default",
    "webhook-key-name": "no webhook server here; ours is controller-runtime's default",
    "webhook-service-name": "no webhook server here",
    "webhook-namespace": "no webhook server here",
    "separate-watch-connection": "one connection pool for requests, one for watches",
    "api-connections": "one connection pool for requests, one for watches",
    "cache-label-selectors": "both values: our caches are always label-scoped (see Decisions)",
    "sandbox-write-behind-window": "pod label/annotation repairs only, <= 1 s (see Decisions)",
    "enable-warm-pool-eviction": "v1.0.1's default: 35b9757f has no such flag",
    "enable-warm-pool-autoscaler": "ours: SandboxWarmPoolAutoscaler (docs/autoscaler-object.md)",
    "warm-pool-autoscaler-sync-period": "ours: autoscaler setting (docs/autoscaler-object.md)",
    "warm-pool-autoscaler-rate-window": "ours: autoscaler setting (docs/autoscaler-object.md)",
    "warm-pool-autoscaler-burst-bin": "ours: autoscaler setting (docs/autoscaler-object.md)",
    "network-policy-egress-except": (
        "ours: extra except-CIDRs of the default NetworkPolicy (docs/design/template.md)"
    ),
}

# ---------------------------------------------------------------------------- upstream: keys
#: key -> (label | annotation, version, meaning); docs/design/architecture.md, "Labels and
#: annotations".
UPSTREAM_KEYS: dict[str, tuple[str, str, str]] = {
    "agents.x-k8s.io/warm-pool-sandbox": ("label", SEED, "pool sandbox; NameHash(pool name)"),
    "agents.x-k8s.io/sandbox-template-ref-hash": ("label", SEED, "NameHash(template name)"),
    "agents.x-k8s.io/sandbox-pod-template-hash": ("label", SEED, "hash of the pod template"),
    "agents.x-k8s.io/claim-uid": ("label", SEED, "the claim that owns the sandbox"),
    "agents.x-k8s.io/sandbox-name": ("label", SEED, "on a claim: its adopted sandbox"),
    "agents.x-k8s.io/sandbox-name-hash": ("label", SEED, "Pod/Service/PVC tracking label"),
    "app": ("label", SEED, "app=sandbox-router: NetworkPolicy ingress peer"),
    "agents.x-k8s.io/sandbox-template-ref": ("annotation", SEED, "template name (metrics)"),
    "agents.x-k8s.io/pod-name": ("annotation", SEED, "the sandbox's pod"),
    "opentelemetry.io/trace-context": ("annotation", SEED, "W3C trace headers (JSON)"),
    "agents.x-k8s.io/controller-first-observed-at": ("annotation", SEED, "claim first seen"),
    "agents.x-k8s.io/webhook-first-observed-at": ("annotation", SEED, "set by a webhook"),
    "agents.x-k8s.io/propagated-labels": ("annotation", SEED, "pod labels copied"),
    "agents.x-k8s.io/propagated-annotations": ("annotation", SEED, "pod annotations copied"),
    "agents.x-k8s.io/adoptable": ("label", HEAD, "opt-in orphan child adoption (#784)"),
    "agents.x-k8s.io/launch-type": ("label", HEAD, "warm | cold (#797)"),
    "agents.x-k8s.io/created-by": ("label", HEAD, "creator (#1039)"),
    "agents.x-k8s.io/sandbox-template-hash": ("label", HEAD, "blueprint hash (#1102)"),
    "agents.x-k8s.io/creation-latency-recorded": ("annotation", HEAD, "metric guard (#1114)"),
    "agents.x-k8s.io/claim-first-ready-at": ("annotation", HEAD, "metric guard (#1087)"),
    "agents.x-k8s.io/client-first-requested-at": ("annotation", HEAD, "client latency (#565)"),
    "api.agents.x-k8s.io/v1alpha1-sandbox-state": ("annotation", HEAD, "conversion state"),
    "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state": ("annotation", HEAD, "conversion state"),
    "cluster-autoscaler.kubernetes.io/safe-to-evict": ("annotation", HEAD, "pool pods (#713)"),
}
KEY_NOTES: dict[str, str] = {
    "agents.x-k8s.io/webhook-first-observed-at": "read only (written by an external webhook)",
    "api.agents.x-k8s.io/v1alpha1-sandbox-state": "read only: no conversion webhook here",
    "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state": "read only: no conversion webhook here",
    "agents.x-k8s.io/adoptable": "applied from the start (upstream's later fix)",
    "agentsandbox.dev/cold-start": "annotation on a claim: marked before its cold create",
}

# -------------------------------------------------------------------------- upstream: reasons
#: (object, condition reason) -> (version, meaning); docs/design/sandbox.md, "The Ready
#: condition", and docs/design/claim.md, "The claim's status".
UPSTREAM_REASONS: dict[tuple[str, str], tuple[str, str]] = {
    ("Sandbox", "DependenciesReady"): (SEED, "Ready: pod Ready (+ Service)"),
    ("Sandbox", "DependenciesNotReady"): (SEED, "Ready False otherwise"),
    ("Sandbox", "SandboxSuspended"): (SEED, "Ready False when suspended"),
    ("Sandbox", "ReconcilerError"): (SEED, "Ready False on a child error"),
    ("Sandbox", "SandboxExpired"): (SEED, "Ready False after shutdownTime"),
    ("Sandbox", "PodTerminated"): (SEED, "Suspended True: the pod is gone"),
    ("Sandbox", "PodNotTerminated"): (SEED, "Suspended False (deprecated by #1150)"),
    ("Sandbox", "PodSucceeded"): (SEED, "Finished True"),
    ("Sandbox", "PodFailed"): (SEED, "Finished True"),
    ("Sandbox", "PodScheduled"): (HEAD, "PodScheduled mirror (#1291)"),
    ("Sandbox", "PodSchedulingUnknown"): (HEAD, "PodScheduled mirror (#1291)"),
    ("Sandbox", "PodTerminating"): (HEAD, "Suspended False: our pod still terminating (#1150)"),
    ("Sandbox", "PodNotOwned"): (HEAD, "Suspended False: a pod not ours holds the name (#1150)"),
    ("Sandbox", "NotSuspended"): (HEAD, "Suspended False: running (#1150)"),
    ("Sandbox", "PodStateUnknown"): (HEAD, "Suspended Unknown: the pod could not be read (#1150)"),
    ("Sandbox", "MultiplePods"): (HEAD, "Ready False (#1337)"),
    ("SandboxClaim", "TemplateNotFound"): (SEED, "template missing"),
    ("SandboxClaim", "InvalidMetadata"): (SEED, "claim metadata rejected"),
    ("SandboxClaim", "ClaimExpired"): (SEED, "claim expired"),
    ("SandboxClaim", "ReconcilerError"): (SEED, "any other error"),
    ("SandboxClaim", "SandboxMissing"): (SEED, "no sandbox"),
    ("SandboxClaim", "SandboxExpired"): (SEED, "sandbox expired on its own"),
    ("SandboxClaim", "SandboxNotReady"): (SEED, "sandbox without a Ready condition"),
    ("SandboxClaim", "WarmPoolNotFound"): (HEAD, "warmPoolRef missing (#899)"),
    ("SandboxClaim", "VolumeClaimTemplatesError"): (HEAD, "claim VCTs rejected (#960)"),
    ("SandboxClaim", "EnvVarsInjectionRejected"): (HEAD, "env injection refused (#991)"),
    ("SandboxClaim", "SandboxCreatePending"): (HEAD, "AlreadyExists on cold create (#1072)"),
    ("SandboxClaim", "AdoptionConflict"): (HEAD, "terminal adoption contention (#1304)"),
}
#: Where our condition reasons live: module -> object whose conditions they are.
REASON_MODULES: dict[str, str] = {
    "agentsandbox.api.conditions": "Sandbox",
    "agentsandbox.controllers.sandbox.plan": "Sandbox",
    "agentsandbox.controllers.claim.plan": "SandboxClaim",
    "agentsandbox.controllers.warmpool.plan": "SandboxWarmPool",
    "agentsandbox.controllers.template.plan": "SandboxTemplate",
    "agentsandbox.controllers.autoscaler.plan": "SandboxWarmPoolAutoscaler",
    "agentsandbox.controllers.autoscaler.breaker": "SandboxWarmPoolAutoscaler",
    "agentsandbox.controllers.autoscaler.rules": "SandboxWarmPoolAutoscaler",
}
#: api.conditions holds one claim reason among the Sandbox ones.
REASON_OVERRIDES: dict[tuple[str, str], str] = {
    ("agentsandbox.api.conditions", "REASON_CLAIM_EXPIRED"): "SandboxClaim",
}
REASON_NOTES: dict[tuple[str, str], str] = {
    ("Sandbox", "PodNotTerminated"): "not written, as upstream v1.0.1 (PodTerminating replaced it)",
    ("SandboxWarmPool", "*"): "ours: upstream tried pool conditions and dropped them (#1328)",
    ("SandboxWarmPoolAutoscaler", "*"): "ours: an API of our own (docs/autoscaler-object.md)",
}

# -------------------------------------------------------------------------- upstream: metrics
#: name -> (type, labels, version); docs/metrics.md.
UPSTREAM_METRICS: dict[str, tuple[str, str, str]] = {
    "agent_sandbox_claim_startup_latency_ms": ("histogram", "launch_type,sandbox_template", SEED),
    "agent_sandbox_claim_controller_startup_latency_ms": (
        "histogram",
        "launch_type,sandbox_template",
        SEED,
    ),
    "agent_sandbox_creation_latency_ms": (
        "histogram",
        "namespace,launch_type,sandbox_template",
        SEED,
    ),
    "agent_sandbox_claim_creation_total": (
        "counter",
        "namespace,sandbox_template,launch_type,warmpool_name,pod_condition",
        SEED,
    ),
    "agent_sandboxes": (
        "gauge",
        "namespace,ready_condition,expired,launch_type,sandbox_template,owned_by",
        SEED,
    ),
    "agent_sandbox_build_info": (
        "gauge",
        "git_version,git_commit,build_date,go_version,compiler,platform",
        SEED,
    ),
    "agent_sandbox_client_claim_startup_latency_ms": ("histogram", "—", HEAD),
    "controller_runtime_reconcile_total": ("counter", "controller,result", SEED),
    "controller_runtime_reconcile_errors_total": ("counter", "controller", SEED),
    "controller_runtime_reconcile_time_seconds": ("histogram", "controller", SEED),
    "controller_runtime_max_concurrent_reconciles": ("gauge", "controller", SEED),
    "controller_runtime_active_workers": ("gauge", "controller", SEED),
    "workqueue_depth": ("gauge", "name", SEED),
    "workqueue_adds_total": ("counter", "name", SEED),
    "workqueue_queue_duration_seconds": ("histogram", "name", SEED),
    "workqueue_work_duration_seconds": ("histogram", "name", SEED),
    "workqueue_retries_total": ("counter", "name", SEED),
    "workqueue_unfinished_work_seconds": ("gauge", "name", SEED),
    "workqueue_longest_running_processor_seconds": ("gauge", "name", SEED),
    "rest_client_requests_total": ("counter", "code,method,host", SEED),
    "rest_client_request_duration_seconds": ("histogram", "verb,host", SEED),
    "leader_election_master_status": ("gauge", "name", SEED),
    "process_*": ("—", "—", SEED),
    "go_*": ("—", "—", SEED),
}
METRIC_NOTES: dict[str, str] = {
    "agent_sandbox_build_info": "go_version carries the Python version, compiler the runtime",
    "process_*": "prometheus-client's process collector",
    "go_*": "python_* (prometheus-client's platform and GC collectors) instead",
    "agent_sandbox_client_claim_startup_latency_ms": "upstream labels not recorded",
    "agent_sandbox_claim_creation_total": "35b9757f's labels plus HEAD's created_by (#1039)",
    "agent_sandboxes": "35b9757f's labels plus HEAD's created_by (#1039)",
    **{
        f"workqueue_{n}": "also labelled by controller, as controller-runtime's workqueue metrics"
        for n in (
            "adds_total",
            "depth",
            "longest_running_processor_seconds",
            "queue_duration_seconds",
            "retries_total",
            "unfinished_work_seconds",
            "work_duration_seconds",
        )
    },
}
#: metrics whose series depend on the machine (process collector on Linux only, Python build)
MACHINE_PREFIXES = ("process_", "python_")

DECISIONS = """\
## Decisions

- **Defaults.** Every flag of upstream v1.0.1 has v1.0.1's type and default:
  `--sandbox-concurrent-workers` **100** and `--sandbox-claim-concurrent-workers` **50** (35b9757f
  had 1 and 1), `--enable-warm-pool-eviction` is **true**, `--sandbox-warm-pool-replenish-delay` 0
  and `--sandbox-warm-pool-max-refill-rate` 0 (both off), the grace period 5m, the unschedulable
  re-check 1m, `--cache-label-selectors` false and `--sandbox-write-behind-window` 0.
  `tests/integration/test_flags_upstream.py` reads the definitions out of v1.0.1's
  `cmd/agent-sandbox-controller/main.go` and compares name, type and default with ours.
- **Workers.** N workers are N reconciles of that controller in flight at once, never more
  (`tests/unit/cli/test_workers_in_flight.py`, for the defaults and for other values). Ours are
  asyncio tasks on one event loop, so more workers buy more API calls in flight, not more CPU.
  Upstream's parallelism e2e tests (`test/e2e/parallelism_test.go`) set the worker flags by
  editing the `agent-sandbox-controller` Deployment in `agent-sandbox-system` and waiting for
  its rollout; a controller run outside the cluster never reads those arguments, so against one
  a pass of those tests shows nothing about its workers.
- **`--cache-label-selectors`** takes both values (Go's bool syntax) and changes nothing here:
  our Pod, Service and PVC caches are always scoped to the tracking label
  `agents.x-k8s.io/sandbox-name-hash`, so `false` does not widen them as it does upstream.
  Upstream warns that with the flag on, a pre-provisioned child meant for adoption
  (`agents.x-k8s.io/adoptable: "true"`) must also carry the tracking label (the owning Sandbox's
  name hash), or its controller no longer sees it. Ours adopts such a child without the tracking
  label under both values: the create of a child our caches do not show is answered
  `AlreadyExists`, and the Sandbox controller then reads it from the API and adopts it
  (`tests/integration/test_flags_v1_0_1.py`).
- **`--sandbox-write-behind-window`** (a duration, default 0: nothing waits). With a window, the
  Sandbox controller's repair of an owned pod's drifted labels and annotations, and only that,
  waits up to the window, at most 1 s for pods as upstream, counted from the first pass that put
  it off; the drifts of that time reach the pod as one patch, the one a pass without a window
  would write at that moment. The status, owner references (adoptions), the removal of the
  Sandbox's stale `agents.x-k8s.io/pod-name` annotation, creates and deletes are never put
  off, and a pass that fails retries by the time the repair is due. Upstream defers the same
  patch by requeueing the Sandbox; a negative window ends start-up with exit code 1, as
  upstream.
- **Accepted with no effect.** The webhook flags (`--enable-webhook`, `--manage-webhook-certs`,
  `--webhook-port`, `--webhook-cert-dir`, `--webhook-cert-name`, `--webhook-key-name`,
  `--webhook-service-name`, `--webhook-namespace`; upstream HEAD, not in v1.0.1) and v1.0.1's
  connection-tuning flags (`--separate-watch-connection`, `--api-connections`) parse with
  upstream's names so that such a Deployment's `args` start this binary; each one given logs one
  warning line at start-up. We have no record of upstream's default for the certificate/key
  file names (we show controller-runtime's `tls.crt`/`tls.key`).
- **Replenish delay** (`--sandbox-warm-pool-replenish-delay`): a member *left* the pool when the
  previous pass kept it and this pass no longer sees it as an active member, unless the pool
  deleted it itself (stale, stuck, excess): a claim adopted it, or someone deleted it. Counted by
  UID, so a departure and a new member in the same interval do not cancel out. See
  docs/warmpool.md.
- **Eviction annotation on adoption**: removed when it is `"true"` and the template does not set
  the key; without the template (deleted) it is removed when `"true"`, as upstream.
- **Sandbox status, as upstream v1.0.1.** Every pass of a live Sandbox writes a `Suspended`
  condition (`False`/`NotSuspended` while it runs; `PodTerminating`, `PodNotOwned` or
  `PodStateUnknown` while the pod it was told to drop still holds the name or cannot be read;
  `True`/`PodTerminated` once it is gone) and, while a pod of its own exists, a `PodScheduled`
  condition copied from that pod, plus `status.nodeName`. A Sandbox whose status an older
  version wrote gets them on its next pass (one status write). Two differences: the node name is
  written as soon as it changes (upstream holds a change of the node name alone until Ready; the
  scheduler's binding changes `PodScheduled` at the same moment, so this costs no extra write),
  and a failed pod metadata patch still reports the pod it was meant for (upstream reports the
  pod's scheduling as unknown). See docs/design/sandbox.md.
"""


# ---------------------------------------------------------------------------------- ours
def our_flags() -> tuple[dict[str, Any], set[str]]:
    from agentsandbox.cli.goflags import format_duration
    from agentsandbox.cli.options import NO_EFFECT, NOT_APPLICABLE, build_flagset

    out = {}
    for name, flag in build_flagset().flags.items():
        default = flag.default
        if flag.kind == "duration":
            shown = format_duration(float(default))
        elif flag.kind == "bool":
            shown = "true" if default else "false"
        elif flag.kind == "float":
            shown = f"{default:g}"
        else:
            shown = str(default)
        out[name] = (flag.kind, shown)
    return out, set(NO_EFFECT) | set(NOT_APPLICABLE)


def our_keys() -> dict[str, str]:
    from agentsandbox.api import keys

    return {
        value: name
        for name, value in vars(keys).items()
        if name.startswith(("LABEL_", "ANNOTATION_")) and isinstance(value, str)
    }


def our_reasons() -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for module_name, obj in REASON_MODULES.items():
        module = importlib.import_module(module_name)
        short = module_name.removeprefix("agentsandbox.")
        short = short.removeprefix("controllers.").removeprefix("api.").removeprefix("kube.")
        for name, value in vars(module).items():
            if name.startswith("REASON_") and isinstance(value, str):
                target = REASON_OVERRIDES.get((module_name, name), obj)
                out.setdefault((target, value), f"{short}.{name}")
    return out


class _NoSandboxes:
    """The Sandbox informer the ``agent_sandboxes`` collector needs, empty (never synced)."""

    def has_synced(self) -> bool:
        return False

    def list(self) -> list[Any]:
        return []


class _Manager:
    def get_informer(self, *_: Any, **__: Any) -> _NoSandboxes:
        return _NoSandboxes()


def our_metrics() -> dict[str, tuple[str, str]]:
    from agentsandbox.cli import controller
    from agentsandbox.cli.options import Options, build_flagset
    from agentsandbox.kube import metrics

    for module in (
        "agentsandbox.kube.events",
        "agentsandbox.controllers.sandbox.controller",
        "agentsandbox.controllers.claim.controller",
        "agentsandbox.controllers.warmpool.controller",
        "agentsandbox.controllers.template.controller",
        "agentsandbox.controllers.autoscaler.controller",
    ):
        importlib.import_module(module)
    values, _ = build_flagset().parse(["--extensions"])
    controller.register_metrics(_Manager(), Options.from_values(values, set()))  # type: ignore[arg-type]
    out: dict[str, tuple[str, str]] = {}
    names_to_collectors = metrics.REGISTRY._names_to_collectors
    for family in metrics.REGISTRY.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        if name.startswith(MACHINE_PREFIXES):
            continue
        labels: Iterable[str] = getattr(family, "_labelnames", ()) or ()
        if not labels:
            collector = names_to_collectors.get(family.name) or names_to_collectors.get(name)
            labels = getattr(collector, "_labelnames", ()) or ()
        if not labels and family.samples:
            labels = list(family.samples[0].labels)
        out[name] = (family.type, ",".join(labels) or "—")
    return out


# ---------------------------------------------------------------------------------- render
def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _code(text: str) -> str:
    return f"`{text}`" if text and text != "—" else "—"


def render() -> str:
    lines = [
        "# Compatibility with upstream agent-sandbox",
        "",
        "<!-- generated by hack/gen_compat.py from the code; do not edit by hand: run "
        "`python hack/gen_compat.py` (tests/unit/project/test_compat_doc.py fails when it "
        "drifts) -->",
        "",
        "Every upstream flag, label and annotation key, condition reason and metric (upstream "
        "35b9757f and later HEAD changes), with ours beside it. *same* means "
        "same name, type and default; anything else says why. The flags' upstream type and "
        "default are v1.0.1's.",
        "",
        DECISIONS,
    ]
    flags, no_effect = our_flags()
    lines += [
        "## Flags",
        "",
        _row("upstream flag", "since", "upstream type/default", "ours", "verdict", "note"),
        _row(*["---"] * 6),
    ]
    for name in sorted(set(UPSTREAM_FLAGS) | set(flags)):
        up = UPSTREAM_FLAGS.get(name)
        mine = flags.get(name)
        up_text = f"{up[0]} `{up[1]}`" if up else "—"
        ours = f"{mine[0]} `{mine[1]}`" if mine else "not accepted (exit 2)"
        if mine is None:
            verdict = "missing"
        elif up is None:
            verdict = "ours only"
        elif name in no_effect:
            verdict = "accepted, no effect"
        elif name in FLAG_EFFECT_DIFFERS:
            verdict = "same default, effect differs"
        elif (mine[0], mine[1]) == (up[0], up[1]):
            verdict = "same"
        else:
            verdict = "different default"
        note = FLAG_NOTES.get(name, up[3] if up else "")
        lines.append(_row(f"`--{name}`", up[2] if up else "—", up_text, ours, verdict, note))

    keys = our_keys()
    lines += [
        "",
        "## Labels and annotations",
        "",
        _row("key", "kind", "since", "upstream meaning", "ours (agentsandbox.api.keys)", "note"),
        _row(*["---"] * 6),
    ]
    for key in sorted(set(UPSTREAM_KEYS) | set(keys)):
        up_key = UPSTREAM_KEYS.get(key)
        const = keys.get(key)
        lines.append(
            _row(
                f"`{key}`",
                up_key[0] if up_key else "—",
                up_key[1] if up_key else "ours only",
                up_key[2] if up_key else "—",
                f"`{const}`" if const else "not defined",
                KEY_NOTES.get(key, "same" if up_key and const else ""),
            )
        )

    reasons = our_reasons()
    lines += [
        "",
        "## Condition reasons",
        "",
        _row("object", "reason", "since", "upstream meaning", "ours", "note"),
        _row(*["---"] * 6),
    ]
    for obj, reason in sorted(set(UPSTREAM_REASONS) | set(reasons)):
        up_reason = UPSTREAM_REASONS.get((obj, reason))
        where = reasons.get((obj, reason))
        note = REASON_NOTES.get((obj, reason)) or REASON_NOTES.get((obj, "*"), "")
        if up_reason and not where:
            note = note or "not written by this implementation"
        elif up_reason and where:
            note = note or "same"
        lines.append(
            _row(
                obj,
                f"`{reason}`",
                up_reason[0] if up_reason else "ours only",
                up_reason[1] if up_reason else "—",
                f"`{where}`" if where else "—",
                note,
            )
        )

    found = our_metrics()
    lines += [
        "",
        "## Metrics",
        "",
        "Ours are read from the registry (`agentsandbox.kube.metrics.REGISTRY`) after importing "
        "the controllers and registering the collectors; `process_*`/`python_*` depend on the "
        "machine and are summarised.",
        "",
        _row("metric", "since", "upstream type", "upstream labels", "ours", "note"),
        _row(*["---"] * 6),
    ]
    for name in sorted(set(UPSTREAM_METRICS) | set(found)):
        up_metric = UPSTREAM_METRICS.get(name)
        mine_metric = found.get(name)
        if name in ("process_*", "go_*"):
            ours = "see note"
            note = METRIC_NOTES[name]
        elif mine_metric is None:
            ours, note = "—", METRIC_NOTES.get(name, "not exported")
        else:
            ours = f"{mine_metric[0]} ({_code(mine_metric[1])})"
            same = up_metric is not None and (up_metric[0], up_metric[1]) == mine_metric
            note = METRIC_NOTES.get(
                name, "same" if same else ("ours only" if not up_metric else "")
            )
        lines.append(
            _row(
                f"`{name}`",
                up_metric[2] if up_metric else "—",
                up_metric[0] if up_metric else "—",
                _code(up_metric[1]) if up_metric else "—",
                ours,
                note,
            )
        )
    conformance = importlib.import_module("conformance.report")
    lines += ["", conformance.section(conformance.load()).rstrip("\n")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the doc is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        old = DOC.read_text() if DOC.exists() else ""
        if old != text:
            sys.stdout.writelines(
                difflib.unified_diff(
                    old.splitlines(True), text.splitlines(True), str(DOC), "generated"
                )
            )
            print(
                f"{DOC.relative_to(ROOT)} is stale: run python hack/gen_compat.py", file=sys.stderr
            )
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
