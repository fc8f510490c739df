"""The flags table of docs/flags.md is `agent-sandbox-controller --help`: the same flags, types,
defaults and descriptions, and each Helm value it names exists in the chart's values.yaml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
VALUES = ROOT / "deploy" / "helm" / "agent-sandbox" / "values.yaml"


def help_flags() -> dict[str, tuple[str, str, str]]:
    """flag -> (type, default as shown, description), parsed from the real --help output."""
    proc = subprocess.run(
        [sys.executable, "-c", "from agentsandbox.cli.controller import main; main()", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stderr.splitlines()
    assert lines and lines[0] == "Usage of agent-sandbox-controller:", proc.stderr
    out = {}
    for head, body in zip(lines[1::2], lines[2::2], strict=True):
        m = re.fullmatch(r"  -(\S+)(?: (\w+))?", head)
        assert m, head
        desc = body.strip()
        d = re.search(r" \(default (.*)\)$", desc)
        out[m[1]] = (m[2] or "bool", d[1] if d else "", desc[: d.start()] if d else desc)
    return out


def readme_rows() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "flags.md").read_text()
    section = text.split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        name = cells[0].strip("`").removeprefix("--")
        rows[name] = [c.replace("\\|", "|") for c in cells]
    return rows


def has_value(values: dict[str, Any], dotted: str) -> bool:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def row_for(name: str, kind: str, default: str, desc: str, helm: str) -> str:
    """The table row a flag should have (printed when the table is out of date)."""
    shown = f"`{default}`" if default else ""
    return f"| `--{name}` | {kind} | {shown} | {helm} | {desc.replace('|', chr(92) + '|')} |"


def test_the_readme_flags_table_is_the_help_output() -> None:
    flags, rows = help_flags(), readme_rows()
    assert flags, "no flags parsed from --help"
    wrong = []
    for name, (kind, default, desc) in sorted(flags.items()):
        if name not in rows:
            camel = re.sub(r"-(\w)", lambda m: m[1].upper(), name)
            wrong.append(row_for(name, kind, default, desc, f"`controller.{camel}`"))
            continue
        _, r_kind, r_default, helm, r_desc = rows[name]
        if (r_kind, r_default.strip("`"), r_desc) != (kind, default, desc):
            wrong.append(row_for(name, kind, default, desc, helm))
    extra = sorted(set(rows) - set(flags))
    assert not wrong and not extra, (
        "docs/flags.md's flags table is not `agent-sandbox-controller --help`; "
        f"rows without a flag: {extra}; rows to put in (a new flag also needs a Helm value in "
        "deploy/helm/agent-sandbox/values.yaml and values.schema.json):\n" + "\n".join(wrong)
    )


def test_every_helm_value_named_in_the_table_exists() -> None:
    values = yaml.safe_load(VALUES.read_text())
    for name, cells in readme_rows().items():
        named = re.findall(r"`([\w.]+)`", cells[3])
        if cells[3].startswith("—"):
            assert name in ("kubeconfig", "version"), name
            continue
        assert named, (name, cells[3])
        for dotted in named:
            assert has_value(values, dotted), (name, dotted)
