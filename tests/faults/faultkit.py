"""The fault injectors: restart kube-apiserver (keeping etcd), loopback proxies in front of the
apiserver or etcd (a TCP one, and an HTTP one that fails chosen requests), a controller user
that is not ``system:masters`` (so API priority and fairness applies to it), an admission
policy that refuses chosen writes while a namespace label is on, the controller's own metrics
and the audit log."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agentsandbox.devcluster import certs
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.process import Component
from tests.polling import eventually_sync, stays_sync

HERE = Path(__file__).parent
SHORT_LEASE = (sys.executable, str(HERE / "short_lease_controller.py"))


# ------------------------------------------------------------------------------------ apiserver
def delete_namespace(cluster: DevCluster, name: str, within: float = 120.0) -> None:
    """DELETE the namespace and wait until it is gone. The namespace controller deletes its
    objects a collection at a time; a test after it that kills kube-apiserver would cut such a
    request short, and the deletions it had made would have no audit record (the request was
    never answered), so the claim history could not tell who made them."""
    with contextlib.suppress(urllib.error.HTTPError):  # 404: gone already
        cluster.api("DELETE", f"/api/v1/namespaces/{name}")

    def gone() -> bool:
        try:
            cluster.api("GET", f"/api/v1/namespaces/{name}")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return True
            raise
        return False

    eventually_sync(gone, within=within, what=f"namespace {name} deleted", interval=0.2)


def restart_apiserver(
    cluster: DevCluster,
    *,
    etcd_servers: str | None = None,
    extra: Sequence[str] = (),
    down: float = 0.0,
    within: float = 90.0,
) -> float:
    """SIGKILL kube-apiserver (in-flight requests die, committed writes stay in etcd), wait
    ``down`` seconds, start it again on the same port and certificates (``etcd_servers`` and
    ``extra`` flags change its command line) and wait for /readyz; returns seconds it was down.
    etcd and the other components keep running."""
    comp = cluster.components["kube-apiserver"]
    assert comp.proc is not None, "only a cluster this process started"
    killed = time.monotonic()
    os.kill(comp.proc.pid, signal.SIGKILL)
    comp.proc.wait(10)
    stays_sync(lambda: not comp.alive(), for_=down, what="kube-apiserver down")
    argv = cluster._argv("kube-apiserver")
    if etcd_servers is not None:
        argv = [
            f"--etcd-servers={etcd_servers}" if a.startswith("--etcd-servers=") else a for a in argv
        ]
    argv += list(extra)
    new = Component("kube-apiserver", argv, comp.log, comp.health)
    with comp.log.open("ab") as out:
        out.write(f"\n--- restarted by a fault test: {' '.join(argv[1:])} ---\n".encode())
        out.flush()
        new.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cluster.workdir,
            start_new_session=True,
        )
    cluster.components["kube-apiserver"] = new

    def ready() -> bool:
        assert new.alive(), f"kube-apiserver exited after a restart; see {comp.log}"
        return new.health()

    eventually_sync(ready, within=within, what="kube-apiserver ready after a restart")
    return time.monotonic() - killed


def wait_pods_served(cluster: DevCluster, *, within: float = 120.0) -> float:
    """A probe pod in ``default`` scheduled, started by kwok and Ready, then deleted; returns the
    seconds it took. After kube-apiserver restarts, kube-scheduler and kwok re-establish their
    watches with back-off: a test that starts before they do would blame the controller for
    pods nobody serves yet."""
    t0 = time.monotonic()
    name = f"probe-{uuid.uuid4().hex[:8]}"
    path = "/api/v1/namespaces/default/pods"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "example/probe:1"}]},
    }

    def created() -> bool:
        try:
            cluster.api("POST", path, pod)
        except urllib.error.HTTPError as e:  # 409: an earlier try was applied
            return e.code == 409
        return True

    def ready() -> bool:
        got = cluster.api("GET", f"{path}/{name}")
        conds = (got.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    # the restarted apiserver may still drop a connection or two
    eventually_sync(created, within=within, what="a probe pod created", ignoring=OSError)
    eventually_sync(
        ready,
        within=within,
        what="a probe pod scheduled and Ready (scheduler, kwok)",
        ignoring=OSError,
    )
    cluster.api("DELETE", f"{path}/{name}", {"gracePeriodSeconds": 0})
    return time.monotonic() - t0


# ------------------------------------------------------------------------------------ proxies
@dataclass
class ProxyProcess:
    popen: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url_https(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def url_http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pause(self) -> None:
        """Cut every connection and refuse new ones until ``resume``."""
        os.kill(self.popen.pid, signal.SIGUSR1)

    def resume(self) -> None:
        os.kill(self.popen.pid, signal.SIGUSR2)

    def lose_answers(self) -> None:
        """For one second every request still arrives and no answer comes back; then every
        connection is cut (and new ones refused for ``refuse_after_loss`` seconds)."""
        os.kill(self.popen.pid, signal.SIGHUP)

    def set_faults(self, *rules: dict[str, object]) -> list[dict[str, object]]:
        """(An HTTP proxy) replace its fault rules (tests/faults/proxy.py says what they hold);
        returns them as the proxy now has them."""
        return self._faults("PUT", json.dumps(list(rules)).encode())

    def faults(self) -> list[dict[str, object]]:
        """(An HTTP proxy) its fault rules, each with ``hits``: how many requests it failed."""
        return self._faults("GET", None)

    def requests(self) -> list[dict[str, object]]:
        """(An HTTP proxy) every request it received, in order: ``at`` (its monotonic clock on
        arrival), ``method``, ``path``, ``query``, ``status`` (the answer's code, 0 until known)."""
        answer: list[dict[str, object]] = self._control("GET", "/_requests", None)
        return answer

    def end_streams(self, path: str) -> int:
        """(An HTTP proxy) end the streamed answers (watches) open on paths matching the regular
        expression ``path``, cleanly, as the server's watch timeout does; returns how many."""
        query = urllib.parse.urlencode({"path": path})
        return int(self._control("POST", f"/_end?{query}", b""))

    def _faults(self, method: str, body: bytes | None) -> list[dict[str, object]]:
        answer: list[dict[str, object]] = self._control(method, "/_faults", body)
        return answer

    def _control(self, method: str, path: str, body: bytes | None) -> Any:
        req = urllib.request.Request(f"{self.url_http}{path}", data=body, method=method)
        with urllib.request.urlopen(req, timeout=5) as resp:  # loopback
            return json.loads(resp.read())

    def counters(self) -> dict[str, int]:
        """accepted / resets / bytes / dropped (answer bytes lost), once the proxy has stopped."""
        m = re.search(
            r"accepted=(\d+) resets=(\d+) bytes=(\d+) dropped=(\d+)", self.log.read_text()
        )
        assert m, self.log.read_text()
        return {k: int(m[i + 1]) for i, k in enumerate(("accepted", "resets", "bytes", "dropped"))}


@contextlib.contextmanager
def proxy(
    target: str,
    workdir: Path,
    *,
    delay_ms: str = "0-0",
    reset_every: float = 0.0,
    refuse_after_loss: float = 0.0,
    http_pki: Path | None = None,
) -> Iterator[ProxyProcess]:
    """tests/faults/proxy.py in its own process in front of ``target`` (host:port); with
    ``http_pki`` (a cluster's ``pki`` directory) the HTTP proxy, in front of kube-apiserver
    (``url_http``; ``set_faults``), else the TCP one."""
    port_file = workdir / f"proxy-{time.monotonic_ns()}.port"
    log = port_file.with_suffix(".log")
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "proxy.py"),
                f"--target={target}",
                f"--port-file={port_file}",
                f"--delay-ms={delay_ms}",
                f"--reset-every={reset_every}",
                f"--refuse-after-loss={refuse_after_loss}",
                *([f"--http-pki={http_pki}"] if http_pki is not None else []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def started() -> bool:
            assert popen.poll() is None, log.read_text()
            return port_file.exists()

        eventually_sync(started, within=15, what="the proxy started", interval=0.02)
        yield ProxyProcess(popen, int(port_file.read_text()), log)
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(5)


def kubeconfig_via(
    cluster: DevCluster, server: str, into: Path, *, user: str | None = None
) -> Path:
    """A copy of the cluster's kubeconfig whose server is ``server`` (a proxy; the serving
    certificate names 127.0.0.1, so TLS still verifies) and, with ``user``, whose client
    certificate is a fresh one for that user with no groups (see ``grant_cluster_admin``)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = server
    if user is not None:
        ca = certs.KeyPair((cluster.pki / "ca.crt").read_bytes(), b"")
        key = serialization.load_pem_private_key((cluster.pki / "ca.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        pair = certs.issue(ca, key, user)

        config["users"][0]["user"] = {
            "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
            "client-key-data": base64.b64encode(pair.key_pem).decode(),
        }
    path = into / f"kubeconfig-{time.monotonic_ns()}"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def grant_cluster_admin(cluster: DevCluster, user: str) -> None:
    cluster.api(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"faults-{user}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


# ------------------------------------------------------------------------------------ admission
FLAG_ON = "on"


@contextlib.contextmanager
def admission_refusal(
    cluster: DevCluster,
    name: str,
    *,
    rules: Sequence[dict[str, object]],
    refuse_when: str,
    message: str,
    flag: str,
) -> Iterator[None]:
    """A ValidatingAdmissionPolicy and its binding on the cluster's own kube-apiserver (no
    webhook server): a request that ``rules`` (``resourceRules``) match is refused, 403
    Forbidden with ``message``, when the CEL expression ``refuse_when`` holds, and only in the
    namespaces labelled ``flag=on`` (``namespace_flag`` turns it on and off). Both are deleted
    at exit. kube-apiserver sees the policy, the binding and namespace labels a moment after
    they are written: a test that needs the refusal in force (or gone) waits until a dry-run
    write is refused (or let through)."""
    group = "/apis/admissionregistration.k8s.io/v1"
    cluster.api(
        "POST",
        f"{group}/validatingadmissionpolicies",
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": list(rules)},
                "validations": [
                    {"expression": f"!({refuse_when})", "message": message, "reason": "Forbidden"}
                ],
            },
        },
    )
    try:
        cluster.api(
            "POST",
            f"{group}/validatingadmissionpolicybindings",
            {
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {flag: FLAG_ON}}},
                },
            },
        )
        yield
    finally:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(OSError):
                cluster.api("DELETE", f"{group}/{kind}/{name}")


def namespace_flag(cluster: DevCluster, ns: str, flag: str, on: bool) -> None:
    """Label namespace ``ns`` ``flag=on`` (``on``), or take the label off."""
    obj = cluster.api("GET", f"/api/v1/namespaces/{ns}")
    labels = obj["metadata"].setdefault("labels", {})
    if on:
        labels[flag] = FLAG_ON
    else:
        labels.pop(flag, None)
    cluster.api("PUT", f"/api/v1/namespaces/{ns}", obj)


# ------------------------------------------------------------------------------------ metrics
def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:  # loopback
        return str(resp.read().decode())


def metric_sum(text: str, metric: str, **labels: str) -> float:
    """The sum of every sample of ``metric`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(metric + "{") and not line.startswith(metric + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


# ------------------------------------------------------------------------------------ audit
def audit_creates(cluster: DevCluster, ns: str, resource: str = "sandboxes") -> dict[int, int]:
    """HTTP status -> count of the creates of ``resource`` in ``ns`` the audit log holds
    (``--audit-log-mode=blocking``: an answered request is logged before its answer; a request
    in flight when kube-apiserver was killed may be missing)."""
    return audit_writes(cluster, ns, "create", resource, dry_run=True)


def audit_writes(
    cluster: DevCluster,
    ns: str,
    verb: str,
    resource: str = "sandboxes",
    *,
    user_agent: str = "",
    dry_run: bool = False,
) -> dict[int, int]:
    """HTTP status -> count of the ``verb`` requests (create, patch, update...) on ``resource``
    in ``ns`` the audit log holds, of clients whose User-Agent starts with ``user_agent``;
    dry runs only with ``dry_run``. As ``audit_creates``, the counts may miss a request in
    flight when kube-apiserver was killed."""
    out: dict[int, int] = {}
    path = cluster.logs / "audit.log"
    with path.open("rb") as f:
        for line in f:
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                ref = ev.get("objectRef") or {}
                if (
                    ev.get("stage") == "ResponseComplete"
                    and ev.get("verb") == verb
                    and ref.get("resource") == resource
                    and not ref.get("subresource")
                    and ref.get("namespace") == ns
                    and str(ev.get("userAgent") or "").startswith(user_agent)
                    and (dry_run or "dryRun=" not in str(ev.get("requestURI") or ""))
                ):
                    code = int((ev.get("responseStatus") or {}).get("code") or 0)
                    out[code] = out.get(code, 0) + 1
    return out


def unanswered_creates(log: Path, ns: str, resource: str = "sandboxes") -> int:
    """How many creates of ``resource`` in ``ns`` the controller logged as failed by a broken
    connection after the request was sent (maybe done, answer lost). A connect that failed
    (``ClientConnectorError``: nothing was sent) does not count."""
    needle = f"[POST /apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/{resource}]"
    count = 0
    for line in log.read_text(errors="replace").splitlines():
        for part in line.split("connection error: ")[1:]:
            head, found, _ = part.partition(needle)
            if found and "ClientConnectorError" not in head:
                count += 1
    return count
