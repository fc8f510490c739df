"""The manager: shared caches, controllers, leader election, probes, metrics and shutdown.

``Manager.run()`` does what a controller-runtime manager does, in this order:

1. serves ``/metrics`` and ``/healthz`` + ``/readyz`` (separate addresses, ``"0"`` disables one);
2. starts the shared informers and waits for them to sync (``/readyz`` turns OK then), for at
   most ``cache_sync_timeout`` (controller-runtime's default, 2 minutes): then ``run`` raises
   TimeoutError naming the informers that did not sync. ``/healthz`` fails while an informer's
   list (or relist) has kept failing for longer than that;
3. without leader election, starts the controllers; with it, campaigns for the Lease and starts
   them only once elected. If the Lease is lost the controllers are stopped at once and ``run``
   raises :class:`LeaderElectionLost` (the process should exit and be restarted, as upstream);
4. on SIGTERM/SIGINT or :meth:`Manager.stop`: stops the controllers (queued keys are dropped,
   the reconciles in flight may finish for up to ``graceful_shutdown_timeout``), releases the
   Lease, flushes events, stops the informers and closes the servers. If the Lease is lost during
   that drain, the reconciles in flight are cancelled at once and no event is flushed: no write
   follows a lost Lease. The defaults (drain 20 s + a renewal in flight 10 s + release 2 s +
   flush 5 s) fit the 45 s ``terminationGracePeriodSeconds`` of deploy/ and the chart.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics
from .client import Client
from .events import EventBroadcaster, EventRecorder
from .guard import RateLimitedLog
from .informer import Informer, InformerFactory, Transform
from .leaderelection import LeaderElector, default_identity
from .looplag import LoopMonitor
from .resources import Resource

__all__ = [
    "LeaderElectionLost",
    "Manager",
    "Runnable",
    "parse_bind_address",
]

log = logging.getLogger(__name__)

Check = Callable[[], bool]

DEFAULT_CACHE_SYNC_TIMEOUT = 120.0
"""controller-runtime's ``CacheSyncTimeout`` default."""


class LeaderElectionLost(RuntimeError):
    """The manager stopped because this replica lost its Lease."""


class Runnable(Protocol):
    """Something the manager starts and stops, e.g. a :class:`Controller`.

    ``needs_leader_election`` (default True when absent) says whether it runs only on the leader.
    """

    async def start(self) -> None: ...

    async def stop(self, drain_timeout: float | None = ...) -> None: ...


def parse_bind_address(address: str) -> tuple[str | None, int] | None:
    """``"host:port"`` -> (host, port); ``":8080"`` -> (None, 8080); ``"0"``/``""`` -> None.

    An empty host (None) means every interface of every address family, as Go's
    ``net.Listen("tcp", ":8080")``: IPv4 and IPv6, so probes work on IPv6-only clusters too. An
    explicit host (``0.0.0.0``, ``[::]``, ``127.0.0.1``) is bound as given. Port 0 picks a free
    port (read it back from :attr:`Manager.metrics_address`).
    """
    address = address.strip()
    if address in ("", "0"):
        return None
    host_text, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError(f"bind address {address!r} needs a port (host:port or :port)")
    host = host_text.strip("[]") or None
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bind address {address!r}: bad port") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bind address {address!r}: bad port")
    return host, port


class Manager:
    """Runs controllers over shared informers; see the module docstring for the life cycle."""

    def __init__(
        self,
        client: Client,
        *,
        metrics_bind_address: str = "0",
        health_probe_bind_address: str = "0",
        leader_election: bool = False,
        leader_election_id: str = "",
        leader_election_namespace: str | None = None,
        leader_election_identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        leader_election_release_on_cancel: bool = True,
        graceful_shutdown_timeout: float = 20.0,
        cache_sync_timeout: float | None = DEFAULT_CACHE_SYNC_TIMEOUT,
        informer_options: dict[str, Any] | None = None,
        leader_election_client: Client | None = None,
    ) -> None:
        """``leader_election_client`` (default: :meth:`Client.for_leader_election` of
        ``client``, closed by the manager) carries the Lease requests alone."""
        self.client = client
        self.informers = InformerFactory(client, **(informer_options or {}))
        self._metrics_bind = parse_bind_address(metrics_bind_address)
        self._probe_bind = parse_bind_address(health_probe_bind_address)
        self.identity = leader_election_identity or default_identity()
        self._elector: LeaderElector | None = None
        self._own_clients: list[Client] = []
        if leader_election:
            if not leader_election_id or not leader_election_namespace:
                raise ValueError(
                    "leader election needs leader_election_id and leader_election_namespace"
                )
            if leader_election_client is None:
                # Its own pool and no share of the controllers' rate limit: a 128-wide create
                # batch at --kube-api-qps=5 must not hold a renewal past the renew deadline.
                leader_election_client = client.for_leader_election()
                self._own_clients.append(leader_election_client)
            self._elector = LeaderElector(
                leader_election_client,
                name=leader_election_id,
                namespace=leader_election_namespace,
                identity=self.identity,
                lease_duration=lease_duration,
                renew_deadline=renew_deadline,
                retry_period=retry_period,
                release_on_cancel=leader_election_release_on_cancel,
                on_started_leading=self._on_started_leading,
                on_stopped_leading=self._on_stopped_leading,
            )
        self.events = EventBroadcaster(client, reporting_instance=self.identity)
        self._graceful_shutdown_timeout = graceful_shutdown_timeout
        self._cache_sync_timeout = cache_sync_timeout
        self._runnables: list[Runnable] = []
        self._started_runnables: list[Runnable] = []
        self._start_tasks: set[asyncio.Task[None]] = set()
        self._lost_task: asyncio.Task[None] | None = None
        # Named as upstream's main.go names its ping checks; /readyz also waits for the caches.
        self._healthz: dict[str, Check] = {
            "healthz": lambda: True,
            "informers": self._informers_listing,
        }
        self._stuck_log = RateLimitedLog(log)
        # A loop blocked past the renew deadline (the Lease may be lost) fails /healthz.
        self.loop_monitor = LoopMonitor(stall_after=renew_deadline)
        self._healthz["event-loop"] = self.loop_monitor.healthy
        if self._elector is not None:
            self._healthz["leader-election"] = self._elector.healthy
        self._readyz: dict[str, Check] = {
            "readyz": lambda: True,
            "informers-synced": self.informers.has_synced,
        }
        self._runners: list[web.AppRunner] = []
        self.metrics_address: tuple[str, int] | None = None
        self.health_probe_address: tuple[str, int] | None = None
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._started = asyncio.Event()
        self._leading = False
        self._running = False
        self._stopping = False
        self._lost = False

    # --- building --------------------------------------------------------------------------

    def get_informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> Informer:
        """The shared informer for this scope (see :class:`InformerFactory`)."""
        return self.informers.get_informer(
            resource, namespace, label_selector, field_selector, transform=transform
        )

    def add(self, runnable: Runnable) -> None:
        """Run ``runnable`` (e.g. a controller) with the manager; may be called while running."""
        self._runnables.append(runnable)
        if self._running and not self._stopping and self._may_run(runnable):
            self._launch(runnable)

    add_controller = add

    def event_recorder(self, reporting_controller: str) -> EventRecorder:
        """An event recorder reporting as ``reporting_controller`` (e.g. ``sandbox-controller``)."""
        return self.events.new_recorder(reporting_controller)

    def add_healthz_check(self, name: str, check: Check) -> None:
        self._healthz[name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        self._readyz[name] = check

    # --- state -----------------------------------------------------------------------------

    @property
    def elector(self) -> LeaderElector | None:
        return self._elector

    @property
    def is_leader(self) -> bool:
        """True while this manager runs its leader-only work (always, without leader election)."""
        return self._leading

    async def wait_started(self) -> None:
        """Wait until the servers listen and the informers were started."""
        await self._started.wait()

    def ready(self) -> bool:
        return not self._stopping and all(_safe(check) for check in self._readyz.values())

    def healthy(self) -> bool:
        """What ``/healthz`` answers (every liveness check passes)."""
        return all(_safe(check) for check in self._healthz.values())

    def _informers_listing(self) -> bool:
        """False while an informer's list has kept failing for longer than the sync timeout."""
        timeout = self._cache_sync_timeout
        if timeout is None:
            return True
        now = time.monotonic()
        stuck = [
            informer
            for informer in self.informers.informers()
            if (since := informer.list_pending_since()) is not None and now - since >= timeout
        ]
        for informer in stuck:
            self._stuck_log.warning(
                repr(informer), "%r cannot list for over %ss: failing /healthz", informer, timeout
            )
        return not stuck

    # --- running ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to shut down (safe to call from a signal handler or twice)."""
        if self._stop.is_set():
            self._force.set()
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Run until stopped; raises :class:`LeaderElectionLost` if the Lease was lost."""
        if self._running:
            raise RuntimeError("manager is already running")
        self._running = True
        loop = asyncio.get_running_loop()
        installed: dict[signal.Signals, Any] = {}
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous = signal.getsignal(sig)
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    continue
                installed[sig] = previous
        try:
            self.loop_monitor.start()
            await self._start_servers()
            self.events.start()
            self.informers.start()
            self._started.set()
            if not await self._wait_synced():
                return
            if self._elector is not None:
                self._elector.start()
            else:
                self._leading = True
                for runnable in list(self._runnables):
                    self._launch(runnable)
            await self._stop.wait()
        finally:
            for sig, previous in installed.items():
                loop.remove_signal_handler(sig)
                with contextlib.suppress(TypeError, ValueError):
                    signal.signal(sig, previous)
            await self._shutdown()
            self._running = False
        if self._lost:
            raise LeaderElectionLost(f"{self.identity} lost leader election lease")

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stop.is_set():
            log.warning("received %s again; not waiting for reconciles to finish", sig.name)
        else:
            log.info("received %s; shutting down", sig.name)
        self.stop()

    async def _wait_synced(self) -> bool:
        """Wait for the caches (or a stop); False if stopped first."""
        sync = asyncio.ensure_future(self.informers.wait_synced())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            done, _ = await asyncio.wait(
                {sync, stop}, timeout=self._cache_sync_timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            sync.cancel()
            stop.cancel()
        if sync in done:
            sync.result()  # an informer stopped before it synced: raise InformerStopped
            log.info("caches synced (%d informers)", len(self.informers.informers()))
            return True
        if not done:
            pending = [i for i in self.informers.informers() if not i.has_synced()]
            raise TimeoutError(
                f"caches did not sync within {self._cache_sync_timeout}s: {pending!r}"
            )
        return False

    @staticmethod
    def _may_run_without_leader(runnable: Runnable) -> bool:
        return not getattr(runnable, "needs_leader_election", True)

    def _may_run(self, runnable: Runnable) -> bool:
        return self._leading or self._may_run_without_leader(runnable)

    def _launch(self, runnable: Runnable) -> None:
        if runnable in self._started_runnables:
            return
        self._started_runnables.append(runnable)
        task = asyncio.create_task(self._start_runnable(runnable), name=f"start {runnable!r}")
        self._start_tasks.add(task)
        task.add_done_callback(self._start_tasks.discard)

    async def _start_runnable(self, runnable: Runnable) -> None:
        try:
            await runnable.start()
        except Exception:
            log.exception("%r failed to start; shutting down", runnable)
            self.stop()

    def _on_started_leading(self) -> None:
        if self._stopping:
            return
        log.info("%s became the leader", self.identity)
        self._leading = True
        for runnable in list(self._runnables):
            self._launch(runnable)

    def _on_stopped_leading(self) -> None:
        self._leading = False
        if self._stopping:
            if self._elector is not None and self._elector.lost:
                # Lost mid-drain: another replica may lead soon. Cancel the drain now (as a
                # second SIGTERM does) and flush no events: no write after a lost Lease.
                log.error(
                    "%s lost the leader election lease while draining; stopping", self.identity
                )
                self._lost = True
                self._force.set()
            return
        log.error("%s lost the leader election lease; stopping", self.identity)
        self._lost = True
        # Work must stop now, before another replica may take over: cancel in-flight reconciles.
        self._lost_task = asyncio.create_task(
            self._stop_runnables(leader_only=True, drain_timeout=0), name="stop leader work"
        )
        self.stop()

    async def _stop_runnables(self, *, leader_only: bool, drain_timeout: float | None) -> None:
        chosen = [
            r
            for r in self._started_runnables
            if not leader_only or not self._may_run_without_leader(r)
        ]
        for r in chosen:
            self._started_runnables.remove(r)
        if not chosen:
            return
        results = await asyncio.gather(
            *(r.stop(drain_timeout) for r in chosen), return_exceptions=True
        )
        for runnable, result in zip(chosen, results, strict=True):
            if isinstance(result, BaseException):
                log.error("stopping %r failed: %s", runnable, result)

    async def _shutdown(self) -> None:
        self._stopping = True
        self._stop.set()
        starting = list(self._start_tasks)
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        if self._lost_task is not None:
            await asyncio.gather(self._lost_task, return_exceptions=True)
            self._lost_task = None
        drain = asyncio.ensure_future(
            self._stop_runnables(leader_only=False, drain_timeout=self._graceful_shutdown_timeout)
        )
        force = asyncio.ensure_future(self._force.wait())
        await asyncio.wait({drain, force}, return_when="FIRST_COMPLETED")
        force.cancel()
        if not drain.done():
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
        self._leading = False
        if self._elector is not None:
            await self._elector.stop()  # releases the Lease now that the work has stopped
        await self.events.stop(flush_timeout=0 if self._lost else 5.0)
        await self.informers.stop()
        for runner in self._runners:
            await runner.cleanup()
        self._runners = []
        await self.loop_monitor.stop()
        await self.close_clients()
        log.info("manager stopped")

    async def close_clients(self) -> None:
        """Close the clients the manager made (the elector's); the caller's client stays open."""
        clients, self._own_clients = self._own_clients, []
        for own in clients:
            await own.close()

    # --- HTTP ------------------------------------------------------------------------------

    async def _start_servers(self) -> None:
        routes_metrics = [web.get("/metrics", self._metrics)]
        routes_probes = [
            web.get("/healthz", self._healthz_handler),
            web.get("/healthz/{check}", self._healthz_handler),
            web.get("/readyz", self._readyz_handler),
            web.get("/readyz/{check}", self._readyz_handler),
        ]
        same = (
            self._metrics_bind is not None
            and self._metrics_bind == self._probe_bind
            and self._metrics_bind[1] != 0
        )
        if same:
            assert self._metrics_bind is not None
            address = await self._serve(self._metrics_bind, routes_metrics + routes_probes)
            self.metrics_address = self.health_probe_address = address
            return
        if self._metrics_bind is not None:
            self.metrics_address = await self._serve(self._metrics_bind, routes_metrics)
            log.info("serving metrics on %s", _host_port(self.metrics_address))
        if self._probe_bind is not None:
            self.health_probe_address = await self._serve(self._probe_bind, routes_probes)
            log.info("serving health probes on %s", _host_port(self.health_probe_address))

    async def _serve(
        self, bind: tuple[str | None, int], routes: list[web.RouteDef]
    ) -> tuple[str, int]:
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runners.append(runner)
        host, port = bind
        site: web.BaseSite
        if host is None:
            site = web.SockSite(runner, listen_all_interfaces(port))
        else:
            site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        sockname = runner.addresses[0]
        return str(sockname[0]), int(sockname[1])

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz_handler(self, request: web.Request) -> web.Response:
        return _check_response(self._healthz, request, extra_ok=True)

    async def _readyz_handler(self, request: web.Request) -> web.Response:
        return _check_response(self._readyz, request, extra_ok=not self._stopping)


def _host_port(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_all_interfaces(port: int) -> socket.socket:
    """A listening socket on every interface and address family, like Go's ``":port"``.

    One dual-stack socket (``[::]`` with ``IPV6_V6ONLY`` off: IPv4 arrives v4-mapped), so port 0
    gets one port for both families. Without IPv6 in the kernel: IPv4 ``0.0.0.0`` only.
    """
    if socket.has_ipv6:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError:
            pass
        else:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind(("::", port))
            except OSError as err:
                sock.close()
                if err.errno == errno.EADDRINUSE:
                    raise
            else:
                return _listening(sock)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
    except OSError:
        sock.close()
        raise
    return _listening(sock)


def _listening(sock: socket.socket) -> socket.socket:
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _safe(check: Check) -> bool:
    try:
        return bool(check())
    except Exception:
        log.exception("health check %r failed", check)
        return False


def _check_response(checks: dict[str, Check], request: web.Request, extra_ok: bool) -> web.Response:
    """controller-runtime's format: ``ok``, or ``[+]name ok`` / ``[-]name failed`` lines."""
    name = request.match_info.get("check")
    if name is not None:
        check = checks.get(name)
        if check is None:
            return web.Response(status=404, text=f"no check named {name}\n")
        ok = _safe(check)
        return web.Response(status=200 if ok else 500, text="ok" if ok else f"{name} failed\n")
    results = {n: _safe(c) for n, c in checks.items()}
    healthy = extra_ok and all(results.values())
    if healthy and "verbose" not in request.query:
        return web.Response(text="ok")
    lines = [f"[{'+' if ok else '-'}]{n} {'ok' if ok else 'failed'}" for n, ok in results.items()]
    if not extra_ok:
        lines.append("[-]shutdown in progress")
    lines.append("healthz check passed" if healthy else "check failed")
    return web.Response(status=200 if healthy else 500, text="\n".join(lines) + "\n")
