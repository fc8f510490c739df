"""The release's install.yaml, as the API server takes it: a server-side dry run
(``kubectl apply --server-side --dry-run=server``, with kubectl's strict field validation) of
every object of the file against the session's local control plane, with the kubectl of the
control plane cache. Only its Namespace is made for real first (a dry run does not make it, and
the namespaced objects need it); the dry run changes nothing else."""

from __future__ import annotations

import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsandbox.devcluster.cluster import DevCluster


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_api_server_accepts_every_object_of_install_yaml_in_a_dry_run(
    cluster: DevCluster, release_dist: Path, tmp_path: Path
) -> None:
    install = release_dist / "install.yaml"
    docs = _docs(install)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "CustomResourceDefinition", "Deployment", "ServiceAccount"} <= kinds
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    assert len(namespaces) == 1
    ns_file = tmp_path / "namespace.yaml"
    ns_file.write_text(yaml.safe_dump(namespaces[0]))
    made = cluster.kubectl("apply", "--server-side", "-f", str(ns_file), check=False)
    assert made.returncode == 0, made.stderr
    namespace = namespaces[0]["metadata"]["name"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment['metadata']['name']}"

    proc = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",  # the session cluster's CRDs were made by another field manager
        "--dry-run=server",
        "--validate=strict",
        "-f",
        str(install),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # one line per object, each applied by the server in its dry run
    assert len(lines) == len(docs), proc.stdout
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines), lines
    with pytest.raises(urllib.error.HTTPError) as err:  # nothing was made
        cluster.api("GET", path)
    assert err.value.code == 404
