"""The release's packaged chart (``agent-sandbox-<version>.tgz``), rendered by the cached helm
(``helm template``): with upstream v1.0.1's own values.yaml as it comes it renders the objects
the chart's source directory renders with that file (so nothing is missing from the package),
its image at the release's version; with a customised values file the customisations show in
the objects. (Installing it over upstream's chart and back: tests/integration/test_helm_upstream.py,
which RELEASE_DIST points at this .tgz.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_helm import (
    CHART,
    KUBE_VERSION,
    RELEASE_NS,
    UPSTREAM_IMAGE,
    container,
    docs_of,
    helm,
)

RELEASE = "agent-sandbox"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def template(home: Path, chart: Path, values: Path, *extra: str) -> list[dict[str, Any]]:
    return docs_of(
        helm(
            "template",
            RELEASE,
            str(chart),
            *("--namespace", RELEASE_NS, "--kube-version", KUBE_VERSION, "--include-crds"),
            *("-f", str(values), *extra),
            home=home,
        ).stdout
    )


def objects(docs: list[dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs}


def deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    return dep


def test_upstreams_values_file_renders_every_object_at_the_release_version(
    home: Path, chart_tgz: Path, upstream: Path, release_version: str
) -> None:
    values = upstream / "helm" / "values.yaml"
    packaged = template(home, chart_tgz, values)
    source = template(home, CHART, values, "--set", f"image.tag={release_version}")
    assert objects(packaged) == objects(source)
    assert len(packaged) == len(source) > 10
    assert container(packaged)["image"] == f"{UPSTREAM_IMAGE}:{release_version}"
    for doc in packaged:
        labels = doc["metadata"].get("labels") or {}
        assert labels.get("helm.sh/chart") == f"agent-sandbox-{release_version}", doc["kind"]
        assert labels.get("app.kubernetes.io/version") == release_version, doc["kind"]


def test_a_customised_values_file_shows_in_the_objects(
    home: Path, chart_tgz: Path, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": "registry.example.com/asc", "digest": DIGEST},
                "replicaCount": 2,
                "namespace": {"name": "sandboxes-ctl"},
                "crds": {"install": False},
                "metrics": {"serviceMonitor": {"enabled": True}},
                "controller": {"kubeApiQps": 50, "extraArgs": ["--zap-log-level=debug"]},
                "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            }
        )
    )
    docs = template(home, chart_tgz, values)
    kinds = {d["kind"] for d in docs}
    assert "CustomResourceDefinition" not in kinds
    assert "ServiceMonitor" in kinds
    dep = deployment(docs)
    assert dep["metadata"]["namespace"] == "sandboxes-ctl"
    assert dep["spec"]["replicas"] == 2
    c = container(docs)
    assert c["image"] == f"registry.example.com/asc@{DIGEST}"
    assert "--kube-api-qps=50" in c["args"] and "--zap-log-level=debug" in c["args"], c["args"]
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    namespaced = [d for d in docs if d["metadata"].get("namespace")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"sandboxes-ctl"}
