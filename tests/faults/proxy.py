"""A loopback proxy for fault tests, run as its own process (stopped by its PID).

    python tests/faults/proxy.py --target 127.0.0.1:2379 --port-file p \\
        [--delay-ms 50-200] [--reset-every 3.0]
    python tests/faults/proxy.py --target 127.0.0.1:6443 --port-file p --http-pki DIR

Without ``--http-pki`` it is a TCP proxy: bytes pass through untouched (TLS, HTTP/2 and gRPC
included). ``--delay-ms`` adds a random latency to every chunk in each direction while keeping
their order (a delay line, not a bandwidth cap); ``--reset-every`` aborts every open connection
that often (both sides see a reset). SIGUSR1 cuts every connection and refuses new ones until
SIGUSR2. On SIGTERM it closes everything and exits. It prints counters to stderr when it ends.

With ``--http-pki DIR`` it is an HTTP proxy in front of kube-apiserver: it serves plain HTTP/1.1
on loopback and sends every request on over TLS as the cluster's admin (DIR holds ca.crt,
admin.crt, admin.key), streaming the answers (watches too). Fault rules, set at any time with
``PUT /_faults`` (a JSON list; ``GET /_faults`` shows them with their hit counts), fail the
first ``count`` requests that match them (``method`` and ``path`` are regular expressions
matched in full, ``query`` and ``body`` ones searched for in the query string and the body):

- ``{"action": "status", "status": 500}``: answered with that code and a Status body (its
  reason the code's: TooManyRequests, InternalError, ServiceUnavailable...; with
  ``"retry_after": N`` a ``Retry-After: N`` header too); the request never reaches
  kube-apiserver.
- ``{"action": "lose", "hold": 0.0}``: sent on and answered by kube-apiserver (so a write is
  applied), then the answer is held ``hold`` seconds and the client's connection is cut without
  it: to the client, a timeout or a reset after the write was done.
- with ``"stall": REGEX, "stall_for": SECONDS`` too: from the moment such a request arrives, the
  answers streaming on requests whose path matches REGEX (watches) pause for that long, in
  order, so that the client's caches learn of the write late.

``GET /_requests`` lists every request so far (``at``: the proxy's monotonic clock when it
arrived, ``method``, ``path``, ``query``, ``status``: the answer's code, 0 until known).
``POST /_end?path=REGEX`` ends the streamed answers (watches) open on paths matching REGEX as the
server's watch timeout would (the chunked body finishes cleanly); it answers how many it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import signal
import socket
import ssl
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
from aiohttp import web


class Proxy:
    def __init__(
        self, target: tuple[str, int], delay: tuple[float, float], reset_every: float
    ) -> None:
        self.target = target
        self.delay = delay
        self.reset_every = reset_every
        self.paused = False
        self.blackhole_until = 0.0
        self.dropped = 0
        self.pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.accepted = 0
        self.resets = 0
        self.bytes = 0

    def kill_all(self) -> None:
        for left, right in list(self.pairs):
            left.transport.abort()
            right.transport.abort()
            self.resets += 1
        self.pairs.clear()

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.paused:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        pair = (writer, up_writer)
        self.pairs.add(pair)
        tasks = [
            asyncio.create_task(self.pipe(reader, up_writer)),
            asyncio.create_task(self.pipe(up_reader, writer, answers=True)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            self.pairs.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    def lost(self, answers: bool, data: bytes) -> bool:
        if answers and time.monotonic() < self.blackhole_until:
            self.dropped += len(data)
            return True
        return False

    async def blackhole(self, seconds: float, refuse: float) -> None:
        self.blackhole_until = time.monotonic() + seconds
        await asyncio.sleep(seconds)
        self.paused = refuse > 0
        self.kill_all()
        if refuse > 0:
            await asyncio.sleep(refuse)
            self.paused = False

    async def pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool = False
    ) -> None:
        if self.delay == (0.0, 0.0):
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await reader.read(65536):
                    self.bytes += len(data)
                    if self.lost(answers, data):
                        continue
                    writer.write(data)
                    await writer.drain()
            return
        line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            with contextlib.suppress(OSError):
                while True:
                    at, data = await line.get()
                    if not data:
                        return
                    await asyncio.sleep(max(0.0, at - time.monotonic()))
                    if self.lost(answers, data):
                        continue
                    writer.write(data)
                    await writer.drain()

        sender = asyncio.create_task(deliver())
        last = 0.0
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await reader.read(65536):
                    self.bytes += len(data)
                    # in order: never before the chunk ahead of it
                    last = max(last, time.monotonic() + random.uniform(*self.delay))
                    line.put_nowait((last, data))
            line.put_nowait((last, b""))
            await sender
        finally:
            sender.cancel()

    async def resetter(self) -> None:
        while True:
            await asyncio.sleep(self.reset_every)
            self.kill_all()


# ------------------------------------------------------------------------------------ HTTP
# never copied from one side to the other: they describe one connection, not the message
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "host",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
    }
)


@dataclass
class FaultRule:
    """One kind of fault, for the first ``count`` requests that match (see the module doc)."""

    method: str
    path: str
    action: str
    query: str = ""
    body: str = ""
    status: int = 500
    retry_after: int = 0
    hold: float = 0.0
    stall: str = ""
    stall_for: float = 0.0
    count: int = 1
    hits: int = 0

    def matches(self, method: str, path: str, query: str, body: bytes) -> bool:
        return (
            self.hits < self.count
            and re.fullmatch(self.method, method) is not None
            and re.fullmatch(self.path, path) is not None
            and re.search(self.query, query) is not None
            and re.search(self.body, body.decode(errors="replace")) is not None
        )


_REASONS = {
    400: "BadRequest",
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class HttpFaults:
    def __init__(self, upstream: str, pki: Path) -> None:
        self.upstream = upstream
        self.tls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.tls.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.rules: list[FaultRule] = []
        self.stalls: list[tuple[str, float]] = []  # (path regex, until) for streamed answers
        self.requests = 0
        self.injected = 0
        self.log: list[dict[str, object]] = []  # every request: GET /_requests
        self.streams: list[tuple[str, asyncio.Event]] = []  # (path, end) of open answers
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.tls, limit=0),
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def control(self, request: web.Request) -> web.Response:
        if request.path == "/_requests":
            return web.json_response(self.log)
        if request.path == "/_end":
            ended = [end for path, end in self.streams if re.fullmatch(request.query["path"], path)]
            for end in ended:
                end.set()
            return web.json_response(len(ended))
        if request.method == "PUT":
            self.rules = [FaultRule(**r) for r in json.loads(await request.read())]
        return web.json_response([asdict(r) for r in self.rules])

    def fault(self, method: str, path: str, query: str, body: bytes) -> FaultRule | None:
        for rule in self.rules:
            if rule.matches(method, path, query, body):
                rule.hits += 1
                self.injected += 1
                return rule
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path in ("/_faults", "/_requests", "/_end"):
            return await self.control(request)
        self.requests += 1
        entry: dict[str, object] = {
            "at": time.monotonic(),
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "status": 0,
        }
        self.log.append(entry)
        body = await request.read()
        rule = self.fault(request.method, request.path, request.query_string, body)
        if rule is not None and rule.action == "status":
            print(f"fault: {request.method} {request.path} answered {rule.status}", flush=True)
            entry["status"] = rule.status
            family = "InternalError" if rule.status >= 500 else "BadRequest"
            reason = _REASONS.get(rule.status, family)
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": "injected by the fault proxy",
                    "reason": reason,
                    "code": rule.status,
                },
                status=rule.status,
                headers={"Retry-After": str(rule.retry_after)} if rule.retry_after else None,
            )
        if rule is not None and rule.stall:
            self.stalls.append((rule.stall, time.monotonic() + rule.stall_for))
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self.session.request(
            request.method,
            self.upstream + request.path_qs,
            data=body if body else None,
            headers=headers,
            allow_redirects=False,
        ) as up:
            entry["status"] = up.status
            if rule is not None:  # "lose": the write is done; its answer never arrives
                await up.read()
                print(
                    f"fault: {request.method} {request.path} answered {up.status} upstream, "
                    f"answer held {rule.hold}s and lost; watches {rule.stall!r} stalled "
                    f"{rule.stall_for}s",
                    flush=True,
                )
                await asyncio.sleep(rule.hold)
                assert request.transport is not None
                request.transport.abort()
                raise asyncio.CancelledError
            resp = web.StreamResponse(
                status=up.status,
                headers={k: v for k, v in up.headers.items() if k.lower() not in _HOP},
            )
            await resp.prepare(request)
            end = asyncio.Event()
            stream = (request.path, end)
            self.streams.append(stream)
            try:
                await self.pump(request.path, up, resp, end)
            finally:
                self.streams.remove(stream)
            await resp.write_eof()
            return resp

    async def pump(
        self,
        path: str,
        up: aiohttp.ClientResponse,
        resp: web.StreamResponse,
        end: asyncio.Event,
    ) -> None:
        """Copy the answer's body as it streams, until it ends or ``end`` is set."""

        async def copy() -> None:
            async for chunk in up.content.iter_any():
                await self.stalled(path)
                await resp.write(chunk)

        copying = asyncio.ensure_future(copy())
        ending = asyncio.ensure_future(end.wait())
        try:
            await asyncio.wait((copying, ending), return_when=asyncio.FIRST_COMPLETED)
        finally:
            copying.cancel()
            ending.cancel()
            await asyncio.wait((copying, ending))
        if not copying.cancelled():
            copying.result()  # what ended the copy, if it failed

    async def stalled(self, path: str) -> None:
        now = time.monotonic()
        self.stalls = [(p, until) for p, until in self.stalls if until > now]
        until = max((u for p, u in self.stalls if re.fullmatch(p, path)), default=now)
        await asyncio.sleep(until - now)


async def serve_http(target: str, pki: Path, port_file: Path, stop: asyncio.Event) -> None:
    faults = HttpFaults(f"https://{target}", pki)
    await faults.start()
    app = web.Application(client_max_size=64 * 1024**2)
    app.router.add_route("*", "/{tail:.*}", faults.handle)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    write_port(port_file, sock.getsockname()[1])
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await faults.close()
        print(f"http-proxy: requests={faults.requests} faults={faults.injected}", file=sys.stderr)


def write_port(port_file: Path, port: int) -> None:
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(port))
    tmp.rename(port_file)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="host:port")
    parser.add_argument("--port-file", required=True, type=Path)
    parser.add_argument("--delay-ms", default="0-0", help="min-max added latency per chunk")
    parser.add_argument("--reset-every", type=float, default=0.0, help="seconds; 0 = never")
    parser.add_argument(
        "--refuse-after-loss",
        type=float,
        default=0.0,
        help="seconds to refuse connections after a SIGHUP's lost answers",
    )
    parser.add_argument(
        "--http-pki", type=Path, help="an HTTP proxy with fault rules; DIR holds the admin's TLS"
    )
    args = parser.parse_args(argv)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    if args.http_pki is not None:
        await serve_http(args.target, args.http_pki, args.port_file, stop)
        return 0
    host, port = args.target.rsplit(":", 1)
    lo, hi = (float(x) / 1000 for x in args.delay_ms.split("-", 1))
    proxy = Proxy((host, int(port)), (lo, hi), args.reset_every)
    server = await asyncio.start_server(proxy.accept, "127.0.0.1", 0)
    write_port(args.port_file, server.sockets[0].getsockname()[1])

    def pause() -> None:
        proxy.paused = True
        proxy.kill_all()

    def resume() -> None:
        proxy.paused = False

    loop.add_signal_handler(signal.SIGUSR1, pause)
    loop.add_signal_handler(signal.SIGUSR2, resume)
    holes: set[asyncio.Task[None]] = set()

    def blackhole() -> None:
        task = asyncio.create_task(proxy.blackhole(1.0, args.refuse_after_loss))
        holes.add(task)
        task.add_done_callback(holes.discard)

    loop.add_signal_handler(signal.SIGHUP, blackhole)
    resetter = asyncio.create_task(proxy.resetter()) if args.reset_every > 0 else None
    await stop.wait()
    if resetter is not None:
        resetter.cancel()
    server.close()
    proxy.kill_all()
    print(
        f"proxy: accepted={proxy.accepted} resets={proxy.resets} bytes={proxy.bytes} "
        f"dropped={proxy.dropped}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
