"""The claim history checker (tests/integration/invariants.py) against the real control plane:
it reads the watch and the audit log as they are, and flags what it must.

The only module that makes claims without the autouse ``checked_history`` fixture: its test
breaks the claim rules on purpose, with a history of its own, and asserts what that history
says.
"""

from __future__ import annotations

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client

from .invariants import OUR_AGENT, SandboxHistory, wait_claims_ready
from .test_claims import claim_obj, controllers
from .test_warmpool import template_obj

TESTS_AGENT = "agentsandbox-tests/history"


async def test_the_history_flags_a_claim_renamed_and_our_delete_but_not_the_tests_own(
    client: Client, cluster: DevCluster, namespace: str
) -> None:
    """Three cold claims Ready, the controller stopped. Then, while every claim lives: the
    first claim's sandbox is deleted by a client with our user agent (as the controller would),
    the second's by one with another user agent (as a test would), and the third claim's status
    is made to name another sandbox while its own lives. The history flags the first and the
    third, and only those; and it saw every sandbox."""
    assert not TESTS_AGENT.startswith(OUR_AGENT)
    ns = namespace
    names = {"c1", "c2", "c3"}
    async with (
        SandboxHistory(client, ns, audit=cluster.logs / "audit.log") as history,
        Client.from_kubeconfig(str(cluster.kubeconfig), qps=0, user_agent=TESTS_AGENT) as tests,
    ):
        await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
        async with controllers(client):
            for name in sorted(names):
                await client.create(
                    SANDBOX_CLAIMS, claim_obj(name, template="tpl", warmpool="none"), ns
                )
            ready = await wait_claims_ready(client, ns, names, 30)
        sandbox = {c["metadata"]["name"]: c["status"]["sandbox"]["name"] for c in ready}
        assert history.violations == []
        await client.delete(SANDBOXES, sandbox["c1"], ns)
        await tests.delete(SANDBOXES, sandbox["c2"], ns)
        renamed = {"status": {"sandbox": {"name": "someone-else"}}}
        await client.patch(SANDBOX_CLAIMS, "c3", renamed, ns, subresource="status")
        await history.caught_up()
    found = history.violations
    assert len(found) == 2, found
    assert any(
        f"{sandbox['c1']}, the first Ready sandbox of claim {ns}/c1" in f
        and f"deleted by us ({OUR_AGENT}" in f
        for f in found
    ), found
    assert any(
        f"claim {ns}/c3 names someone-else" in f and f"while {sandbox['c3']}" in f for f in found
    ), found
    assert history.created == 3
