"""docs/compatibility.md is generated from the code (hack/gen_compat.py) and must not drift."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from agentsandbox.cli.options import NO_EFFECT, build_flagset

ROOT = Path(__file__).resolve().parents[3]
GEN = ROOT / "hack" / "gen_compat.py"
DOC = ROOT / "docs" / "compatibility.md"


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_compat", GEN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # data only: rendering runs in a subprocess
    return mod


def test_compatibility_doc_is_up_to_date_with_the_code() -> None:
    """Like the CRDs: a flag, key, reason or metric changed in code without re-running
    ``python hack/gen_compat.py`` fails here (in a subprocess: rendering registers collectors)."""
    proc = subprocess.run(
        [sys.executable, str(GEN), "--check"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_every_flag_of_ours_and_of_upstream_has_a_row() -> None:
    text = DOC.read_text()
    gen = _load_gen()
    for name in set(build_flagset().flags) | set(gen.UPSTREAM_FLAGS):
        assert f"| `--{name}` |" in text, name


def test_no_effect_flags_are_upstream_head_flags_and_say_so() -> None:
    gen = _load_gen()
    text = DOC.read_text()
    for name in NO_EFFECT:
        assert gen.UPSTREAM_FLAGS[name][2] in (gen.HEAD, gen.RELEASE)  # not 35b9757f's
        row = next(line for line in text.splitlines() if line.startswith(f"| `--{name}` |"))
        assert "accepted, no effect" in row


def test_decisions_record_the_defaults() -> None:
    text = DOC.read_text()
    assert "`--enable-warm-pool-eviction` is **true**" in text
    assert "`--sandbox-concurrent-workers` **100**" in text
    assert "`--sandbox-claim-concurrent-workers` **50**" in text


def test_the_flags_v1_0_1_has_are_accepted_with_v1_0_1s_type_and_default() -> None:
    """No v1.0.1 flag ends start-up with exit 2 (as --cache-label-selectors and
    --sandbox-write-behind-window once did): each is ours, with the same type and default."""
    gen = _load_gen()
    flags, _ = gen.our_flags()
    for name, (kind, default, since, _) in gen.UPSTREAM_FLAGS.items():
        if since == gen.HEAD:
            continue
        assert flags.get(name) == (kind, default), name
