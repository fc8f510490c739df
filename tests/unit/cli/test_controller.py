"""agent-sandbox-controller start-up: version, bad flags and bad config end start-up with one line.

The subprocess runs under a generous timeout that only stops a hung start-up (one that went on
to connect, or waited): how fast it ended is not asserted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentsandbox.cli.controller import main, version_text

CMD = [sys.executable, "-m", "agentsandbox.cli.controller"]


#: Seconds before a run counts as hung (it raises TimeoutExpired): a guard, not a budget.
HUNG = 60.0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=HUNG, check=False)


def test_version_prints_the_version_block_and_exits_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("agent-sandbox-controller, version ")
    assert "(revision: " in out and "platform:" in out
    assert version_text().splitlines()[0] in out


def test_unknown_flag_exits_2_with_go_style_message() -> None:
    proc = run("--no-such-flag")
    assert proc.returncode == 2
    assert "flag provided but not defined: -no-such-flag" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_non_positive_batch_size_is_rejected_at_start_up() -> None:
    proc = run("--sandbox-warm-pool-max-batch-size=0", "--leader-elect=false")
    assert proc.returncode == 1
    assert "--sandbox-warm-pool-max-batch-size must be greater than 0, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    proc = run(f"--kubeconfig={missing}", "--leader-elect=false")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert str(missing) in proc.stderr


def test_leader_election_outside_a_cluster_needs_a_namespace(tmp_path: Path) -> None:
    from agentsandbox.cli.controller import StartupError, leader_election_namespace
    from agentsandbox.cli.options import Options, build_flagset

    values, _ = build_flagset().parse([])
    opts = Options.from_values(values, set())
    with pytest.raises(StartupError, match="--leader-election-namespace"):
        leader_election_namespace(opts)
    values, _ = build_flagset().parse(["--leader-election-namespace=system"])
    assert leader_election_namespace(Options.from_values(values, set())) == "system"


def test_non_positive_unschedulable_recheck_interval_ends_start_up_with_one_line() -> None:
    """Upstream HEAD rejects it; 0 would never re-check a held pool (docs/design/architecture.md,
    "The flags", start-up validation)."""
    proc = run("--sandbox-warm-pool-unschedulable-recheck-interval=0", "--leader-elect=false")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert (
        "--sandbox-warm-pool-unschedulable-recheck-interval must be a positive duration" in lines[0]
    )


def test_webhook_and_connection_flags_start_with_one_warning_line_each(tmp_path: Path) -> None:
    """Upstream HEAD flags we accept with no effect: one warning line each, then start-up goes
    on (here to the missing kubeconfig); an unknown flag still fails fast (above)."""
    missing = tmp_path / "nope.yaml"
    proc = run(
        "--enable-webhook=false",
        "--manage-webhook-certs=false",
        "--webhook-port=9444",
        "--api-connections=4",
        f"--kubeconfig={missing}",
        "--leader-elect=false",
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    for name in ("enable-webhook", "manage-webhook-certs", "webhook-port", "api-connections"):
        hits = [ln for ln in lines if f"--{name} is accepted for compatibility" in ln]
        assert len(hits) == 1, (name, proc.stderr)
    assert str(missing) in lines[-1]


def test_enable_tracing_without_the_tracing_extra_says_what_to_install() -> None:
    """The runtime wheel leaves OpenTelemetry to the [tracing] extra: here it is made
    unimportable (a ``None`` in ``sys.modules`` is how Python spells "not installed" for an
    import), and start-up ends with one line naming the extra, before any connection."""
    code = (
        "import sys\n"
        "for m in ('opentelemetry', 'opentelemetry.trace', 'opentelemetry.sdk'):\n"
        "    sys.modules[m] = None\n"
        "from agentsandbox.cli.controller import main\n"
        "sys.exit(main(['--enable-tracing', '--leader-elect=false']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HUNG, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert "OpenTelemetry is not installed" in proc.stderr
    assert "pip install 'agentsandbox[tracing]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_start_tracing_names_the_extra_only_for_missing_opentelemetry(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In process: a missing OpenTelemetry module is the one-line error naming the extra; any
    other missing module is a bug of ours and propagates."""
    from agentsandbox.cli import controller
    from agentsandbox.kube import tracing

    def missing(name: str) -> Callable[..., None]:
        def enable(*_: object, **__: object) -> None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        return enable

    monkeypatch.setattr(tracing, "enable", missing("opentelemetry.sdk"))
    assert controller.start_tracing() is False
    assert "pip install 'agentsandbox[tracing]'" in caplog.text
    assert "opentelemetry.sdk" in caplog.text
    monkeypatch.setattr(tracing, "enable", missing("orjson"))
    with pytest.raises(ModuleNotFoundError, match="orjson"):
        controller.start_tracing()
