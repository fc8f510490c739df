"""The manager's flags: upstream names and defaults, start-up validation, zap log options."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from agentsandbox.cli import logsetup
from agentsandbox.cli.options import Options, build_flagset, given_flags
from agentsandbox.kube.ratelimit import TokenBucket


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def options(*argv: str) -> Options:
    values, _ = build_flagset().parse(list(argv))
    return Options.from_values(values, given_flags(list(argv)))


# Every flag of upstream v1.0.1's manager that its cmd/agent-sandbox-controller/main.go defines:
# name -> (type, default); durations in seconds. tests/integration/test_flags_upstream.py parses
# upstream's main.go from the pinned module and checks this table against it.
V1_0_1_FLAGS: dict[str, tuple[str, object]] = {
    "version": ("bool", False),
    "cluster-domain": ("string", "cluster.local"),
    "metrics-bind-address": ("string", ":8080"),
    "health-probe-bind-address": ("string", ":8081"),
    "leader-elect": ("bool", True),
    "leader-election-namespace": ("string", ""),
    "extensions": ("bool", False),
    "enable-tracing": ("bool", False),
    "enable-pprof": ("bool", False),
    "enable-pprof-debug": ("bool", False),
    "pprof-block-profile-rate": ("int", 1_000_000),
    "pprof-mutex-profile-fraction": ("int", 10),
    "kube-api-qps": ("float", -1.0),
    "kube-api-burst": ("int", 10),
    "api-connections": ("int", 1),
    "separate-watch-connection": ("bool", False),
    "sandbox-concurrent-workers": ("int", 100),
    "sandbox-claim-concurrent-workers": ("int", 50),
    "sandbox-warm-pool-concurrent-workers": ("int", 1),
    "sandbox-template-concurrent-workers": ("int", 1),
    "sandbox-warm-pool-max-batch-size": ("int", 300),
    "sandbox-warm-pool-replenish-delay": ("duration", 0.0),
    "sandbox-warm-pool-max-refill-rate": ("float", 0.0),
    "sandbox-warm-pool-readiness-grace-period": ("duration", 300.0),  # 5m
    "sandbox-warm-pool-unschedulable-recheck-interval": ("duration", 60.0),  # 1m
    "enable-warm-pool-eviction": ("bool", True),
    "cache-label-selectors": ("bool", False),
    "disable-claim-events": ("bool", False),
    "disable-claim-observability-annotations": ("bool", False),
    "sandbox-write-behind-window": ("duration", 0.0),
}
# The flags v1.0.1's binary also takes from controller-runtime (its main.go binds zap's options,
# and controller-runtime's config package registers --kubeconfig): name -> (type, default, why
# ours is shown so). Go's zap flags are flag.Value types with string syntax and no default.
CONTROLLER_RUNTIME_FLAGS: dict[str, tuple[str, object, str]] = {
    "zap-devel": ("bool", False, "zap.Options.BindFlags: a bool, false"),
    "zap-encoder": ("string", "", "zap.Options.BindFlags: a flag.Value, unset"),
    "zap-log-level": ("string", "", "zap.Options.BindFlags: a flag.Value, unset"),
    "zap-stacktrace-level": ("string", "", "zap.Options.BindFlags: a flag.Value, unset"),
    "zap-time-encoding": ("string", "", "zap.Options.BindFlags: a flag.Value, unset"),
    "kubeconfig": ("string", "", "controller-runtime's client/config registers it, empty"),
}
# Flags we accept that v1.0.1 does not have: name -> (type, default, reason).
_NO_WEBHOOK = "upstream's later webhook flag: accepted with no effect, we run no webhook server"
OURS_ONLY_FLAGS: dict[str, tuple[str, object, str]] = {
    "enable-webhook": ("bool", True, _NO_WEBHOOK),
    "manage-webhook-certs": ("bool", True, _NO_WEBHOOK),
    "webhook-port": ("int", 9443, _NO_WEBHOOK),
    "webhook-cert-dir": ("string", "/tmp/k8s-webhook-server/serving-certs", _NO_WEBHOOK),
    # the cert/key file names are controller-runtime's defaults (upstream's not recorded)
    "webhook-cert-name": ("string", "tls.crt", _NO_WEBHOOK),
    "webhook-key-name": ("string", "tls.key", _NO_WEBHOOK),
    "webhook-service-name": ("string", "agent-sandbox-webhook-service", _NO_WEBHOOK),
    "webhook-namespace": ("string", "agent-sandbox-system", _NO_WEBHOOK),
    # the SandboxWarmPoolAutoscaler controller (docs/autoscaler-object.md) and its settings
    # (tests/unit/cli/test_autoscaler_flags.py)
    "enable-warm-pool-autoscaler": ("bool", True, "ours: runs the autoscaler controller"),
    "warm-pool-autoscaler-sync-period": ("duration", 5.0, "ours: an autoscaler setting"),
    "warm-pool-autoscaler-rate-window": ("duration", 1800.0, "ours: an autoscaler setting"),
    "warm-pool-autoscaler-burst-bin": ("duration", 10.0, "ours: an autoscaler setting"),
    # extra except-CIDRs of the default NetworkPolicy's egress (docs/design/template.md)
    "network-policy-egress-except": ("string", "", "ours: more CIDRs the default policy denies"),
}
# Upstream flags accepted with no effect (a warning each when given; docs/design/architecture.md,
# "The flags"): the webhook flags above and v1.0.1's connection flags.
NO_EFFECT_FLAGS: dict[str, tuple[str, object]] = {
    **{n: (kind, default) for n, (kind, default, why) in OURS_ONLY_FLAGS.items() if "webhook" in n},
    "separate-watch-connection": ("bool", False),
    "api-connections": ("int", 1),
}
# Every flag of the binary that upstream v1.0.1's binary has too.
UPSTREAM_FLAGS: dict[str, tuple[str, object]] = V1_0_1_FLAGS | {
    n: (kind, default) for n, (kind, default, _) in CONTROLLER_RUNTIME_FLAGS.items()
}


def test_every_flag_has_upstream_v1_0_1s_name_type_and_default() -> None:
    """One table of v1.0.1's 36 flags plus the ones only we take; no flag more, none less."""
    ours_only = {n: (kind, default) for n, (kind, default, _) in OURS_ONLY_FLAGS.items()}
    expected = UPSTREAM_FLAGS | ours_only
    assert len(V1_0_1_FLAGS) == 30 and len(UPSTREAM_FLAGS) == 36
    assert not set(UPSTREAM_FLAGS) & set(OURS_ONLY_FLAGS)
    flagset = build_flagset()
    assert set(flagset.flags) == set(expected)
    actual = {name: (f.kind, f.default) for name, f in flagset.flags.items()}
    for name, (kind, default) in expected.items():
        assert actual[name] == (kind, default), name
        assert type(actual[name][1]) is type(default), name  # -1.0 not -1, 10 not 10.0
    values, rest = flagset.parse([])
    assert values == {name: default for name, (_, default) in expected.items()} and rest == []


def test_the_worker_defaults_are_v1_0_1s() -> None:
    o = options()
    assert (o.sandbox_concurrent_workers, o.sandbox_claim_concurrent_workers) == (100, 50)
    assert o.sandbox_warm_pool_concurrent_workers == o.sandbox_template_concurrent_workers == 1
    assert o.warnings() == []  # 152 workers: under 1000, and no QPS limit to warn about


def test_options_carry_the_defaults() -> None:
    o = options()
    fields = {
        name: getattr(o, name.replace("-", "_"))
        for name in UPSTREAM_FLAGS
        if hasattr(o, name.replace("-", "_"))
    }
    # Every flag but --version (handled before Options), pprof (not applicable), the connection
    # flags (no effect) and zap-stacktrace-level (parsed, not used) reaches Options unchanged.
    assert set(UPSTREAM_FLAGS) - set(fields) == {
        "version",
        "enable-pprof",
        "enable-pprof-debug",
        "pprof-block-profile-rate",
        "pprof-mutex-profile-fraction",
        "zap-stacktrace-level",
        "separate-watch-connection",
        "api-connections",
    }
    assert not any(hasattr(o, n.replace("-", "_")) for n in NO_EFFECT_FLAGS)
    assert o.sandbox_write_behind_window == 0.0 and o.cache_label_selectors is False
    for name, value in fields.items():
        assert value == (UPSTREAM_FLAGS)[name][1], name
    assert o.not_applicable == ()
    assert o.errors() == [] and o.warnings() == []


def test_claim_write_reduction_flags_reach_options_with_upstreams_help() -> None:
    assert (o := options()).disable_claim_events is False
    assert o.disable_claim_observability_annotations is False
    o = options("--disable-claim-events", "-disable-claim-observability-annotations=true")
    assert o.disable_claim_events is True and o.disable_claim_observability_annotations is True
    assert o.errors() == [] and o.warnings() == []
    o = options("--disable-claim-events=false")
    assert o.disable_claim_events is False
    usage = build_flagset().usage()
    assert "Disable Kubernetes Event emission from the SandboxClaim controller" in usage
    assert "Skip persisting the SandboxClaim observability annotations" in usage


def test_an_upstream_deployments_args_parse_unchanged() -> None:
    o = options(
        "--leader-elect=false",
        "--extensions",
        "--kube-api-qps=1000",
        "--kube-api-burst",
        "2000",
        "--sandbox-warm-pool-concurrent-workers=50",
        "--zap-log-level=debug",
        "--sandbox-warm-pool-readiness-grace-period=30s",
    )
    assert (o.leader_elect, o.extensions, o.kube_api_qps, o.kube_api_burst) == (
        False,
        True,
        1000.0,
        2000,
    )
    assert o.sandbox_warm_pool_concurrent_workers == 50
    assert o.sandbox_warm_pool_readiness_grace_period == 30.0


@pytest.mark.parametrize(
    "flag",
    [
        "--sandbox-warm-pool-max-batch-size=0",
        "--sandbox-warm-pool-max-batch-size=-5",
        "--sandbox-warm-pool-concurrent-workers=0",
        "--sandbox-claim-concurrent-workers=0",
        "--sandbox-concurrent-workers=-1",
        "--kube-api-burst=0",
    ],
)
def test_non_positive_workers_batch_or_burst_are_rejected_at_start_up(flag: str) -> None:
    errors = options(flag).errors()
    assert len(errors) == 1
    assert flag.split("=")[0] in errors[0] and "must be greater than 0" in errors[0]


@pytest.mark.parametrize(
    "flag",
    [
        "--sandbox-warm-pool-unschedulable-recheck-interval=0",
        "--sandbox-warm-pool-unschedulable-recheck-interval=-1m",
        "--sandbox-warm-pool-readiness-grace-period=0s",
    ],
)
def test_non_positive_warm_pool_durations_are_rejected_at_start_up(flag: str) -> None:
    """As upstream HEAD: 0 would leave a held pool never re-checked (docs/design/architecture.md,
    "The flags", start-up validation)."""
    errors = options(flag).errors()
    assert errors == [f"{flag.split('=')[0]} must be a positive duration"]


def test_kube_api_qps_zero_or_negative_means_no_limiter_as_the_spec_says() -> None:
    """As upstream 35b9757f's flag help says: <= 0 means no client-side limiter, and upstream
    warns about workers over burst only when qps > 0. (Upstream's client-go reads 0 as its
    default 5 QPS; we keep what the help text says, documented in ``--help`` and in
    docs/deploy.md, "Behaviour of the running controller that differs from upstream 35b9757f".)"""
    for flag in ("--kube-api-qps=0", "--kube-api-qps=-1"):
        o = options(flag, "--kube-api-burst=1", "--sandbox-concurrent-workers=5")
        assert o.errors() == []
        assert not any("exceed --kube-api-burst" in w for w in o.warnings()), flag
        assert TokenBucket(o.kube_api_qps, o.kube_api_burst).enabled is False, flag


def test_template_workers_are_not_validated_as_upstream() -> None:
    assert options("--sandbox-template-concurrent-workers=0").errors() == []


def test_pprof_flags_are_accepted_and_reported_not_applicable() -> None:
    o = options("--enable-pprof", "--pprof-block-profile-rate=5")
    assert o.errors() == []
    assert any("enable-pprof has no effect" in w for w in o.warnings())


def test_workers_above_burst_warn_when_qps_limited() -> None:
    o = options("--kube-api-qps=10", "--kube-api-burst=5", "--sandbox-concurrent-workers=10")
    assert any("exceed --kube-api-burst" in w for w in o.warnings())


def test_production_logging_is_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    logsetup.configure(devel=False, encoder="", level="", time_encoding="")
    logging.getLogger("warmpool").info("created", extra={"pool": "ns/p", "count": 3})
    line = capsys.readouterr().err.strip().splitlines()[-1]
    entry = json.loads(line)
    assert entry["level"] == "info" and entry["msg"] == "created"
    assert entry["pool"] == "ns/p" and entry["count"] == 3
    assert isinstance(entry["ts"], float)
    logging.getLogger("warmpool").debug("hidden")
    assert "hidden" not in capsys.readouterr().err


def test_devel_logging_is_console_at_debug(capsys: pytest.CaptureFixture[str]) -> None:
    logsetup.configure(devel=True, encoder="", level="", time_encoding="")
    logging.getLogger("x").debug("shown")
    err = capsys.readouterr().err
    assert "DEBUG" in err and "shown" in err


def test_unknown_zap_level_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match='unknown level "loud"'):
        logsetup.configure(devel=False, encoder="", level="loud", time_encoding="")


def test_warm_pool_refill_and_eviction_flags_parse_and_reach_options() -> None:
    o = options(
        "--sandbox-warm-pool-replenish-delay=1.5s",
        "-sandbox-warm-pool-max-refill-rate",
        "2.5",
        "--enable-warm-pool-eviction=false",
    )
    assert o.sandbox_warm_pool_replenish_delay == 1.5
    assert o.sandbox_warm_pool_max_refill_rate == 2.5
    assert o.enable_warm_pool_eviction is False
    assert o.errors() == [] and o.warnings() == []
    assert options().enable_warm_pool_eviction is True  # HEAD's default (docs/compatibility.md)


@pytest.mark.parametrize(
    "flag", ["--sandbox-warm-pool-replenish-delay=-1s", "--sandbox-warm-pool-max-refill-rate=-1"]
)
def test_negative_replenish_delay_or_refill_rate_is_rejected(flag: str) -> None:
    assert options(flag).errors() == [f"{flag.split('=')[0]} must not be negative"]


@pytest.mark.parametrize("name", sorted(NO_EFFECT_FLAGS))
def test_webhook_and_connection_flags_are_accepted_with_one_warning_each(name: str) -> None:
    kind, _ = NO_EFFECT_FLAGS[name]
    value = {"bool": "true", "int": "3", "string": "x"}[kind]
    o = options(f"--{name}={value}")
    assert o.errors() == []
    assert o.warnings() == [
        f"--{name} is accepted for compatibility with upstream and has no effect here"
    ]


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        ((), False),
        (("--cache-label-selectors",), True),
        (("--cache-label-selectors=true",), True),
        (("-cache-label-selectors=false",), False),
        (("--cache-label-selectors=0",), False),
        (("--cache-label-selectors=T",), True),
    ],
)
def test_cache_label_selectors_takes_both_values_with_go_bool_syntax(
    argv: tuple[str, ...], value: bool
) -> None:
    """Both values start the binary (v1.0.1's args, which exit 2 before this flag existed
    here); neither changes our caches, which are always scoped (docs/compatibility.md)."""
    o = options(*argv)
    assert o.cache_label_selectors is value
    assert o.errors() == [] and o.warnings() == []


def test_cache_label_selectors_takes_no_separate_value() -> None:
    """A Go bool flag: ``--cache-label-selectors false`` leaves ``false`` as an argument."""
    values, rest = build_flagset().parse(["--cache-label-selectors", "false"])
    assert values["cache-label-selectors"] is True and rest == ["false"]


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("250ms", 0.25), ("2s", 2.0)])
def test_write_behind_window_is_a_go_duration(text: str, seconds: float) -> None:
    o = options(f"--sandbox-write-behind-window={text}")
    assert o.sandbox_write_behind_window == seconds
    assert o.errors() == [] and o.warnings() == []


def test_a_negative_write_behind_window_is_rejected_at_start_up_as_upstream() -> None:
    assert options("--sandbox-write-behind-window=-1s").errors() == [
        "--sandbox-write-behind-window must not be negative"
    ]
