"""A local stand-in for the sandbox runtime: the legacy python-runtime HTTP API on 127.0.0.1.

The released Python clients (``k8s-agent-sandbox`` 0.4.6 and 1.0.8) talk to a sandbox through a
router: every request carries ``X-Sandbox-ID`` (the Sandbox name), ``X-Sandbox-Namespace`` and
``X-Sandbox-Port`` headers, and the router proxies it to that sandbox's pod. Our pods are kwok's
(no container runs, their IPs are fictitious), so tests point the clients'
``SandboxDirectConnectionConfig(api_url=...)`` at this server instead. It plays router and runtime
at once:

* ``POST /execute`` ``{"command": str, "timeout_seconds"?: number}`` runs ``/bin/sh -c command``
  in the sandbox's directory (bounded timeout) and answers ``{"stdout", "stderr", "exit_code",
  "timed_out"}``;
* ``POST /upload`` multipart field ``file``: the part's filename is the destination, relative to
  the sandbox's directory (0.4.6 sends a basename, 1.0.8 a normalised relative path, possibly as a
  chunked body without Content-Length); parent directories are created, ``..`` is refused;
* ``GET /download/<quoted path>``, ``GET /list/<quoted path>``, ``GET /exists/<quoted path>``;
* ``GET /`` answers ``{"status": "ok"}`` (the runtime's health check);
* ``GET /_requests`` lists the recorded router headers of every runtime request
  (also :attr:`StandinRuntime.requests` in-process).

Files live in ``<root>/<namespace>/<sandbox id>/``, so two sandboxes never see each other's files.
A leading ``/`` in a path is dropped: every path resolves inside the sandbox's directory (and a
symlink that leaves it is refused). The server only listens; it never opens a connection itself.
``X-Sandbox-Pod-IP`` is recorded, never used.

    python -m agentsandbox.devcluster.standin [--port 0] [--root DIR]

prints ``http://127.0.0.1:<port>`` and serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import posixpath
import re
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

HOST = "127.0.0.1"
#: Without ``timeout_seconds`` a command may run this long.
DEFAULT_COMMAND_TIMEOUT = 60.0
#: Upper bound for any ``timeout_seconds`` a client asks for.
MAX_COMMAND_TIMEOUT = 300.0
#: Largest upload accepted (bytes).
MAX_UPLOAD_BYTES = 64 * 1024 * 1024
#: Largest stdout/stderr returned (bytes each); the rest is cut.
MAX_OUTPUT_BYTES = 4 * 1024 * 1024

_ROUTER_HEADERS = {
    "sandbox_id": "X-Sandbox-ID",
    "namespace": "X-Sandbox-Namespace",
    "port": "X-Sandbox-Port",
    "pod_ip": "X-Sandbox-Pod-IP",
    "timeout": "X-Sandbox-Timeout",
}
# a Sandbox name (DNS-1123 subdomain) and a namespace (DNS-1123 label)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One runtime request as the stand-in saw it (router headers as sent, None if absent)."""

    method: str
    path: str
    sandbox_id: str | None
    namespace: str | None
    port: str | None
    pod_ip: str | None
    timeout: str | None
    status: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class PathError(ValueError):
    """A path that does not name something inside the sandbox's directory."""


def relative_path(raw: str) -> str:
    """Normalise a client path to one relative to the sandbox directory ("" = the directory).

    A leading ``/`` is dropped; NUL/control characters and any ``..`` segment are refused.
    """
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise PathError(f"path contains control characters: {raw!r}")
    if any(part == ".." for part in raw.split("/")):
        raise PathError(f"path escapes the sandbox: {raw!r}")
    norm = posixpath.normpath("/" + raw).lstrip("/")
    return "" if norm in ("", ".") else norm


class StandinRuntime:
    """The stand-in runtime server. ``await start()`` … ``await stop()`` (or ``async with``)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        default_timeout: float = DEFAULT_COMMAND_TIMEOUT,
        max_timeout: float = MAX_COMMAND_TIMEOUT,
    ) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="agentsandbox-standin-")) if root is None else root
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        self.requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self._procs: set[asyncio.subprocess.Process] = set()
        self.port = 0
        self.app = self._make_app()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1 (``port`` 0: any free port); returns the port."""
        self.root.mkdir(parents=True, exist_ok=True)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, HOST, port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        for proc in list(self._procs):
            _kill(proc)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> StandinRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def sandbox_dir(self, namespace: str, sandbox_id: str) -> Path:
        return self.root / namespace / sandbox_id

    # -- app -------------------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/", self._health)
        app.router.add_get("/_requests", self._requests)
        app.router.add_post("/execute", self._execute)
        app.router.add_post("/upload", self._upload)
        for name, handler in (
            ("download", self._download),
            ("list", self._list),
            ("exists", self._exists),
        ):
            app.router.add_get(f"/{name}", handler)
            app.router.add_get(f"/{name}/{{tail:.*}}", handler)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        status = 500
        try:
            response: web.StreamResponse = await handler(request)
            status = response.status
            return response
        except web.HTTPException as err:
            status = err.status
            raise
        finally:
            if request.path not in ("/", "/_requests"):
                headers = {k: request.headers.get(h) for k, h in _ROUTER_HEADERS.items()}
                self.requests.append(
                    RecordedRequest(
                        method=request.method,
                        path=request.raw_path,
                        status=status,
                        at=time.time(),
                        **headers,
                    )
                )

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _requests(self, request: web.Request) -> web.Response:
        return web.json_response([r.to_json() for r in self.requests])

    def _sandbox(self, request: web.Request) -> Path:
        sandbox_id = request.headers.get("X-Sandbox-ID", "")
        namespace = request.headers.get("X-Sandbox-Namespace", "default")
        if not _SUBDOMAIN.match(sandbox_id):
            raise _bad_request(f"missing or invalid X-Sandbox-ID header: {sandbox_id!r}")
        if not _LABEL.match(namespace):
            raise _bad_request(f"invalid X-Sandbox-Namespace header: {namespace!r}")
        directory = self.sandbox_dir(namespace, sandbox_id)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _resolve(self, base: Path, raw: str) -> Path:
        try:
            rel = relative_path(raw)
        except PathError as err:
            raise _bad_request(str(err)) from None
        target = base / rel if rel else base
        # a symlink made by a command must not lead out of the sandbox
        if not target.resolve().is_relative_to(base.resolve()):
            raise _bad_request(f"path escapes the sandbox: {raw!r}")
        return target

    def _target(self, request: web.Request, prefix: str) -> Path:
        base = self._sandbox(request)
        raw = request.raw_path.split("?", 1)[0]
        tail = raw[len(prefix) :].lstrip("/") if raw.startswith(prefix) else ""
        return self._resolve(base, urllib.parse.unquote(tail))

    async def _execute(self, request: web.Request) -> web.Response:
        base = self._sandbox(request)
        try:
            body = await request.json()
        except ValueError:
            raise _bad_request("body is not JSON") from None
        command = body.get("command") if isinstance(body, dict) else None
        if not isinstance(command, str) or not command:
            raise _bad_request('"command" must be a non-empty string')
        timeout = body.get("timeout_seconds")
        if timeout is None:
            timeout = self.default_timeout
        elif isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise _bad_request('"timeout_seconds" must be a positive number')
        timeout = min(float(timeout), self.max_timeout)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(base),
            "LANG": "C.UTF-8",
        }
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            cwd=base,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._procs.add(proc)
        timed_out = False
        try:
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout)
            except TimeoutError:
                timed_out = True
                _kill(proc)
                try:
                    out, err = await asyncio.wait_for(proc.communicate(), 5)
                except TimeoutError:  # a process that left the group still holds the pipes
                    out, err = b"", b""
        finally:
            self._procs.discard(proc)
        stderr = _text(err)
        if timed_out:
            stderr += f"\nstand-in: command timed out after {timeout:g}s\n"
        return web.json_response(
            {
                "stdout": _text(out),
                "stderr": stderr,
                "exit_code": -1 if timed_out else proc.returncode,
                "timed_out": timed_out,
            }
        )

    async def _upload(self, request: web.Request) -> web.Response:
        base = self._sandbox(request)
        try:
            reader = await request.multipart()
        except (AssertionError, ValueError, KeyError):
            raise _bad_request("expected a multipart/form-data body") from None
        while True:
            part = await reader.next()
            if part is None:
                raise _bad_request('no multipart field "file"')
            if isinstance(part, BodyPartReader) and part.name == "file":
                break
            if isinstance(part, BodyPartReader):
                await part.release()
        if not part.filename:
            raise _bad_request('multipart field "file" has no filename')
        target = self._resolve(base, part.filename)
        if target == base:
            raise _bad_request(f"filename does not name a file: {part.filename!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            raise _bad_request(f"{part.filename!r} is a directory")
        size = 0
        tmp = target.with_name(f".{target.name}.upload")
        try:
            with tmp.open("wb") as fh:
                while chunk := await part.read_chunk(64 * 1024):
                    size += len(chunk)
                    if size > MAX_UPLOAD_BYTES:
                        raise web.HTTPRequestEntityTooLarge(
                            max_size=MAX_UPLOAD_BYTES, actual_size=size
                        )
                    fh.write(chunk)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        rel = target.relative_to(base).as_posix()
        return web.json_response({"message": f"File '{rel}' uploaded successfully", "size": size})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request, "/download")
        if not target.is_file():
            raise web.HTTPNotFound(text="file not found")
        return web.FileResponse(target, headers={"Content-Type": "application/octet-stream"})

    async def _list(self, request: web.Request) -> web.Response:
        target = self._target(request, "/list")
        if not target.is_dir():
            raise web.HTTPNotFound(text="directory not found")
        entries = []
        for child in sorted(target.iterdir()):
            st = child.lstat()
            entries.append(
                {
                    "name": child.name,
                    "size": st.st_size,
                    "type": "directory" if child.is_dir() else "file",
                    "mod_time": st.st_mtime,
                }
            )
        return web.json_response(entries)

    async def _exists(self, request: web.Request) -> web.Response:
        target = self._target(request, "/exists")
        return web.json_response({"exists": target.exists()})


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=message)


def _text(data: bytes) -> str:
    return data[:MAX_OUTPUT_BYTES].decode("utf-8", errors="replace")


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


async def _serve(port: int, root: Path | None) -> None:
    standin = StandinRuntime(root)
    await standin.start(port)
    print(standin.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await standin.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--root", type=Path, help="where sandbox files go (default: a temp dir)")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port, args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
