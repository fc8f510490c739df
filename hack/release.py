"""``make release``: the release's files in ``dist/``, the same bytes on every run; commits nothing.

- ``agentsandbox-<pep440>-py3-none-any.whl`` and ``agentsandbox-<pep440>.tar.gz``, built from a
  copy of the sources with the version set (``--version``, else pyproject.toml's) and
  ``SOURCE_DATE_EPOCH`` set to the last commit's time (hatchling then fixes every timestamp);
- ``install.yaml``: the kustomize tree under deploy/ (CRDs, namespace, RBAC, the controller's
  Deployment and Service) as one file, the controller's image set to ``--image`` (the
  repository) and pinned by digest when ``dist/image.digest`` is there (the image target writes
  it), else by the version's tag;
- ``RELEASE.md``: the version's section of CHANGELOG.md (hack/changelog.py);
- ``SHA256SUMS``: every other file in ``dist/`` (so also what the image and chart targets put
  there before this runs), ``sha256sum -c`` format, sorted by name.

Only the files this script writes are replaced; others in ``dist/`` are left (and summed).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

# libyaml's loader and dumper when PyYAML has them (the CRDs are large), the same output either way
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from changelog import ChangelogError, section  # noqa: E402
from semver import VersionError, project_version, to_pep440, to_semver  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONTAINER = "agent-sandbox-controller"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# what the sdist holds and the wheel is built from (pyproject.toml: tool.hatch.build.targets.sdist)
SOURCES = ("pyproject.toml", "README.md", "CHANGELOG.md", "src")


class ReleaseError(RuntimeError):
    pass


def default_image_repository(deploy: Path = ROOT / "deploy") -> str:
    """The repository of the controller's image in deploy/controller.yaml (its tag dropped)."""
    image = _controller(load_kustomize(deploy))["image"]
    return str(image).split("@", 1)[0].rsplit(":", 1)[0]


def load_kustomize(deploy: Path) -> list[dict[str, Any]]:
    """The objects of ``deploy/kustomization.yaml``'s resources, in its order. Only a plain list
    of resource files is understood; anything more (patches, generators, transformers) is an
    error rather than a silently different manifest."""
    kustomization = yaml.load((deploy / "kustomization.yaml").read_text(), Loader=_Loader)
    extra = set(kustomization) - {"apiVersion", "kind", "resources"}
    if extra:
        raise ReleaseError(f"deploy/kustomization.yaml: {sorted(extra)} not supported here")
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        path = deploy / name
        if not path.is_file():
            raise ReleaseError(f"deploy/kustomization.yaml: {name} is not a file")
        docs.extend(d for d in yaml.load_all(path.read_text(), Loader=_Loader) if d)
    return docs


def _controller(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    if len(deployments) != 1:
        raise ReleaseError(f"expected one Deployment in deploy/, found {len(deployments)}")
    containers = deployments[0]["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == CONTAINER]
    return container  # type: ignore[no-any-return]


def image_reference(repository: str, version: str, digest: str | None) -> str:
    """``repo:tag@sha256:…`` when the digest is known (the digest is what pulls), else
    ``repo:tag``. A SemVer build suffix ``+…`` is not allowed in a tag: it becomes ``_``."""
    tag = version.replace("+", "_")
    if digest is None:
        return f"{repository}:{tag}"
    if not DIGEST.match(digest):
        raise ReleaseError(f"image digest {digest!r} is not sha256:<64 hex digits>")
    return f"{repository}:{tag}@{digest}"


def install_yaml(deploy: Path, image: str) -> str:
    docs = load_kustomize(deploy)
    _controller(docs)["image"] = image
    head = (
        "# agentsandbox install manifest: kubectl apply --server-side -f install.yaml\n"
        "# (made by `make release` from deploy/; CRDs, namespace, RBAC, controller)\n"
    )
    body = "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=1000) for d in docs)
    return head + "---\n" + body


def read_digest(dist: Path) -> str | None:
    path = dist / "image.digest"
    return path.read_text().strip() if path.is_file() else None


def source_date_epoch(root: Path = ROOT) -> str:
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env:
        return env
    proc = subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=root, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ReleaseError("no SOURCE_DATE_EPOCH and no git commit to take it from")
    return proc.stdout.strip()


def set_version(pyproject: Path, pep440: str) -> None:
    text = pyproject.read_text()
    new, n = re.subn(r'(?m)^version = "[^"]*"$', f'version = "{pep440}"', text, count=1)
    if n != 1:
        raise ReleaseError('pyproject.toml: no `version = "…"` line')
    pyproject.write_text(new)


def build_python(dist: Path, pep440: str, epoch: str, root: Path = ROOT) -> list[Path]:
    """Wheel and sdist of a copy of the sources with the version set."""
    with tempfile.TemporaryDirectory(prefix="agentsandbox-release-") as tmp:
        src = Path(tmp) / "src-tree"
        src.mkdir()
        for name in SOURCES:
            path = root / name
            if path.is_dir():
                shutil.copytree(
                    path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                )
            else:
                shutil.copy2(path, src / name)
        set_version(src / "pyproject.toml", pep440)
        out = Path(tmp) / "out"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env["SOURCE_DATE_EPOCH"] = epoch
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ReleaseError(f"python -m build failed:\n{proc.stdout[-2000:]}{proc.stderr}")
        made = []
        for path in sorted(out.iterdir()):
            shutil.copy2(path, dist / path.name)
            made.append(dist / path.name)
    return made


def sha256sums(dist: Path) -> str:
    lines = []
    for path in sorted(p for p in dist.iterdir() if p.is_file() and p.name != "SHA256SUMS"):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}")
    return "\n".join(lines) + "\n"


def release(
    dist: Path, version: str | None, image: str | None, root: Path = ROOT
) -> dict[str, Any]:
    semver = to_semver(version or project_version(root))
    pep440 = to_pep440(semver)
    notes = section((root / "CHANGELOG.md").read_text(), semver)
    dist.mkdir(parents=True, exist_ok=True)
    for old in [*dist.glob("agentsandbox-*.whl"), *dist.glob("agentsandbox-*.tar.gz")]:
        old.unlink()
    build_python(dist, pep440, source_date_epoch(root), root)
    digest = read_digest(dist)
    reference = image_reference(image or default_image_repository(root / "deploy"), semver, digest)
    (dist / "install.yaml").write_text(install_yaml(root / "deploy", reference))
    (dist / "RELEASE.md").write_text(notes)
    (dist / "SHA256SUMS").write_text(sha256sums(dist))
    return {"version": semver, "wheel_version": pep440, "image": reference, "pinned": bool(digest)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--version", help="a SemVer 2 version (default: pyproject.toml's)")
    parser.add_argument("--image", help="the image repository (default: deploy/'s)")
    args = parser.parse_args(argv)
    try:
        done = release(args.dist, args.version or None, args.image or None)
    except (ReleaseError, VersionError, ChangelogError) as err:
        print(f"make release: {err}", file=sys.stderr)
        return 1
    print(
        f"dist/: version {done['version']} (wheel {done['wheel_version']}), image {done['image']}"
    )
    if not done["pinned"]:
        print(
            "warning: no dist/image.digest, so install.yaml names the image by tag only "
            "(the image target writes the digest)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
