"""The label domains a claim's ``additionalPodMetadata`` labels may use: ``sandbox.users.io`` and
its subdomains unless the ``allowed-label-domains`` key of the optional ``agent-sandbox-config``
ConfigMap (mounted at /etc/sandbox-config/) lists others (docs/claims.md, the claim fields;
docs/deploy.md).

The configuration module is imported inside the tests that read a file: every test reads a file
under ``tmp_path``, never the real /etc/sandbox-config.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentsandbox.api.resources import SANDBOX_CLAIMS
from agentsandbox.controllers.claim.claimed_sandbox import validate_additional_metadata
from tests.unit.controllers.claim.test_controller import Harness, claim_v1beta1, setup_pool

ROOT = Path(__file__).resolve().parents[4]
DEFAULT = ("sandbox.users.io",)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "allowed-label-domains"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "key",
    [
        "example.com/tier",  # any other domain
        "users.io/x",  # a parent of the default domain
        "sandbox.users.io.evil.com/x",  # the default domain as a mere prefix
        "evilsandbox.users.io/x",  # not a subdomain: no dot before it
    ],
)
def test_a_claim_label_outside_the_default_allowed_domains_is_refused(key: str) -> None:
    """Claim review #10: with no configuration a claim's labels must be in ``sandbox.users.io``
    or a subdomain of it: a label of any other domain could opt the sandbox pod into the
    Services and NetworkPolicies of the namespace that select it. (Unprefixed labels were
    refused already: test_mesh_runtime_and_selector_metadata_is_refused, in
    test_claim_input_bounds.py.)"""
    problem = validate_additional_metadata({"labels": {key: "v"}})
    assert problem is not None, f"{key} accepted"
    assert "allowed label domains" in problem and f'"{key}"' in problem, problem
    assert '"sandbox.users.io"' in problem, problem


def test_the_default_domain_and_its_subdomains_are_accepted_and_annotations_are_not_bound() -> None:
    """Claim review #10, the other side: ``sandbox.users.io/x`` and ``a.sandbox.users.io/x``
    pass; annotations select nothing, so other (unrestricted) domains stay open to them."""
    extra = {
        "labels": {"sandbox.users.io/x": "a", "a.sandbox.users.io/x": "b"},
        "annotations": {"example.com/owner": "c", "note": "d"},
    }
    assert validate_additional_metadata(extra) is None


@pytest.mark.parametrize(
    ("text", "domains"),
    [
        ("example.com", ("example.com",)),
        (
            " Example.COM ,team.example.org\nother.io\r\n",
            ("example.com", "team.example.org", "other.io"),
        ),
        ("a.io,,a.io\n\n", ("a.io",)),
        ("", DEFAULT),
        (" ,\n \r\n", DEFAULT),
    ],
)
def test_the_allowed_label_domains_file_is_comma_or_newline_separated(
    tmp_path: Path, text: str, domains: tuple[str, ...]
) -> None:
    """Claim review #10: the file is read as upstream v1.0.1 reads it: entries separated by
    commas or line breaks, blanks around them dropped, lower-cased; no entry means the
    default."""
    from agentsandbox.controllers.claim.config import load_label_domains

    assert load_label_domains(write(tmp_path, text)) == domains


def test_a_missing_allowed_label_domains_file_means_the_default(tmp_path: Path) -> None:
    """Claim review #10: the ConfigMap is optional, and so is its key: no file, the default."""
    from agentsandbox.controllers.claim.config import DEFAULT_LABEL_DOMAINS, load_label_domains

    assert DEFAULT_LABEL_DOMAINS == DEFAULT
    assert load_label_domains(tmp_path / "allowed-label-domains") == DEFAULT


def test_configured_label_domains_replace_the_default(tmp_path: Path) -> None:
    """Claim review #10: a configured list is the whole list (the default is not added)."""
    from agentsandbox.controllers.claim.config import load_label_domains

    domains = load_label_domains(write(tmp_path, "example.com\n"))
    assert validate_additional_metadata({"labels": {"tier.example.com/x": "v"}}, domains) is None
    problem = validate_additional_metadata({"labels": {"sandbox.users.io/x": "v"}}, domains)
    assert problem is not None and '"example.com"' in problem, problem


async def test_a_claim_label_outside_the_default_domains_is_invalid_metadata_and_no_sandbox() -> (
    None
):
    """Claim review #10 through the reconciler: ``InvalidMetadata``, terminal, no sandbox."""
    h = Harness()
    setup_pool(h)
    extra = {"labels": {"example.com/tier": "gold"}}
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    assert await h.reconcile() is None, "terminal: no requeue"
    assert h.ready()["reason"] == "InvalidMetadata", h.ready()
    assert "example.com" in h.ready()["message"]
    assert h.owned_by(h.claim()) == []


async def test_a_claim_label_of_a_configured_domain_reaches_the_sandbox(tmp_path: Path) -> None:
    """Claim review #10 through the reconciler, configured: the provider's ``label_domains``
    (what the controller read from the file at start) admit ``example.com``."""
    from agentsandbox.controllers.claim.config import load_label_domains

    h = Harness()
    h.r.writer.label_domains = load_label_domains(write(tmp_path, "sandbox.users.io,example.com"))
    setup_pool(h)
    extra = {"labels": {"example.com/tier": "gold"}}
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    await h.reconcile()
    assert h.ready()["reason"] == "SandboxNotReady", h.ready()
    meta = h.sandbox("claim")["spec"]["podTemplate"]["metadata"]
    assert meta["labels"]["example.com/tier"] == "gold"


def test_the_controller_reads_the_label_domains_file_at_start(tmp_path: Path) -> None:
    """Claim review #10, the wiring: start-up reads the file it is given (in a pod, the mounted
    ConfigMap key) and hands the domains to the claim controller's provider; a missing file is
    the default; a file that cannot be read stops the start (exit 1), as upstream."""
    from agentsandbox.cli.controller import StartupError, claim_label_domains, register_controllers
    from agentsandbox.controllers.claim.controller import CONTROLLER_NAME
    from tests.unit.cli.test_workers_in_flight import Host, options

    assert claim_label_domains(write(tmp_path, "example.com,example.org")) == (
        "example.com",
        "example.org",
    )
    assert claim_label_domains(tmp_path / "absent") == DEFAULT
    with pytest.raises(StartupError, match=str(tmp_path)):
        claim_label_domains(tmp_path)  # a directory: not readable as a file
    host = Host()
    register_controllers(host, options("--extensions"), label_domains=("example.com",))
    reconciler = host.controllers[CONTROLLER_NAME]._reconcile.__self__  # type: ignore[attr-defined]
    assert reconciler.writer.label_domains == ("example.com",)


def test_the_install_mounts_the_optional_config_map_where_the_controller_reads() -> None:
    """Claim review #10, the kustomize install (deploy/controller.yaml): the
    ``agent-sandbox-config`` ConfigMap is mounted read-only and optionally (the pod starts
    without it) on the directory whose ``allowed-label-domains`` file the controller reads. The
    chart renders the same pod (tests/integration/test_helm.py, which also checks the mount)."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "controller.yaml").read_text()) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/sandbox-config"]
    assert len(mounts) == 1, container["volumeMounts"]
    assert mounts[0]["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounts[0]["name"]]
    assert volume["configMap"] == {"name": "agent-sandbox-config", "optional": True}
    from agentsandbox.controllers.claim.config import LABEL_DOMAINS_FILE

    assert str(LABEL_DOMAINS_FILE) == "/etc/sandbox-config/allowed-label-domains"
