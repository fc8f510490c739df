"""``make demo``'s flags: without any it is the demo the README describes; sizes are checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsandbox.cli import demo


def test_without_flags_it_is_the_documented_demo() -> None:
    size, out_dir = demo.parse_args([])
    assert size == demo.Size(pool=50, scaled=80, warm_claims=20, cold_claims=5, claim_rate=10.0)
    assert out_dir is None  # demo-output/ in the repository


def test_the_sizes_and_the_plot_directory_are_flags(tmp_path: Path) -> None:
    argv = ["--pool=4", "--scaled=6", "--warm-claims=3", "--cold-claims=0", "--claim-rate=50"]
    size, out_dir = demo.parse_args([*argv, f"--out-dir={tmp_path}"])
    assert size == demo.Size(pool=4, scaled=6, warm_claims=3, cold_claims=0, claim_rate=50.0)
    assert out_dir == tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["--pool=0"],
        ["--pool=10", "--scaled=5"],
        ["--warm-claims=0", "--cold-claims=0"],
        ["--warm-claims=-1"],
        ["--pool=2", "--scaled=2", "--warm-claims=3"],
        ["--claim-rate=0"],
    ],
)
def test_a_size_the_demo_cannot_run_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        demo.parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err
