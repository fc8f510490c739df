"""Starting the SandboxWarmPoolAutoscaler controller: only with --extensions, the flag on, and
its API served; an install without its CRD runs every other controller and says so once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentsandbox.api.resources import SANDBOX_WARM_POOL_AUTOSCALERS
from agentsandbox.cli.controller import autoscaler_served, register_controllers
from agentsandbox.cli.options import Options, build_flagset, given_flags
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.manager import Manager


class Discovery:
    def __init__(self, served: bool) -> None:
        self.served = served
        self.paths: list[str] = []

    async def raw(self, method: str, path: str, **_: Any) -> Any:
        self.paths.append(path)
        if not self.served:
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        return {"resources": []}


def options(*argv: str) -> Options:
    values, _ = build_flagset().parse(list(argv))
    return Options.from_values(values, given_flags(list(argv)))


async def test_a_missing_autoscaler_api_is_one_warning_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert await autoscaler_served(Discovery(False)) is False  # type: ignore[arg-type]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "SandboxWarmPoolAutoscaler controller is not started" in line
    assert "autoscaling.agentsandbox.dev/v1alpha1" in line
    found = Discovery(True)
    assert await autoscaler_served(found) is True  # type: ignore[arg-type]
    assert found.paths == ["/apis/autoscaling.agentsandbox.dev/v1alpha1"]


def informed(mgr: Manager) -> set[str]:
    return {inf.resource.plural for inf in mgr.informers.informers()}


@pytest.mark.parametrize(
    ("argv", "served", "runs"),
    [
        (["--extensions"], True, True),
        (["--extensions"], False, False),
        (["--extensions", "--enable-warm-pool-autoscaler=false"], True, False),
        ([], True, False),
    ],
)
def test_the_controller_is_registered_only_when_asked_and_served(
    argv: list[str], served: bool, runs: bool
) -> None:
    mgr = Manager(object())  # type: ignore[arg-type]
    register_controllers(mgr, options(*argv), autoscaler=served)
    assert (SANDBOX_WARM_POOL_AUTOSCALERS.plural in informed(mgr)) is runs
