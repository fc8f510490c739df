"""Pure parts of the local control plane: pod CIDRs, certificates, kwok stages."""

from __future__ import annotations

import ipaddress
from importlib import resources

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agentsandbox.devcluster import certs
from agentsandbox.devcluster.cluster import LIFECYCLE_LABEL, node_pod_cidr


def test_node_pod_cidrs_are_disjoint_20_bit_networks() -> None:
    nets = [ipaddress.ip_network(node_pod_cidr(i)) for i in range(64)]
    assert all(n.prefixlen == 20 for n in nets)
    for i, a in enumerate(nets):
        for b in nets[i + 1 :]:
            assert not a.overlaps(b)
    assert not any(n.overlaps(ipaddress.ip_network("10.0.0.0/24")) for n in nets)


def test_ten_nodes_hold_at_least_20000_pod_ips() -> None:
    total = sum(ipaddress.ip_network(node_pod_cidr(i)).num_addresses - 2 for i in range(10))
    assert total >= 20_000


def test_leaf_certificates_chain_to_the_ca_with_the_requested_identity() -> None:
    ca, ca_key = certs.make_ca()
    admin = certs.issue(ca, ca_key, "admin", org="system:masters")
    server = certs.issue(ca, ca_key, "apiserver", server=True, hosts=("127.0.0.1", "localhost"))
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    for pair in (admin, server):
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        assert cert.issuer == ca_cert.subject
        pub = ca_cert.public_key()
        assert isinstance(pub, ec.EllipticCurvePublicKey)
        cert.verify_directly_issued_by(ca_cert)
    admin_cert = x509.load_pem_x509_certificate(admin.cert_pem)
    orgs = admin_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    sans = x509.load_pem_x509_certificate(server.cert_pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert ipaddress.ip_address("127.0.0.1") in sans.value.get_values_for_type(x509.IPAddress)


def test_kwok_config_has_every_stage_the_tests_rely_on() -> None:
    text = resources.files("agentsandbox.devcluster").joinpath("kwok-stages.yaml").read_text()
    docs = list(yaml.safe_load_all(text))
    stages = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Stage"}
    assert set(stages) >= {
        "node-initialize",
        "pod-ready",
        "pod-running-never-ready",
        "pod-succeed",
        "pod-fail",
        "pod-delete",
    }
    assert docs[0]["kind"] == "KwokConfiguration"
    # ordinary pods must not match the never-ready stage, and vice versa
    ready_keys = [e["key"] for e in stages["pod-ready"]["spec"]["selector"]["matchExpressions"]]
    assert any(LIFECYCLE_LABEL in k for k in ready_keys)
