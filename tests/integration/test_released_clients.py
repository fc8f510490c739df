"""The released Python clients (PyPI ``k8s-agent-sandbox`` 0.4.6 and 1.0.8), unchanged, against
our controllers on the real local control plane.

Each client runs in its own hash-locked venv (``make sdk-venvs``: ``.venv-sdk046/``,
``.venv-sdk108/``) as a subprocess (``sdk_driver.py``): it creates a claim through the apiserver,
waits the way it does in production (0.4.6: claim → Sandbox Ready, v1alpha1; 1.0.8: claim Ready,
v1beta1), runs ``echo hello``, writes and reads a file, and deletes the claim. Its runtime calls go
through ``SandboxDirectConnectionConfig`` to the stand-in runtime (``agentsandbox.devcluster.
standin``) on 127.0.0.1, which records the router headers: that is how we see which sandbox the
client was told to use. kwok's pods run nothing and their IPs are fictitious; nothing connects to
them.

Controllers run in-process: Sandbox, SandboxWarmPool and the SandboxClaim controller
(``agentsandbox.controllers.claim.setup``). Until that controller exists every test here FAILS
(never skips) at once, saying so.

Each case takes about 10-20 s (pool fill, a subprocess importing the ``kubernetes`` package,
the claim, the garbage collector removing the claimed sandbox): under 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import Settings
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.standin import StandinRuntime
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from tests.polling import eventually, stays

from .invariants import SandboxHistory, checked_history
from .runtime_helpers import running
from .test_warmpool import (
    pool_obj,
    pool_sandboxes,
    template_obj,
    wait_ready_pool,
)

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("sdk_driver.py")
POOL_SIZE = 2
READY_TIMEOUT = 60  # the clients' sandbox_ready_timeout (s)
CLAIM_CONTROLLER = "agentsandbox.controllers.claim.controller"


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def claim_setup() -> Callable[..., Any] | None:
    """``agentsandbox.controllers.claim.setup`` if the SandboxClaim controller exists yet."""
    try:
        module = importlib.import_module(CLAIM_CONTROLLER)
    except ModuleNotFoundError as err:
        if err.name != CLAIM_CONTROLLER:
            raise
        return None
    return module.setup if hasattr(module, "setup") else None


@contextlib.asynccontextmanager
async def controllers_with_claims(client: Client, workers: int = 4) -> AsyncIterator[Manager]:
    setup = claim_setup()
    if setup is None:
        pytest.fail(
            f"the SandboxClaim controller ({CLAIM_CONTROLLER}.setup) does not exist yet: "
            "the released clients cannot get a sandbox without it",
            pytrace=False,
        )
    mgr = Manager(client)
    sandbox_controller.setup(mgr, 8, "cluster.local")
    warmpool.setup(mgr, Settings(), workers=workers)
    setup(mgr, workers=workers)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 20)
        yield mgr


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    venv: str
    args: tuple[str, ...]  # driver arguments; "{tpl}" / "{pool}" are filled in
    warm: bool  # the claim must adopt a pool member (else: a cold sandbox named after the claim)
    api_version: str  # what the client writes the claim as

    def driver_args(self, tpl: str, pool: str) -> list[str]:
        return [a.format(tpl=tpl, pool=pool) for a in self.args]


CASES = [
    Case("sdk046-default", ".venv-sdk046", ("--template", "{tpl}"), True, "v1alpha1"),
    Case(
        "sdk046-none",
        ".venv-sdk046",
        ("--template", "{tpl}", "--warmpool", "none"),
        False,
        "v1alpha1",
    ),
    Case(
        "sdk046-named-pool",
        ".venv-sdk046",
        ("--template", "{tpl}", "--warmpool", "{pool}"),
        True,
        "v1alpha1",
    ),
    Case("sdk108-warmPoolRef", ".venv-sdk108", ("--warm-pool", "{pool}"), True, "v1beta1"),
]


class Watcher:
    """What our own watches saw in the namespace while the client ran."""

    def __init__(self, client: Client, namespace: str, pool: str) -> None:
        self.claims: dict[str, dict[str, Any]] = {}  # name -> last seen object
        self.claim_sandbox: dict[str, str] = {}  # name -> status.sandbox.name (first non-empty)
        self.claim_deleted: set[str] = set()
        self.pool_members: set[str] = set()  # every sandbox ever labelled as the pool's
        self.sandbox_owners: dict[str, set[str]] = {}  # sandbox -> owner kinds/names ever seen
        self._pool_hash = name_hash(pool)
        self._claims = Informer(client, SANDBOX_CLAIMS, namespace)
        self._sandboxes = Informer(client, SANDBOXES, namespace)
        self._claims.add_handler(self._claim, lambda _o, n: self._claim(n), self._claim_gone)
        self._sandboxes.add_handler(self._sandbox, lambda _o, n: self._sandbox(n))

    def _claim(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.claims[name] = obj
        sandbox = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
        if sandbox:
            self.claim_sandbox.setdefault(name, sandbox)

    def _claim_gone(self, obj: dict[str, Any]) -> None:
        self.claim_deleted.add(obj["metadata"]["name"])

    def _sandbox(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX) == self._pool_hash:
            self.pool_members.add(meta["name"])
        owners = self.sandbox_owners.setdefault(meta["name"], set())
        owners |= {f"{o['kind']}/{o['name']}" for o in meta.get("ownerReferences") or []}

    async def __aenter__(self) -> Watcher:
        self._claims.start()
        self._sandboxes.start()
        await asyncio.wait_for(
            asyncio.gather(self._claims.wait_synced(), self._sandboxes.wait_synced()), 20
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._claims.stop()
        await self._sandboxes.stop()


async def run_driver(python: Path, args: list[str], within: float) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(python),
        str(DRIVER),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        return -9, out.decode(), err.decode() + f"\n(driver killed after {within}s)"
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def gone(client: Client, resource: Any, name: str, ns: str, within: float) -> bool:
    async def missing() -> bool:
        try:
            await client.get(resource, name, ns)
        except NotFound:
            return True
        return False

    try:
        await eventually(missing, within=within, what=f"{name} gone", interval=0.2)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_released_client_end_to_end(
    client: Client,
    namespace: str,
    kubeconfig: str,
    case: Case,
) -> None:
    python = ROOT / case.venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} missing: run `make sdk-venvs`", pytrace=False)
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", POOL_SIZE), namespace)
    async with controllers_with_claims(client):
        before = {
            s["metadata"]["name"]
            for s in await wait_ready_pool(client, namespace, "pool", POOL_SIZE)
        }
        async with StandinRuntime() as standin, Watcher(client, namespace, "pool") as seen:
            rc, out, err = await run_driver(
                python,
                [
                    "--kubeconfig",
                    kubeconfig,
                    "--namespace",
                    namespace,
                    "--api-url",
                    standin.url,
                    "--ready-timeout",
                    str(READY_TIMEOUT),
                    *case.driver_args("tpl", "pool"),
                ],
                within=READY_TIMEOUT + 60,
            )
            assert rc == 0, f"driver exit {rc}\nstdout:\n{out}\nstderr:\n{err[-4000:]}"
            lines = [line for line in out.splitlines() if line.strip()]
            result = json.loads(lines[-1])
            print(f"\n{case.id}: {json.dumps(result['timings'])}", file=sys.stderr)
            claim, sandbox = result["claim"], result["sandbox"]

            # what the client did
            assert (result["stdout"], result["exit_code"]) == ("hello\n", 0)
            assert result["file_content"] == result["cat"] != ""
            assert result["file_exists"] is True

            # the claim the client wrote, as our watch saw it, and what it was bound to
            assert claim in seen.claims, f"no claim {claim} seen: {sorted(seen.claims)}"
            spec = seen.claims[claim]["spec"]
            if case.api_version == "v1alpha1":
                assert spec["sandboxTemplateRef"] == {"name": "tpl"}
                policy = dict(zip(case.args[::2], case.args[1::2], strict=True)).get("--warmpool")
                want = {None, "default"} if policy is None else {policy.format(pool="pool")}
                assert spec.get("warmpool") in want, spec
            else:
                assert spec["warmPoolRef"] == {"name": "pool"}
            assert seen.claim_sandbox.get(claim) == sandbox
            runtime = standin.requests
            assert runtime, "the client made no runtime request"
            assert {(r.sandbox_id, r.namespace, r.port) for r in runtime} == {
                (sandbox, namespace, "8888")
            }
            assert all(r.status == 200 for r in runtime), [(r.path, r.status) for r in runtime]

            # warm: a pool member before the claim, one replacement; cold: named after the claim
            if case.warm:
                assert sandbox in before, f"{sandbox} was not a pool member {sorted(before)}"
            else:
                assert sandbox == claim
                assert sandbox not in seen.pool_members
            assert f"SandboxClaim/{claim}" in seen.sandbox_owners.get(sandbox, set())

            # after termination: the claim is gone, the garbage collector takes the sandbox
            assert await gone(client, SANDBOX_CLAIMS, claim, namespace, 10), "claim not deleted"
            assert await gone(client, SANDBOXES, sandbox, namespace, 30), (
                f"sandbox {sandbox} outlived its claim"
            )
            after = {
                s["metadata"]["name"]
                for s in await wait_ready_pool(client, namespace, "pool", POOL_SIZE)
            }
            known = seen.pool_members | before | after
            later = await stays(  # a second replacement would show up now
                lambda: pool_sandboxes(client, namespace, "pool"),
                accept=lambda now: {s["metadata"]["name"] for s in now} <= known,
                for_=1.5,
                what="no other replacement",
            )
            now = {s["metadata"]["name"] for s in later}
            members = seen.pool_members | before | after | now
        assert len(now) == POOL_SIZE
        if case.warm:
            assert sandbox not in now
            assert len(members) == POOL_SIZE + 1, f"exactly one replacement: {sorted(members)}"
        else:
            assert now == before and members == before, "a cold claim touched the pool"
