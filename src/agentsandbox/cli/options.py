"""The manager's flags: upstream's names, defaults and start-up validation
(docs/design/architecture.md, "The flags").

An upstream Deployment's ``args`` must work unchanged, so the flag names, types and defaults are
upstream's, parsed with Go ``flag`` semantics (:mod:`.goflags`). Flags that have no meaning in a
Python process (pprof) are accepted and reported as not applicable.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from .goflags import FlagSet

LEADER_ELECTION_ID = "a3317529.agent-sandbox.x-k8s.io"

NOT_APPLICABLE = (
    "enable-pprof",
    "enable-pprof-debug",
    "pprof-block-profile-rate",
    "pprof-mutex-profile-fraction",
)
# Upstream HEAD flags accepted so that a HEAD Deployment's args still start this binary, but with
# no effect (a warning line each when given): we run no webhook server (v1alpha1 is served without
# a conversion webhook, docs/api.md) and keep one API connection pool (#1240;
# docs/design/architecture.md, "The flags", flags accepted with no effect).
NO_EFFECT = (
    "enable-webhook",
    "manage-webhook-certs",
    "webhook-port",
    "webhook-cert-dir",
    "webhook-cert-name",
    "webhook-key-name",
    "webhook-service-name",
    "webhook-namespace",
    "separate-watch-connection",
    "api-connections",
)


def build_flagset() -> FlagSet:
    fs = FlagSet("agent-sandbox-controller")
    fs.add_bool("version", False, "Print the version information and exit")
    fs.add_string("cluster-domain", "cluster.local", "Kubernetes cluster domain for service FQDNs")
    fs.add_string(
        "metrics-bind-address",
        ":8080",
        'The address the metric endpoint binds to; ":port" is every interface, IPv4 and IPv6. '
        '"0" or "" disables it (controller-runtime serves "" on :8080)',
    )
    fs.add_string(
        "health-probe-bind-address",
        ":8081",
        'The address the probe endpoint binds to; "0" or "" disables it',
    )
    fs.add_bool("leader-elect", True, "Enable leader election for the controller manager")
    fs.add_string(
        "leader-election-namespace",
        "",
        "Namespace of the leader election Lease (in-cluster: the pod's own namespace)",
    )
    fs.add_bool(
        "extensions", False, "Run the SandboxClaim, SandboxTemplate and WarmPool controllers"
    )
    fs.add_bool("enable-tracing", False, "Export OpenTelemetry traces (OTLP, configured by env)")
    fs.add_bool("enable-pprof", False, "Go pprof endpoint (not applicable to this implementation)")
    fs.add_bool("enable-pprof-debug", False, "Go pprof debug endpoints (not applicable)")
    fs.add_int("pprof-block-profile-rate", 1_000_000, "Go block profile rate (not applicable)")
    fs.add_int("pprof-mutex-profile-fraction", 10, "Go mutex profile fraction (not applicable)")
    fs.add_float(
        "kube-api-qps",
        -1.0,
        "Client QPS to the API server; <= 0 disables the limiter (upstream's client-go reads 0 "
        "as its default, 5 QPS)",
    )
    fs.add_int("kube-api-burst", 10, "Client burst to the API server; must be > 0")
    fs.add_int("sandbox-concurrent-workers", 100, "Concurrent Sandbox reconciles; must be > 0")
    fs.add_int("sandbox-claim-concurrent-workers", 50, "Concurrent SandboxClaim reconciles; > 0")
    fs.add_int("sandbox-warm-pool-concurrent-workers", 1, "Concurrent warm pool reconciles; > 0")
    fs.add_int("sandbox-template-concurrent-workers", 1, "Concurrent SandboxTemplate reconciles")
    fs.add_int(
        "sandbox-warm-pool-max-batch-size",
        300,
        "Most sandboxes a warm pool creates or deletes in one reconcile; must be > 0",
    )
    fs.add_duration(
        "sandbox-warm-pool-readiness-grace-period",
        300.0,
        "How long a warm pool sandbox may stay not Ready before it is replaced",
    )
    fs.add_duration(
        "sandbox-warm-pool-unschedulable-recheck-interval",
        60.0,
        "How often a warm pool re-checks sandboxes whose pods cannot be scheduled",
    )
    fs.add_duration(
        "sandbox-warm-pool-replenish-delay",
        0.0,
        "How long a warm pool waits, after it first sees a member leave (adopted by a claim or "
        "deleted), before creating its replacement; re-armed while members keep leaving. Scale-up "
        "and the initial fill are not delayed. 0 disables it",
    )
    fs.add_float(
        "sandbox-warm-pool-max-refill-rate",
        0.0,
        "Most sandbox creates per second per warm pool (a token bucket of capacity max(1, rate)); "
        "0 means unlimited",
    )
    fs.add_bool(
        "enable-warm-pool-eviction",
        True,
        'Annotate warm pool pods with cluster-autoscaler.kubernetes.io/safe-to-evict: "true" '
        "(unless the template sets that key); a claim adopting the sandbox removes it",
    )
    fs.add_bool(
        "enable-warm-pool-autoscaler",
        True,
        "Run the SandboxWarmPoolAutoscaler controller (with --extensions; ours, not upstream's): "
        "it sizes warm pools through their /scale subresource. Skipped, with a log line, when "
        "its CRD (autoscaling.agentsandbox.dev) is not installed",
    )
    fs.add_duration(
        "warm-pool-autoscaler-sync-period",
        5.0,
        "How often each SandboxWarmPoolAutoscaler is re-evaluated when nothing happens (only "
        "with --extensions and --enable-warm-pool-autoscaler)",
    )
    fs.add_duration(
        "warm-pool-autoscaler-rate-window",
        1800.0,
        "How much claim-arrival and refill-time history each SandboxWarmPoolAutoscaler measures "
        "rates over and keeps in its status (only with --extensions and "
        "--enable-warm-pool-autoscaler)",
    )
    fs.add_duration(
        "warm-pool-autoscaler-burst-bin",
        10.0,
        "The width of the bins a SandboxWarmPoolAutoscaler counts claim arrivals in (only with "
        "--extensions and --enable-warm-pool-autoscaler)",
    )
    fs.add_bool(
        "cache-label-selectors",
        False,
        "Accepted with both values: the Pod, Service and PVC caches here are always scoped to "
        "the tracking label agents.x-k8s.io/sandbox-name-hash (false does not widen them), and a "
        'pre-provisioned agents.x-k8s.io/adoptable="true" child without that label is still '
        "adopted (read from the API when its create is answered AlreadyExists)",
    )
    fs.add_duration(
        "sandbox-write-behind-window",
        0.0,
        "How long the Sandbox controller may defer repairing a pod's drifted labels and "
        "annotations, coalescing the repairs of that time into one patch; at most 1s for pods. "
        "Status, owner references, creates and deletes are never deferred. 0 defers nothing",
    )
    fs.add_string(
        "network-policy-egress-except",
        "",
        "Comma-separated CIDRs, IPv4 and IPv6, that the default NetworkPolicy of a template "
        "also excepts from its public-internet egress, on top of the built-in private, "
        "link-local, CGNAT (100.64.0.0/10), reserved (240.0.0.0/4) and NAT64 (64:ff9b::/96) "
        "ranges; e.g. a cluster's own public pod, service or node ranges",
    )
    fs.add_bool("enable-webhook", True, "Run the webhook server (no effect: no webhook here)")
    fs.add_bool("manage-webhook-certs", True, "Manage the webhook serving certificates (no effect)")
    fs.add_int("webhook-port", 9443, "Webhook server port (no effect)")
    fs.add_string(
        "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Webhook cert dir (no effect)"
    )
    fs.add_string("webhook-cert-name", "tls.crt", "Webhook certificate file name (no effect)")
    fs.add_string("webhook-key-name", "tls.key", "Webhook key file name (no effect)")
    fs.add_string(
        "webhook-service-name", "agent-sandbox-webhook-service", "Webhook Service (no effect)"
    )
    fs.add_string("webhook-namespace", "agent-sandbox-system", "Webhook namespace (no effect)")
    fs.add_bool("separate-watch-connection", False, "Dedicated watch connection (no effect)")
    fs.add_int("api-connections", 1, "HTTP/2 API connections to shard requests over (no effect)")
    fs.add_bool(
        "disable-claim-events",
        False,
        "Disable Kubernetes Event emission from the SandboxClaim controller (its Eventf calls "
        "become no-ops), reducing API server writes during large claim bursts. Default false "
        "(events enabled).",
    )
    fs.add_bool(
        "disable-claim-observability-annotations",
        False,
        "Skip persisting the SandboxClaim observability annotations (controller first-observed "
        "timestamp, trace context), removing one API write per claim. The values are still "
        "stamped on the in-memory object, so startup-latency metrics and trace propagation to "
        "the Sandbox keep working within the controller process. Costs the on-object debugging "
        "breadcrumbs and, after a controller restart, the startup-latency metric for claims "
        "first observed by the previous process. Default false (annotations persisted).",
    )
    fs.add_string("kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, in-cluster)")
    fs.add_bool("zap-devel", False, "Development logging: human-readable, debug level")
    fs.add_string("zap-encoder", "", "Log encoding: json or console")
    fs.add_string("zap-log-level", "", "Log level: debug, info, error, panic or a verbosity int")
    fs.add_string("zap-stacktrace-level", "", "Level at and above which stack traces are logged")
    fs.add_string("zap-time-encoding", "", "Time encoding: epoch, millis, nano, iso8601, rfc3339")
    return fs


@dataclass(frozen=True)
class Options:
    cluster_domain: str
    metrics_bind_address: str
    health_probe_bind_address: str
    leader_elect: bool
    leader_election_namespace: str
    extensions: bool
    enable_tracing: bool
    kube_api_qps: float
    kube_api_burst: int
    sandbox_concurrent_workers: int
    sandbox_claim_concurrent_workers: int
    sandbox_warm_pool_concurrent_workers: int
    sandbox_template_concurrent_workers: int
    sandbox_warm_pool_max_batch_size: int
    sandbox_warm_pool_readiness_grace_period: float
    sandbox_warm_pool_unschedulable_recheck_interval: float
    sandbox_warm_pool_replenish_delay: float
    sandbox_warm_pool_max_refill_rate: float
    sandbox_write_behind_window: float
    network_policy_egress_except: tuple[str, ...]
    cache_label_selectors: bool
    enable_warm_pool_eviction: bool
    enable_warm_pool_autoscaler: bool
    warm_pool_autoscaler_sync_period: float
    warm_pool_autoscaler_rate_window: float
    warm_pool_autoscaler_burst_bin: float
    disable_claim_events: bool
    disable_claim_observability_annotations: bool
    kubeconfig: str
    zap_devel: bool
    zap_encoder: str
    zap_log_level: str
    zap_time_encoding: str
    not_applicable: tuple[str, ...]
    no_effect: tuple[str, ...] = ()

    @classmethod
    def from_values(cls, values: dict[str, Any], given: set[str]) -> Options:
        def v(name: str) -> Any:
            return values[name]

        return cls(
            cluster_domain=v("cluster-domain"),
            metrics_bind_address=v("metrics-bind-address"),
            health_probe_bind_address=v("health-probe-bind-address"),
            leader_elect=v("leader-elect"),
            leader_election_namespace=v("leader-election-namespace"),
            extensions=v("extensions"),
            enable_tracing=v("enable-tracing"),
            kube_api_qps=v("kube-api-qps"),
            kube_api_burst=v("kube-api-burst"),
            sandbox_concurrent_workers=v("sandbox-concurrent-workers"),
            sandbox_claim_concurrent_workers=v("sandbox-claim-concurrent-workers"),
            sandbox_warm_pool_concurrent_workers=v("sandbox-warm-pool-concurrent-workers"),
            sandbox_template_concurrent_workers=v("sandbox-template-concurrent-workers"),
            sandbox_warm_pool_max_batch_size=v("sandbox-warm-pool-max-batch-size"),
            sandbox_warm_pool_readiness_grace_period=v("sandbox-warm-pool-readiness-grace-period"),
            sandbox_warm_pool_unschedulable_recheck_interval=v(
                "sandbox-warm-pool-unschedulable-recheck-interval"
            ),
            sandbox_warm_pool_replenish_delay=v("sandbox-warm-pool-replenish-delay"),
            sandbox_warm_pool_max_refill_rate=v("sandbox-warm-pool-max-refill-rate"),
            sandbox_write_behind_window=v("sandbox-write-behind-window"),
            network_policy_egress_except=tuple(
                c.strip() for c in str(v("network-policy-egress-except")).split(",") if c.strip()
            ),
            cache_label_selectors=v("cache-label-selectors"),
            enable_warm_pool_eviction=v("enable-warm-pool-eviction"),
            enable_warm_pool_autoscaler=v("enable-warm-pool-autoscaler"),
            warm_pool_autoscaler_sync_period=v("warm-pool-autoscaler-sync-period"),
            warm_pool_autoscaler_rate_window=v("warm-pool-autoscaler-rate-window"),
            warm_pool_autoscaler_burst_bin=v("warm-pool-autoscaler-burst-bin"),
            disable_claim_events=v("disable-claim-events"),
            disable_claim_observability_annotations=v("disable-claim-observability-annotations"),
            kubeconfig=v("kubeconfig"),
            zap_devel=v("zap-devel"),
            zap_encoder=v("zap-encoder"),
            zap_log_level=v("zap-log-level"),
            zap_time_encoding=v("zap-time-encoding"),
            not_applicable=tuple(n for n in NOT_APPLICABLE if n in given),
            no_effect=tuple(n for n in NO_EFFECT if n in given),
        )

    def errors(self) -> list[str]:
        """Start-up validation: each entry is one line; any entry means exit 1 (as upstream)."""
        out = []
        for flag, value in (
            ("sandbox-concurrent-workers", self.sandbox_concurrent_workers),
            ("sandbox-claim-concurrent-workers", self.sandbox_claim_concurrent_workers),
            ("sandbox-warm-pool-concurrent-workers", self.sandbox_warm_pool_concurrent_workers),
            ("sandbox-warm-pool-max-batch-size", self.sandbox_warm_pool_max_batch_size),
            ("kube-api-burst", self.kube_api_burst),
        ):
            if value <= 0:
                out.append(f"--{flag} must be greater than 0, got {value}")
        for flag, seconds in (
            (
                "sandbox-warm-pool-readiness-grace-period",
                self.sandbox_warm_pool_readiness_grace_period,
            ),
            (
                "sandbox-warm-pool-unschedulable-recheck-interval",
                self.sandbox_warm_pool_unschedulable_recheck_interval,
            ),
            ("warm-pool-autoscaler-sync-period", self.warm_pool_autoscaler_sync_period),
            ("warm-pool-autoscaler-rate-window", self.warm_pool_autoscaler_rate_window),
            ("warm-pool-autoscaler-burst-bin", self.warm_pool_autoscaler_burst_bin),
        ):
            if seconds <= 0:
                out.append(f"--{flag} must be a positive duration")
        for flag, number in (
            ("sandbox-warm-pool-replenish-delay", self.sandbox_warm_pool_replenish_delay),
            ("sandbox-warm-pool-max-refill-rate", self.sandbox_warm_pool_max_refill_rate),
            ("sandbox-write-behind-window", self.sandbox_write_behind_window),
        ):
            if number < 0:
                out.append(f"--{flag} must not be negative")
        out.extend(
            f"--network-policy-egress-except: {problem}"
            for problem in map(cidr_problem, self.network_policy_egress_except)
            if problem
        )
        if self.zap_encoder not in ("", "json", "console"):
            out.append(f'--zap-encoder must be "json" or "console", got "{self.zap_encoder}"')
        return out

    def warnings(self) -> list[str]:
        out = []
        total = (
            self.sandbox_concurrent_workers
            + self.sandbox_claim_concurrent_workers
            + self.sandbox_warm_pool_concurrent_workers
            + self.sandbox_template_concurrent_workers
        )
        if total > 1000:
            out.append(f"total concurrent workers is {total} (> 1000)")
        if self.kube_api_qps > 0 and total > self.kube_api_burst:
            out.append(
                f"total concurrent workers ({total}) exceed --kube-api-burst "
                f"({self.kube_api_burst}); reconciles will wait on the client rate limiter"
            )
        out.extend(f"--{n} has no effect in this implementation" for n in self.not_applicable)
        out.extend(
            f"--{n} is accepted for compatibility with upstream and has no effect here"
            for n in self.no_effect
        )
        return out


def cidr_problem(cidr: str) -> str | None:
    """Why ``cidr`` cannot be an ``except`` entry of the default policy's ``0.0.0.0/0`` or
    ``::/0`` block (the apiserver wants a network address strictly inside it), or None."""
    try:
        net = ipaddress.ip_network(cidr, strict=True)
    except ValueError as err:
        return f'"{cidr}" is not a CIDR network address: {err}'
    if net.prefixlen == 0:
        return f'"{cidr}" would except everything (an except must be inside 0.0.0.0/0 or ::/0)'
    return None


def given_flags(argv: list[str]) -> set[str]:
    names = set()
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1:
            names.add(arg.lstrip("-").partition("=")[0])
    return names
