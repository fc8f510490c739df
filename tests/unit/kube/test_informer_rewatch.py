"""Security review #8: a watch the server throttles (429) or fails (5xx) is opened again from the
last resourceVersion after a backoff that honours Retry-After, as client-go's reflector does; it
is never replaced by a relist from etcd. A relist that is needed (any other refusal) reads from
the last resourceVersion (``NotOlderThan``, served by the watch cache); only a 410 relists from
scratch. A fake client and an injected sleep, no cluster and no real time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from agentsandbox.kube.client import Client, ObjectList
from agentsandbox.kube.errors import (
    Forbidden,
    Gone,
    InternalError,
    ServiceUnavailable,
    TooManyRequests,
)
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import CONFIGMAPS
from tests.polling import eventually, yield_to_loop


class _FailingStream:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    async def __aenter__(self) -> _FailingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self.error is not None:
            raise self.error
        await asyncio.Event().wait()  # a healthy watch: nothing happens until cancelled
        raise StopAsyncIteration


class FakeClient:
    """Lists answer one ConfigMap at resourceVersion ``rv``; watches fail with ``errors`` in turn
    and then stay open."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = list(errors)
        self.lists: list[tuple[str | None, str | None]] = []
        self.watches: list[str | None] = []
        self.rv = 10

    async def list(self, *args: Any, **kwargs: Any) -> ObjectList:
        self.lists.append((kwargs.get("resource_version"), kwargs.get("resource_version_match")))
        self.rv += 1
        item = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(self.rv)}}
        return ObjectList([item], str(self.rv))

    def watch(self, *args: Any, **kwargs: Any) -> _FailingStream:
        self.watches.append(kwargs.get("resource_version"))
        return _FailingStream(self.errors.pop(0) if self.errors else None)


async def _run(errors: list[BaseException]) -> tuple[FakeClient, list[float]]:
    fake = FakeClient(errors)
    informer = Informer(cast(Client, fake), CONFIGMAPS, "ns", backoff_base=0.2, backoff_cap=30)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await yield_to_loop()

    informer._sleep = sleep  # type: ignore[method-assign]
    task = asyncio.create_task(informer._run())
    try:
        await eventually(
            lambda: len(fake.watches) == len(errors) + 1, within=5, what="the last watch"
        )
        await yield_to_loop(3)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return fake, slept


async def test_a_throttled_or_failing_watch_rewatches_from_the_last_resource_version() -> None:
    """Security review #8: 429, 503 and 500 on a watch cost no relist."""
    fake, slept = await _run(
        [
            TooManyRequests(message="throttled", retry_after=7),
            ServiceUnavailable(message="unavailable"),
            InternalError(message="boom"),
        ]
    )
    assert fake.lists == [(None, None)], "only the first list; a throttled watch never relists"
    assert fake.watches == ["11", "11", "11", "11"]
    assert len(slept) == 3, "each failed watch backs off before the next"
    assert slept[0] >= 7, "Retry-After is honoured"


async def test_a_relist_reads_from_the_last_resource_version_unless_it_is_gone() -> None:
    """Security review #8: a refused watch relists from the watch cache (NotOlderThan); only 410
    Gone lists from etcd with no resourceVersion."""
    fake, _ = await _run([Forbidden(message="no"), Gone(message="too old")])
    assert fake.lists == [(None, None), ("11", "NotOlderThan"), (None, None)]
    assert fake.watches == ["11", "12", "13"]
