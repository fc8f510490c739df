"""A loopback TCP proxy for fault tests, run as its own process (stopped by its PID).

    python tests/faults/proxy.py --target 127.0.0.1:2379 --port-file p \\
        [--delay-ms 50-200] [--reset-every 3.0]

Bytes pass through untouched (TLS, HTTP/2 and gRPC included). ``--delay-ms`` adds a random
latency to every chunk in each direction while keeping their order (a delay line, not a
bandwidth cap); ``--reset-every`` aborts every open connection that often (both sides see a
reset). SIGUSR1 cuts every connection and refuses new ones until SIGUSR2. On SIGTERM it closes
everything and exits. It prints counters to stderr when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import time
from pathlib import Path


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
    args = parser.parse_args(argv)
    host, port = args.target.rsplit(":", 1)
    lo, hi = (float(x) / 1000 for x in args.delay_ms.split("-", 1))
    proxy = Proxy((host, int(port)), (lo, hi), args.reset_every)
    server = await asyncio.start_server(proxy.accept, "127.0.0.1", 0)
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(server.sockets[0].getsockname()[1]))
    tmp.rename(args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

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
