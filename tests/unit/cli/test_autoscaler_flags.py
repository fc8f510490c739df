"""The SandboxWarmPoolAutoscaler's settings as flags: --warm-pool-autoscaler-sync-period,
-rate-window and -burst-bin parse as Go durations, default to the controller's ``Settings``,
refuse a non-positive or malformed value at start-up, and reach the controller."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from agentsandbox.cli.controller import main, register_controllers
from agentsandbox.cli.goflags import FlagError
from agentsandbox.cli.options import Options, build_flagset, given_flags
from agentsandbox.controllers.autoscaler import controller as autoscaler
from agentsandbox.controllers.autoscaler.plan import Policy
from agentsandbox.controllers.autoscaler.settings import Settings, policy_of
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.manager import Manager

FLAGS = (
    "warm-pool-autoscaler-sync-period",
    "warm-pool-autoscaler-rate-window",
    "warm-pool-autoscaler-burst-bin",
)


def options(*argv: str) -> Options:
    values, _ = build_flagset().parse(list(argv))
    return Options.from_values(values, given_flags(list(argv)))


def test_the_flags_parse_go_durations_into_seconds() -> None:
    o = options(
        "--warm-pool-autoscaler-sync-period=2s",
        "-warm-pool-autoscaler-rate-window",
        "1h30m",
        "--warm-pool-autoscaler-burst-bin=500ms",
    )
    assert o.warm_pool_autoscaler_sync_period == 2.0
    assert o.warm_pool_autoscaler_rate_window == 5400.0
    assert o.warm_pool_autoscaler_burst_bin == 0.5
    assert o.errors() == [] and o.warnings() == []


def test_the_defaults_are_the_settings_defaults_and_help_shows_them() -> None:
    o = options()
    assert (
        o.warm_pool_autoscaler_sync_period,
        o.warm_pool_autoscaler_rate_window,
        o.warm_pool_autoscaler_burst_bin,
    ) == (5.0, 1800.0, 10.0)
    s = Settings()
    assert (s.sync_period, s.rate_window, s.burst_bin) == (5.0, 1800.0, 10.0)
    # Settings.burst_bin is Policy.bin_width; its default is Policy's (None would mean the same)
    assert s.burst_bin == Policy(min_replicas=1, max_replicas=2, target_warm_share=0.9).bin_width
    usage = build_flagset().usage()
    for flag, shown in zip(FLAGS, ("5s", "30m", "10s"), strict=True):
        _, _, rest = usage.partition(f"  -{flag} duration\n")
        assert rest, flag
        line = rest.splitlines()[0]
        assert line.endswith(f"(default {shown})"), line
        assert "--extensions and --enable-warm-pool-autoscaler" in line, line


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", ["0s", "0", "-1s", "-5m"])
def test_a_non_positive_duration_is_one_error_line(flag: str, value: str) -> None:
    assert options(f"--{flag}={value}").errors() == [f"--{flag} must be a positive duration"]


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", ["garbage", "5", "1x", "s"])
def test_a_malformed_duration_is_a_flag_error(flag: str, value: str) -> None:
    with pytest.raises(FlagError, match=f'invalid value "{value}" for flag -{flag}: time: '):
        build_flagset().parse([f"--{flag}={value}"])


def test_main_exits_2_on_a_malformed_duration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--warm-pool-autoscaler-sync-period=soon"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        'invalid value "soon" for flag -warm-pool-autoscaler-sync-period: '
        'time: invalid duration "soon"'
    )
    assert "Traceback" not in err


def test_a_zero_duration_ends_start_up_with_one_line() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentsandbox.cli.controller",
            "--warm-pool-autoscaler-rate-window=0s",
            "--leader-elect=false",
        ],
        capture_output=True,
        text=True,
        timeout=20,  # only stops a hung start-up; its speed is not asserted
        check=False,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--warm-pool-autoscaler-rate-window must be a positive duration" in lines[0]


def captured_settings(monkeypatch: pytest.MonkeyPatch, *argv: str) -> list[tuple[Settings, Any]]:
    """register_controllers with the autoscaler served: the settings its ``setup`` was given,
    and the settings of the reconciler the real ``setup`` built from them."""
    real = autoscaler.setup
    calls: list[tuple[Settings, Any]] = []

    def spy(mgr: Manager, settings: Settings | None = None, workers: int = 1) -> Controller:
        controller = real(mgr, settings, workers)
        reconciler = controller._reconcile.__self__  # type: ignore[attr-defined]
        assert settings is not None
        calls.append((settings, reconciler.settings))
        assert controller.min_interval == settings.min_interval
        return controller

    monkeypatch.setattr(autoscaler, "setup", spy)
    mgr = Manager(object())  # type: ignore[arg-type]
    register_controllers(mgr, options(*argv), autoscaler=True)
    return calls


def test_register_controllers_passes_the_flags_to_the_autoscaler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ((given, used),) = captured_settings(
        monkeypatch,
        "--extensions",
        "--warm-pool-autoscaler-sync-period=2s",
        "--warm-pool-autoscaler-rate-window=90s",
        "--warm-pool-autoscaler-burst-bin=3s",
    )
    assert given == Settings(sync_period=2.0, rate_window=90.0, burst_bin=3.0)
    assert used is given
    assert policy_of({"maxReplicas": 5}, used).bin_width == 3.0
    assert policy_of({"maxReplicas": 5}, used).rate_window == 90.0


def test_the_warm_pools_replenish_delay_and_refill_rate_limit_lengthen_the_autoscalers_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Autoscaler review #15: a slot is busy from a member's adoption to its replacement Ready,
    and the warm pool's replenish delay and refill rate limit add to that time, which the
    refill samples (create -> Ready) do not see. The flags reach the autoscaler as the seconds
    they add: the delay whole and one create interval of the rate limit."""
    ((given, _),) = captured_settings(
        monkeypatch,
        "--extensions",
        "--sandbox-warm-pool-replenish-delay=5s",
        "--sandbox-warm-pool-max-refill-rate=4",
    )
    assert given.slot_extra == pytest.approx(5.25)
    ((given, _),) = captured_settings(monkeypatch, "--extensions")
    assert given.slot_extra == 0.0


def test_register_controllers_uses_the_defaults_without_the_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ((given, _),) = captured_settings(monkeypatch, "--extensions")
    assert given == Settings()


def test_no_autoscaler_without_extensions_or_with_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert captured_settings(monkeypatch, "--warm-pool-autoscaler-sync-period=2s") == []
    assert (
        captured_settings(
            monkeypatch,
            "--extensions",
            "--enable-warm-pool-autoscaler=false",
            "--warm-pool-autoscaler-sync-period=2s",
        )
        == []
    )
