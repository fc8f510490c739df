"""``agent-sandbox-controller``: the manager process (upstream ``cmd/agent-sandbox-controller``).

Runs in its own process (the console script calls :func:`main` directly). Every problem found
before the controllers start — a bad flag, an unreadable kubeconfig, CRDs not installed, a flag
value upstream rejects — ends the process within seconds with one clear line and a non-zero exit
code, never a traceback or a crash loop that hides the cause.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agentsandbox import __version__
from agentsandbox.api.kinds import CORE_GROUP, EXTENSIONS_GROUP, V1BETA1
from agentsandbox.kube import metrics, tracing
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import ConfigError
from agentsandbox.kube.errors import KubeError, NotFound
from agentsandbox.kube.manager import LeaderElectionLost, Manager

from . import logsetup
from .goflags import FlagError, HelpRequested
from .options import LEADER_ELECTION_ID, Options, build_flagset, given_flags

log = logging.getLogger("agentsandbox.setup")

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
GIT_SHA = os.environ.get("AGENTSANDBOX_GIT_SHA", "unknown")
BUILD_DATE = os.environ.get("AGENTSANDBOX_BUILD_DATE", "unknown")
#: ``service.name`` of the spans unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says
#: otherwise; also the tracer's name, as upstream.
TRACING_SERVICE_NAME = "agent-sandbox-controller"


class StartupError(Exception):
    """A reason not to start; ``str()`` is the one line printed before exiting 1."""


def build_info() -> dict[str, str]:
    """The ``agent_sandbox_build_info`` const labels, as ``--version`` prints them.

    Upstream's label names are kept: ``go_version`` carries the Python version (``3.11.7``),
    ``compiler`` the implementation (``CPython``), ``platform`` ``<sys.platform>/<machine>``.
    Unset build values are ``unknown``, as upstream's ldflags defaults.
    """
    return {
        "git_version": __version__,
        "git_commit": GIT_SHA,
        "build_date": BUILD_DATE,
        "go_version": platform.python_version(),
        "compiler": platform.python_implementation(),
        "platform": f"{sys.platform}/{platform.machine()}",
    }


def version_text() -> str:
    info = build_info()
    return "\n".join(
        [
            f"agent-sandbox-controller, version {info['git_version']} "
            f"(revision: {info['git_commit']})",
            f"  build date:       {info['build_date']}",
            f"  python version:   {info['go_version']}",
            f"  compiler:         {info['compiler']}",
            f"  platform:         {info['platform']}",
        ]
    )


class BuildInfoCollector(Collector):
    """``agent_sandbox_build_info`` = 1 with the build as const labels (upstream's GaugeFunc)."""

    def __init__(self, info: dict[str, str]) -> None:
        self._info = dict(info)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "agent_sandbox_build_info",
            "Agent sandbox controller build metadata exposed as labels with a constant value of 1.",
            labels=list(self._info),
        )
        family.add_metric(list(self._info.values()), 1.0)
        yield family


def register_metrics(mgr: Manager, opts: Options) -> None:
    """The core families upstream registers with or without ``--extensions``
    (``agent_sandbox_build_info``, the ``agent_sandboxes`` collector over the Sandbox informer
    cache) and, with ``--extensions``, the SandboxClaim families (registered on import)."""
    from agentsandbox.api.resources import SANDBOXES
    from agentsandbox.controllers.sandbox.metrics import SandboxCollector

    metrics.register_replacing("agent_sandbox_build_info", BuildInfoCollector(build_info()))
    metrics.register_replacing("agent_sandboxes", SandboxCollector(mgr.get_informer(SANDBOXES)))
    if opts.extensions:
        import agentsandbox.controllers.claim.metrics  # noqa: F401


def leader_election_namespace(opts: Options) -> str:
    if opts.leader_election_namespace:
        return opts.leader_election_namespace
    try:
        return SA_NAMESPACE_FILE.read_text().strip()
    except OSError:
        raise StartupError(
            "leader election is on but no namespace is known: pass "
            "--leader-election-namespace=<ns> (or --leader-elect=false) when running "
            "outside a cluster"
        ) from None


async def check_crds(client: Client, extensions: bool) -> None:
    """Fail fast with a clear message when our API groups are not served."""
    groups = [CORE_GROUP] + ([EXTENSIONS_GROUP] if extensions else [])
    for group in groups:
        try:
            await client.raw("GET", f"/apis/{group}/{V1BETA1}")
        except NotFound:
            raise StartupError(
                f"the API group {group}/{V1BETA1} is not served: install the CRDs first "
                "(kubectl apply -f deploy/crds/)"
            ) from None


async def autoscaler_served(client: Client) -> bool:
    """Whether the SandboxWarmPoolAutoscaler API is served (its CRD is ours only and newer than
    the others: an install without it runs every other controller, and says so once)."""
    from agentsandbox.api.kinds import SANDBOX_WARM_POOL_AUTOSCALER as KIND

    try:
        await client.raw("GET", f"/apis/{KIND.group}/{KIND.version}")
    except NotFound:
        log.warning(
            "the SandboxWarmPoolAutoscaler controller is not started: the API group %s/%s is "
            "not served (install deploy/crds/ to use it)",
            KIND.group,
            KIND.version,
        )
        return False
    return True


async def run(opts: Options) -> None:
    client = await Client.from_kubeconfig(
        opts.kubeconfig or None,
        qps=opts.kube_api_qps,
        burst=opts.kube_api_burst,
        pool_size=max(
            100,
            opts.sandbox_concurrent_workers
            + opts.sandbox_warm_pool_concurrent_workers
            + opts.sandbox_claim_concurrent_workers,
        ),
    )
    try:
        await check_crds(client, opts.extensions)
        mgr = Manager(
            client,
            metrics_bind_address=opts.metrics_bind_address,
            health_probe_bind_address=opts.health_probe_bind_address,
            leader_election=opts.leader_elect,
            leader_election_id=LEADER_ELECTION_ID,
            leader_election_namespace=(
                leader_election_namespace(opts) if opts.leader_elect else None
            ),
        )
        autoscaler = (
            opts.extensions and opts.enable_warm_pool_autoscaler and await autoscaler_served(client)
        )
        register_controllers(
            mgr,
            opts,
            autoscaler=autoscaler,
            label_domains=claim_label_domains() if opts.extensions else None,
        )
        register_metrics(mgr, opts)
        await mgr.run()
    finally:
        await client.close()


def claim_label_domains(path: Path | None = None) -> tuple[str, ...]:
    """The label domains claims may use, from the file at ``path`` (by default the mounted
    ConfigMap key, /etc/sandbox-config/allowed-label-domains; missing: the default), logged
    once; :class:`StartupError` when it cannot be read."""
    # imported here: the claim package registers its metric families (--extensions only)
    from agentsandbox.controllers.claim.config import LABEL_DOMAINS_FILE, load_label_domains

    path = LABEL_DOMAINS_FILE if path is None else path
    try:
        domains = load_label_domains(path)
    except (OSError, UnicodeDecodeError) as err:
        raise StartupError(f"cannot read the claim label domains file {path}: {err}") from None
    log.info("claim labels may use the domains %s (and their subdomains)", ", ".join(domains))
    return domains


def register_controllers(
    mgr: Manager,
    opts: Options,
    *,
    autoscaler: bool = False,
    label_domains: Sequence[str] | None = None,
) -> None:
    """The controllers ``opts`` asks for; the SandboxWarmPoolAutoscaler one only when
    ``autoscaler`` says its API is served (see :func:`autoscaler_served`). ``label_domains``:
    the domains a claim's ``additionalPodMetadata`` labels may use (None: the default)."""
    from agentsandbox.controllers.claim import controller as claim
    from agentsandbox.controllers.claim.config import DEFAULT_LABEL_DOMAINS
    from agentsandbox.controllers.sandbox import controller as sandbox
    from agentsandbox.controllers.template import controller as template
    from agentsandbox.controllers.warmpool import controller as warmpool
    from agentsandbox.controllers.warmpool.plan import Settings

    sandbox.setup(
        mgr,
        opts.sandbox_concurrent_workers,
        opts.cluster_domain,
        write_behind_window=opts.sandbox_write_behind_window,
    )
    if opts.extensions:
        warmpool.setup(
            mgr,
            Settings(
                max_batch_size=opts.sandbox_warm_pool_max_batch_size,
                readiness_grace_period=opts.sandbox_warm_pool_readiness_grace_period,
                unschedulable_recheck_interval=(
                    opts.sandbox_warm_pool_unschedulable_recheck_interval
                ),
                replenish_delay=opts.sandbox_warm_pool_replenish_delay,
                max_refill_rate=opts.sandbox_warm_pool_max_refill_rate,
                warm_pool_eviction=opts.enable_warm_pool_eviction,
            ),
            workers=opts.sandbox_warm_pool_concurrent_workers,
        )
        claim.setup(
            mgr,
            workers=opts.sandbox_claim_concurrent_workers,
            events=not opts.disable_claim_events,
            observability_annotations=not opts.disable_claim_observability_annotations,
            label_domains=DEFAULT_LABEL_DOMAINS if label_domains is None else label_domains,
        )
        template.setup(
            mgr,
            workers=opts.sandbox_template_concurrent_workers,
            egress_except=opts.network_policy_egress_except,
        )
        if autoscaler and opts.enable_warm_pool_autoscaler:
            from agentsandbox.controllers.autoscaler import controller as warm_pool_autoscaler
            from agentsandbox.controllers.autoscaler import settings as autoscaler_settings

            warm_pool_autoscaler.setup(
                mgr,
                autoscaler_settings.Settings(
                    sync_period=opts.warm_pool_autoscaler_sync_period,
                    rate_window=opts.warm_pool_autoscaler_rate_window,
                    burst_bin=opts.warm_pool_autoscaler_burst_bin,
                    slot_extra=autoscaler_settings.slot_extra_of(
                        opts.sandbox_warm_pool_replenish_delay,
                        opts.sandbox_warm_pool_max_refill_rate,
                    ),
                ),
            )


def start_tracing() -> bool:
    """``--enable-tracing``: OpenTelemetry spans over OTLP/HTTP, configured by the ``OTEL_*``
    variables (see docs/tracing.md). False (after one error line) when the exporter cannot be
    set up; only then is the OpenTelemetry SDK imported."""
    try:
        tracing.enable(TRACING_SERVICE_NAME, __version__)
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("opentelemetry"):
            raise
        log.error(
            "--enable-tracing: OpenTelemetry is not installed (no module %s). Install the "
            "tracing extra, `pip install 'agentsandbox[tracing]'`, or run without "
            "--enable-tracing",
            err.name,
        )
        return False
    except Exception as err:  # a bad OTEL_* value
        log.error("--enable-tracing: cannot set up the OpenTelemetry exporter: %s", err)
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    flags = build_flagset()
    try:
        values, rest = flags.parse(args)
    except HelpRequested:
        print(flags.usage(), file=sys.stderr)
        return 0
    except FlagError as err:
        print(f"{err}\n{flags.usage()}", file=sys.stderr)
        return 2
    if values["version"]:
        print(version_text())
        return 0
    opts = Options.from_values(values, given_flags(args))
    try:
        logsetup.configure(
            opts.zap_devel, opts.zap_encoder, opts.zap_log_level, opts.zap_time_encoding
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    errors = opts.errors()
    if errors:
        for line in errors:
            log.error("invalid flags: %s", line)
        return 1
    if rest:
        log.warning("ignoring positional arguments: %s", " ".join(rest))
    for line in opts.warnings():
        log.warning("%s", line)
    if opts.sandbox_write_behind_window > 0:
        log.info(
            "--sandbox-write-behind-window=%gs: pod label/annotation repairs may wait up to "
            "%gs (at most 1s)",
            opts.sandbox_write_behind_window,
            min(opts.sandbox_write_behind_window, 1.0),
        )
    if opts.enable_tracing and not start_tracing():
        return 1
    try:
        asyncio.run(run(opts))
    except (ConfigError, StartupError) as err:
        log.error("%s", err)
        return 1
    except LeaderElectionLost as err:
        log.error("leader election lost: %s", err)
        return 1
    except KubeError as err:
        log.error("cannot talk to the API server: %s", err)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        tracing.shutdown()  # export the spans still buffered (nothing to do when off)
    return 0


if __name__ == "__main__":
    sys.exit(main())
