"""The RBAC manifests, the chart's RBAC template and the tables of docs/deploy.md are generated
from hack/rbac.toml (``python hack/gen_rbac.py``) and must not drift from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.project.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
GEN = ROOT / "hack" / "gen_rbac.py"


gen = load_script(GEN)


def _check(source: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(GEN), "--check"]
    if source is not None:
        args += ["--source", str(source)]
    return subprocess.run(args, capture_output=True, text=True, check=False)


def test_the_committed_files_are_the_generators_output() -> None:
    out = _check()
    assert out.returncode == 0, out.stderr


def test_check_names_every_file_a_changed_rule_makes_stale(tmp_path: Path) -> None:
    text = gen.SOURCE.read_text()
    changed = text.replace('verbs = ["get", "patch"]', 'verbs = ["get"]', 1)
    assert changed != text
    source = tmp_path / "rbac.toml"
    source.write_text(changed)
    out = _check(source)
    assert out.returncode == 1
    for name in ("deploy/rbac.yaml", "templates/rbac.yaml", "docs/deploy.md"):
        assert name in out.stderr, out.stderr


def test_the_manifests_hold_the_sources_rules() -> None:
    """What kubectl would read: the parsed manifests carry each role's rules, in order."""
    roles = gen.load()
    docs = [
        d
        for path in (gen.KUSTOMIZE, gen.AGGREGATE)
        for d in yaml.safe_load_all(path.read_text())
        if d and d["kind"] in ("ClusterRole", "Role")
    ]
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(roles)
    for doc in docs:
        want = [
            {
                "apiGroups": [r["group"]],
                "resources": r["resources"],
                **({"resourceNames": r["names"]} if "names" in r else {}),
                "verbs": r["verbs"],
            }
            for r in roles[doc["metadata"]["name"]]["rule"]
        ]
        assert doc["rules"] == want, doc["metadata"]["name"]


def test_the_docs_tables_mark_admission_verbs() -> None:
    roles = gen.load()
    table = gen.doc_table(roles["agent-sandbox-controller"])
    assert "| core | `persistentvolumeclaims` | get, list, watch, create, patch, delete¹ |" in table
    assert "| `agents.x-k8s.io` | `sandboxes/finalizers` | update¹ | see below |" in table
    lease = gen.doc_table(roles["agent-sandbox-controller-leader-election"])
    assert "| `coordination.k8s.io` | `leases` | any | create |" in lease


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('verbs = ["update"]', 'verbs = ["update", "escalate"]', "unknown verbs"),
        ('admission = ["update"]', 'admission = ["delete"]', "admission verbs not granted"),
        ('verbs = ["create", "patch"]', 'verbs = ["create", "create"]', "a verb twice"),
    ],
)
def test_the_source_is_validated(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = gen.SOURCE.read_text()
    assert old in text
    source = tmp_path / "rbac.toml"
    source.write_text(text.replace(old, new, 1))
    with pytest.raises(SystemExit, match=message):
        gen.load(source)
