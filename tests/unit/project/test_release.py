"""The release (hack/release.py, `make release`): versions, notes, install.yaml's image, and the
same bytes on every run; the runtime wheel holds no dev-only code and names no dev-only
dependency."""

from __future__ import annotations

import ast
import email
import hashlib
import re
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "hack"))

import changelog  # noqa: E402
import release  # noqa: E402
import semver  # noqa: E402

DEV_ONLY_MODULES = (
    "agentsandbox/devcluster/",
    "agentsandbox/sim/",
    "agentsandbox/cli/demo.py",
    "agentsandbox/cli/demo_plot.py",
    "agentsandbox/cli/devcluster.py",
)
DEV_ONLY_DEPENDENCIES = {"pyyaml", "cryptography", "rich", "matplotlib", "pytest", "mypy"}
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("given", "pep440"),
    [
        ("1.2.0", "1.2.0"),
        ("1.2.0-rc.1", "1.2.0rc1"),
        ("1.2.0-rc1", "1.2.0rc1"),
        ("1.2.0-rc", "1.2.0rc0"),
        ("1.2.0-alpha.3", "1.2.0a3"),
        ("1.2.0-a.3", "1.2.0a3"),
        ("1.2.0-beta.2", "1.2.0b2"),
        ("1.2.0-dev.4", "1.2.0.dev4"),
        ("10.20.30-rc.1+build.7", "10.20.30rc1+build.7"),
        ("1.0.0+exp-sha.5114f85", "1.0.0+exp.sha.5114f85"),
        ("1.2.0rc1", "1.2.0rc1"),  # a PEP 440 form we write passes as is
        # any other pre-release: X.Y.Z.dev0 with its identifiers (and the build's) as the local
        # label, lower case, `-` as `.`, numbers without leading zeros (PEP 440's normal form)
        ("1.2.0-0.3.7", "1.2.0.dev0+0.3.7"),
        ("1.2.0-x.7.z.92", "1.2.0.dev0+x.7.z.92"),
        ("1.2.0-foo", "1.2.0.dev0+foo"),
        ("1.2.0-foo.1", "1.2.0.dev0+foo.1"),
        ("1.2.0-rc.1.2", "1.2.0.dev0+rc.1.2"),
        ("1.2.0-rc.x", "1.2.0.dev0+rc.x"),
        ("1.0.0-x-y-z.--", "1.0.0.dev0+x.y.z"),
        ("1.0.0-alpha.beta+exp.sha.5114f85", "1.0.0.dev0+alpha.beta.exp.sha.5114f85"),
        ("1.0.0-alpha+001", "1.0.0a0+1"),
        ("1.0.0+21AF26D3----117B344092BD", "1.0.0+21af26d3.117b344092bd"),
    ],
)
def test_semver_maps_onto_its_pep440_form(given: str, pep440: str) -> None:
    assert semver.to_pep440(given) == pep440


# semver.org's own examples (spec items 9, 10 and 11)
SEMVER_ORG = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-0.3.7",
    "1.0.0-x.7.z.92",
    "1.0.0-x-y-z.--",
    "1.0.0-alpha+001",
    "1.0.0+20130313144700",
    "1.0.0-beta+exp.sha.5114f85",
    "1.0.0+21AF26D3----117B344092BD",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.2.0-foo",
]


@pytest.mark.parametrize("given", SEMVER_ORG)
def test_every_semver_has_a_valid_pep440_form_and_a_prerelease_sorts_below_its_release(
    given: str,
) -> None:
    pep440 = semver.to_pep440(given)
    assert str(Version(pep440)) == pep440  # valid, and already in normal form (as the wheel's)
    core = given.split("+")[0].split("-")[0]
    if "-" in given.split("+")[0]:
        assert Version(pep440) < Version(core)
        assert Version(pep440).is_prerelease
    else:
        assert Version(pep440).release == Version(core).release


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("1.2", "not a SemVer 2 version"),
        ("01.2.3", "not a SemVer 2 version"),
        ("1.2.3-01", "not a SemVer 2 version"),
        ("1.2.3-", "not a SemVer 2 version"),
        ("1.2.3+", "not a SemVer 2 version"),
        ("1.2.3-a..b", "not a SemVer 2 version"),
        ("1.2.3-a_b", "not a SemVer 2 version"),
    ],
)
def test_a_version_that_is_not_semver_is_refused_with_the_reason(bad: str, says: str) -> None:
    with pytest.raises(semver.VersionError, match=says) as err:
        semver.to_pep440(bad)
    assert "no leading zeros" in str(err.value) and "empty" in str(err.value)


@pytest.mark.parametrize(
    "v",
    [
        "1.2.0",
        "1.2.0-rc.1",
        "1.2.0-alpha.3",
        "1.2.0-dev.4+b.1",
        "1.2.0-foo",
        "1.2.0-x.7.z.92",
        "1.0.0-alpha+001",
    ],
)
def test_pep440_and_back_gives_a_semver_of_the_same_release(v: str) -> None:
    back = semver.to_semver(semver.to_pep440(v))
    assert semver.to_pep440(back) == semver.to_pep440(v)
    assert semver.SEMVER.match(back)


def test_the_version_is_written_only_in_pyproject() -> None:
    version = semver.project_version(ROOT)
    assert semver.to_pep440(semver.to_semver(version)) == version
    hits = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "src").rglob("*.py")
        if f'"{version}"' in p.read_text() or f"/{version} " in p.read_text()
    ]
    assert hits == []
    init = ast.parse((ROOT / "src/agentsandbox/__init__.py").read_text())
    assert "importlib.metadata" in ast.unparse(init)
    assert "hack/semver.py" in (ROOT / "Makefile").read_text()


def test_changelog_has_this_versions_section_with_upgrade_notes() -> None:
    version = semver.to_semver(semver.project_version(ROOT))
    notes = changelog.section((ROOT / "CHANGELOG.md").read_text(), version)
    assert notes.startswith(f"## [{version}]")
    assert "### Upgrade notes" in notes
    for topic in ("allowed-label-domains", "egress", "bounds", "[tracing]", "enableServiceLinks"):
        assert topic in notes, topic
    # the new conditions and reasons (tooling matching them must know): their own note
    conditions = [n for n in notes.split("\n- ") if n.startswith("**Conditions:**")]
    assert len(conditions) == 1, "no upgrade note on the new conditions"
    for reason in ("UnsupportedTarget", "SharedTemplate", "MembersNeverReady"):
        assert reason in conditions[0], reason


def test_changelog_section_ends_at_the_next_version_and_a_prerelease_takes_its_release() -> None:
    text = "# C\n\n## [1.1.0] - x\n\nnew\n\n## [1.0.0] - y\n\nold\n"
    assert changelog.section(text, "1.1.0") == "## [1.1.0] - x\n\nnew\n"
    assert changelog.section(text, "1.1.0-rc.2").startswith("## [1.1.0-rc.2] (from the notes")
    with pytest.raises(changelog.ChangelogError, match=r"no section '## \[2.0.0\]'"):
        changelog.section(text, "2.0.0")


def _deployment_image(manifest: str) -> str:
    docs = [d for d in yaml.load_all(manifest, Loader=release._Loader) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = [
        c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == release.CONTAINER
    ]
    return str(c["image"])


def test_install_yaml_is_the_kustomize_tree_with_the_image_pinned_by_digest() -> None:
    ref = release.image_reference("registry.example/ctl", "1.2.0-rc.1+b.7", DIGEST)
    assert ref == f"registry.example/ctl:1.2.0-rc.1_b.7@{DIGEST}"
    manifest = release.install_yaml(ROOT / "deploy", ref)
    assert _deployment_image(manifest) == ref
    kinds = [d["kind"] for d in yaml.load_all(manifest, Loader=release._Loader) if d]
    assert kinds.count("CustomResourceDefinition") == 5
    assert {"Namespace", "ClusterRole", "ServiceAccount", "Deployment", "Service"} <= set(kinds)
    # everything else is deploy/ as it is: only the image differs
    base = release.load_kustomize(ROOT / "deploy")
    ours = [d for d in yaml.load_all(manifest, Loader=release._Loader) if d]
    assert len(ours) == len(base)
    changed = [i for i, (a, b) in enumerate(zip(base, ours, strict=True)) if a != b]
    assert [ours[i]["kind"] for i in changed] == ["Deployment"]
    assert release.image_reference("r/c", "1.0.0", None) == "r/c:1.0.0"
    with pytest.raises(release.ReleaseError, match="not sha256"):
        release.image_reference("r/c", "1.0.0", "sha256:abc")


def test_the_default_image_repository_is_deploys() -> None:
    text = (ROOT / "deploy/controller.yaml").read_text()
    repo = release.default_image_repository(ROOT / "deploy")
    assert f"image: {repo}:" in text


def _files(dist: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dist.iterdir())}


def test_make_release_is_deterministic_pins_the_digest_and_ships_no_dev_code(
    tmp_path: Path,
) -> None:
    """Three builds of the wheel and sdist (about 15 s in all on a busy 2-core machine)."""
    one, two = tmp_path / "one", tmp_path / "two"
    for dist in (one, two):
        dist.mkdir()
        (dist / "image.digest").write_text(DIGEST + "\n")
        done = release.release(dist, None, "registry.example/ctl")
        assert done["pinned"]
    assert _files(one) == _files(two)
    version = semver.to_semver(semver.project_version(ROOT))
    assert _deployment_image((one / "install.yaml").read_text()) == (
        f"registry.example/ctl:{version}@{DIGEST}"
    )
    sums = (one / "SHA256SUMS").read_text().splitlines()
    assert [line.split("  ")[1] for line in sums] == sorted(set(_files(one)) - {"SHA256SUMS"})
    assert all(_files(one)[n] == h for h, n in (line.split("  ") for line in sums))
    assert (one / "RELEASE.md").read_text().startswith(f"## [{version}]")

    (wheel,) = one.glob("agentsandbox-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(whl.read(meta))
        (ep,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = whl.read(ep).decode()
    assert "agentsandbox/cli/controller.py" in names
    assert [n for n in names if n.startswith(DEV_ONLY_MODULES)] == []
    requires = metadata.get_all("Requires-Dist") or []
    dep_names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requires}
    assert dep_names & DEV_ONLY_DEPENDENCIES == set()
    unconditional = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requires if ";" not in r}
    assert unconditional == {"aiohttp", "orjson", "kubernetes-asyncio", "prometheus-client"}
    assert all("extra == 'tracing'" in r for r in requires if r.startswith("opentelemetry"))
    assert metadata.get_all("Provides-Extra") == ["tracing"]
    assert "agentsandbox-devcluster" not in scripts

    # VERSION=: a SemVer pre-release; the wheel takes its PEP 440 form, the image its tag
    three = tmp_path / "three"
    done = release.release(three, "0.2.0-rc.1", None)
    assert done["wheel_version"] == "0.2.0rc1"
    assert sorted(p.name for p in three.glob("agentsandbox-*")) == [
        "agentsandbox-0.2.0rc1-py3-none-any.whl",
        "agentsandbox-0.2.0rc1.tar.gz",
    ]
    assert _deployment_image((three / "install.yaml").read_text()).endswith(":0.2.0-rc.1")
    assert not done["pinned"]


def test_pyproject_runtime_dependencies_are_what_the_controller_imports() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    deps = {d.split(">")[0].split("<")[0].split("=")[0].lower() for d in project["dependencies"]}
    assert deps == {"aiohttp", "orjson", "kubernetes_asyncio", "prometheus-client"}
    assert "<37" in next(d for d in project["dependencies"] if d.startswith("kubernetes_asyncio"))
    assert set(project["optional-dependencies"]) == {"tracing"}


def test_the_version_comes_from_the_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """``agentsandbox.__version__`` is the installed distribution's version; a source tree that
    was never installed says ``0+unknown`` rather than failing to import."""
    import importlib
    import importlib.metadata

    import agentsandbox

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    try:
        monkeypatch.setattr(importlib.metadata, "version", lambda name: f"9.9.9+{name}")
        assert importlib.reload(agentsandbox).__version__ == "9.9.9+agentsandbox"
        monkeypatch.setattr(importlib.metadata, "version", not_installed)
        assert importlib.reload(agentsandbox).__version__ == "0+unknown"
    finally:
        monkeypatch.undo()
        importlib.reload(agentsandbox)
