"""Connection settings without a cluster: the TLS context a Configuration asks for, the
Authorization header, a bad server address, and where load_config looks (flag, $KUBECONFIG,
in-cluster, ~/.kube/config) — on kubeconfig files written to a temporary directory."""

from __future__ import annotations

import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsandbox.devcluster import certs
from agentsandbox.kube import config as kc
from agentsandbox.kube.config import (
    AuthProvider,
    ConfigError,
    build_ssl_context,
    from_configuration,
    load_config,
    load_incluster_config,
    load_kubeconfig,
)


def configuration(**fields: Any) -> Any:
    conf = kc.Configuration()
    conf.host = "https://127.0.0.1:6443"
    for key, value in fields.items():
        setattr(conf, key, value)
    return conf


def write_kubeconfig(path: Path, server: str, user: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


# ------------------------------------------------------------------------------------ TLS
def test_plain_http_has_no_tls_context() -> None:
    assert build_ssl_context(configuration(host="http://127.0.0.1:8080")) is None


def test_verification_can_be_switched_off_or_relaxed_as_asked() -> None:
    verified = build_ssl_context(configuration())
    assert verified is not None and verified.check_hostname
    assert verified.verify_mode == ssl.CERT_REQUIRED
    insecure = build_ssl_context(configuration(verify_ssl=False))
    assert insecure is not None and not insecure.check_hostname
    assert insecure.verify_mode == ssl.CERT_NONE
    no_hostname = build_ssl_context(configuration(assert_hostname=False))
    assert no_hostname is not None and not no_hostname.check_hostname
    assert no_hostname.verify_mode == ssl.CERT_REQUIRED
    lenient = build_ssl_context(configuration(disable_strict_ssl_verification=True))
    assert lenient is not None and not lenient.verify_flags & ssl.VERIFY_X509_STRICT


def test_unreadable_tls_material_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load TLS material"):
        build_ssl_context(configuration(ssl_ca_cert=str(tmp_path / "missing-ca.crt")))
    bogus = tmp_path / "ca.crt"
    bogus.write_text("not a certificate")
    with pytest.raises(ConfigError, match="cannot load TLS material"):
        build_ssl_context(configuration(ssl_ca_cert=str(bogus)))


def test_a_server_address_that_is_no_http_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="is not an http"):
        from_configuration(configuration(host="127.0.0.1:6443"))
    cfg = from_configuration(configuration(host="https://example.test:6443/"))
    assert cfg.host == "https://example.test:6443" and cfg.proxy is None


# ------------------------------------------------------------------------------------ auth
async def test_the_authorization_header_from_a_token_basic_auth_or_nothing() -> None:
    token = configuration(api_key={"BearerToken": "abc"}, api_key_prefix={"BearerToken": "Bearer"})
    assert await AuthProvider(token).header() == "Bearer abc"
    bare = configuration(api_key={"BearerToken": "Bearer xyz"})
    assert await AuthProvider(bare).header() == "Bearer xyz"
    basic = configuration(username="admin", password="secret")
    assert await AuthProvider(basic).header() == "Basic YWRtaW46c2VjcmV0"
    assert await AuthProvider(configuration()).header() is None


async def test_a_401_refreshes_only_when_there_is_a_way_to() -> None:
    assert not await AuthProvider(configuration()).unauthorized()
    refreshed: list[bool] = []

    async def refresh() -> None:
        refreshed.append(True)

    assert await AuthProvider(configuration(), on_unauthorized=refresh).unauthorized()
    assert refreshed == [True]


async def test_an_async_refresh_hook_runs_before_the_header_is_read() -> None:
    conf = configuration(api_key={"BearerToken": "old"})

    async def rotate() -> None:
        conf.api_key["BearerToken"] = "new"

    conf.refresh_api_key_hook = lambda _c: rotate()
    assert await AuthProvider(conf).header() == "new"


# ------------------------------------------------------------------------------------ loading
async def test_a_kubeconfig_with_a_token_user_loads(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", {"token": "t0k"})
    cfg = await load_kubeconfig(str(path))
    assert cfg.host == "https://127.0.0.1:6443"
    assert await cfg.auth.header() == "Bearer t0k"
    assert not await cfg.auth.unauthorized()  # a static token: nothing to refresh


async def test_a_missing_or_broken_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        await load_kubeconfig(str(tmp_path / "nope"))
    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    with pytest.raises(ConfigError, match="cannot load kubeconfig"):
        await load_kubeconfig(str(broken))


async def test_load_config_takes_the_flag_then_kubeconfig_then_in_cluster_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = write_kubeconfig(tmp_path / "flag", "https://flag.test", {"token": "a"})
    env = write_kubeconfig(tmp_path / "env", "https://env.test", {"token": "b"})
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    write_kubeconfig(home / ".kube" / "config", "https://home.test", {"token": "c"})
    token = tmp_path / "token"
    token.write_text("sa-token")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", str(env))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert (await load_config(str(flag), token_filename=str(token))).host == "https://flag.test"
    assert (await load_config(token_filename=str(token))).host == "https://env.test"
    monkeypatch.delenv("KUBECONFIG")
    # in a pod: the service account (its CA file is missing here, so the loader says so)
    with pytest.raises(ConfigError, match="cannot load in-cluster config"):
        await load_config(token_filename=str(token))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert (await load_config(token_filename=str(token))).host == "https://home.test"
    (home / ".kube" / "config").unlink()
    with pytest.raises(ConfigError, match="no Kubernetes configuration found"):
        await load_config(token_filename=str(token))


def test_a_client_certificate_is_loaded_into_the_context(tmp_path: Path) -> None:
    ca, ca_key = certs.make_ca()
    client = certs.issue(ca, ca_key, "admin", org="system:masters")
    ca_file = certs.write(tmp_path / "ca.crt", ca.cert_pem)
    cert = certs.write(tmp_path / "client.crt", client.cert_pem)
    key = certs.write(tmp_path / "client.key", client.key_pem, private=True)
    ctx = build_ssl_context(
        configuration(ssl_ca_cert=str(ca_file), cert_file=str(cert), key_file=str(key))
    )
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="cannot load TLS material"):
        build_ssl_context(configuration(cert_file=str(cert), key_file=str(ca_file)))


async def test_in_cluster_settings_reread_the_token_after_a_401(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, _ = certs.make_ca()
    ca_file = certs.write(tmp_path / "ca.crt", ca.cert_pem)
    token = tmp_path / "token"
    token.write_text("first")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = load_incluster_config(token_filename=str(token), cert_filename=str(ca_file))
    assert cfg.host == "https://10.0.0.1:443"
    assert await cfg.auth.header() == "Bearer first"
    token.write_text("rotated")
    assert await cfg.auth.header() == "Bearer first"  # re-read once a minute by the library
    assert await cfg.auth.unauthorized()  # after a 401: at the next request
    assert await cfg.auth.header() == "Bearer rotated"


EXEC_PLUGIN = """
import json, sys, datetime, pathlib
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
now = datetime.datetime.now(datetime.timezone.utc)
expires = now + datetime.timedelta(seconds=int(sys.argv[2]))
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": f"exec-{n}", "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
}))
"""


async def _exec_user_config(tmp_path: Path, lifetime: int) -> tuple[Any, Path]:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)
    count = tmp_path / f"count-{lifetime}"
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin), str(count), str(lifetime)],
            "interactiveMode": "Never",
        }
    }
    path = write_kubeconfig(tmp_path / f"kc-{lifetime}", "https://127.0.0.1:6443", user)
    return await load_kubeconfig(str(path)), count


async def test_an_exec_plugin_token_is_kept_until_a_401(tmp_path: Path) -> None:
    cfg, count = await _exec_user_config(tmp_path, lifetime=3600)
    assert count.read_text() == "1"  # run once by the loader
    assert await cfg.auth.header() == "Bearer exec-1"
    assert await cfg.auth.header() == "Bearer exec-1"  # an hour left: not run again
    assert await cfg.auth.unauthorized()
    assert await cfg.auth.header() == "Bearer exec-2" and count.read_text() == "2"


async def test_an_exec_plugin_token_near_its_expiry_is_renewed_before_a_request(
    tmp_path: Path,
) -> None:
    """Within 30 s of the credential's expirationTimestamp the plugin runs again before the
    request (here it always says 10 s), so no request goes out with a token about to expire."""
    cfg, count = await _exec_user_config(tmp_path, lifetime=10)
    assert count.read_text() == "1"
    assert await cfg.auth.header() == "Bearer exec-2"
    assert await cfg.auth.header() == "Bearer exec-3"
