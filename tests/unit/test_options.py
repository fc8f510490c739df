"""The manager's flags: upstream names and defaults, start-up validation, zap log options."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from agentsandbox.cli import logsetup
from agentsandbox.cli.options import Options, build_flagset, given_flags


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


def test_defaults_are_upstreams() -> None:
    o = options()
    assert o.metrics_bind_address == ":8080"
    assert o.health_probe_bind_address == ":8081"
    assert o.leader_elect is True
    assert o.extensions is False
    assert o.kube_api_qps == -1.0 and o.kube_api_burst == 10
    assert o.sandbox_warm_pool_max_batch_size == 300
    assert o.sandbox_warm_pool_concurrent_workers == 1
    assert o.sandbox_warm_pool_readiness_grace_period == 300.0
    assert o.cluster_domain == "cluster.local"
    assert o.errors() == []


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
