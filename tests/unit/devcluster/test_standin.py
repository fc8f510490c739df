"""The stand-in sandbox runtime (legacy python-runtime API) through aiohttp's test client."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient, TestServer

from agentsandbox.devcluster.standin import PathError, StandinRuntime, relative_path


def headers(sandbox: str = "sb-a", namespace: str = "ns1") -> dict[str, str]:
    return {
        "X-Sandbox-ID": sandbox,
        "X-Sandbox-Namespace": namespace,
        "X-Sandbox-Port": "8888",
        "X-Sandbox-Pod-IP": "10.244.0.7",
    }


@pytest.fixture
async def standin(tmp_path: Path) -> AsyncIterator[StandinRuntime]:
    s = StandinRuntime(tmp_path / "root", default_timeout=10, max_timeout=20)
    yield s
    await s.stop()


@pytest.fixture
async def http(standin: StandinRuntime) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(standin.app, host="127.0.0.1")) as c:
        yield c


BOUNDARY = "standinboundary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


def part_head(filename: str) -> bytes:
    """A ``file`` part's headers as requests/urllib3 write them (HTML5 style: the filename is
    sent as is, only ``"``, CR and LF escaped), unlike aiohttp's FormData which %-quotes it."""
    name = filename.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
    return (
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


def multipart(filename: str, content: bytes) -> bytes:
    return part_head(filename) + content + f"\r\n--{BOUNDARY}--\r\n".encode()


async def upload(http: TestClient, filename: str, content: bytes, **hdr: str) -> int:
    resp = await http.post(
        "/upload",
        data=multipart(filename, content),
        headers={**headers(**hdr), "Content-Type": MULTIPART},
    )
    return resp.status


def q(path: str) -> str:
    return urllib.parse.quote(path, safe="")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("a.txt", "a.txt"),
        ("/tmp/a.txt", "tmp/a.txt"),
        ("dir//b/./c.txt", "dir/b/c.txt"),
        ("", ""),
        (".", ""),
        ("/", ""),
    ],
)
def test_relative_path(raw: str, want: str) -> None:
    assert relative_path(raw) == want


@pytest.mark.parametrize("raw", ["..", "../x", "a/../../x", "/a/..", "a\x00b", "a\nb"])
def test_relative_path_refuses_escapes_and_control_chars(raw: str) -> None:
    with pytest.raises(PathError):
        relative_path(raw)


async def test_execute_runs_in_the_sandbox_directory(
    http: TestClient,
    standin: StandinRuntime,
) -> None:
    resp = await http.post("/execute", json={"command": "echo hello; pwd"}, headers=headers())
    assert resp.status == 200
    body = await resp.json()
    out = body["stdout"].splitlines()
    assert out[0] == "hello"
    assert out[1].endswith("/ns1/sb-a")
    assert (body["stderr"], body["exit_code"], body["timed_out"]) == ("", 0, False)


async def test_execute_reports_stderr_and_exit_code(http: TestClient) -> None:
    resp = await http.post("/execute", json={"command": "echo oops >&2; exit 3"}, headers=headers())
    body = await resp.json()
    assert (body["stdout"], body["stderr"], body["exit_code"]) == ("", "oops\n", 3)


async def test_execute_timeout_is_bounded(http: TestClient) -> None:
    """A command that never ends on its own (longer than the fixture's 20 s cap on any
    timeout) is answered at all only because the stand-in killed it at its timeout; the
    ``wait_for`` only stops the test if the stand-in hangs, it times nothing."""
    resp = await asyncio.wait_for(
        http.post(
            "/execute", json={"command": "sleep 3600", "timeout_seconds": 0.3}, headers=headers()
        ),
        60,
    )
    body = await resp.json()
    assert body["timed_out"] is True and body["exit_code"] == -1
    assert "timed out after 0.3s" in body["stderr"]


@pytest.mark.parametrize(
    "body",
    [{}, {"command": ""}, {"command": 3}, {"command": "true", "timeout_seconds": -1}, []],
)
async def test_execute_rejects_bad_bodies(http: TestClient, body: object) -> None:
    resp = await http.post("/execute", json=body, headers=headers())
    assert resp.status == 400


async def test_requests_without_a_valid_sandbox_id_are_refused(http: TestClient) -> None:
    resp = await http.post("/execute", json={"command": "true"})
    assert resp.status == 400
    assert "X-Sandbox-ID" in await resp.text()
    resp = await http.get("/exists/a", headers=headers(sandbox="../etc"))
    assert resp.status == 400


async def test_upload_basename_then_download_list_exists(http: TestClient) -> None:
    # 0.4.6: filename = basename; read/list/exists quote the whole path with safe=''
    assert await upload(http, "hello.txt", b"hi there\n") == 200
    resp = await http.get(f"/download/{q('hello.txt')}", headers=headers())
    assert (resp.status, await resp.read()) == (200, b"hi there\n")
    resp = await http.get("/exists/hello.txt", headers=headers())
    assert await resp.json() == {"exists": True}
    resp = await http.get("/exists/nope.txt", headers=headers())
    assert await resp.json() == {"exists": False}
    resp = await http.get("/list/", headers=headers())
    entries = await resp.json()
    assert [(e["name"], e["size"], e["type"]) for e in entries] == [("hello.txt", 9, "file")]
    assert isinstance(entries[0]["mod_time"], float)


async def test_upload_relative_path_creates_parents(http: TestClient) -> None:
    # 1.0.8: filename = normalised relative path; download strips the leading '/'
    assert await upload(http, "out/deep/a.txt", b"A") == 200
    for path in ("/download/out%2Fdeep%2Fa.txt", f"/download/{q('/out/deep/a.txt')}"):
        resp = await http.get(path, headers=headers())
        assert (resp.status, await resp.read()) == (200, b"A")
    resp = await http.get(f"/list/{q('out')}", headers=headers())
    assert [(e["name"], e["type"]) for e in await resp.json()] == [("deep", "directory")]
    resp = await http.post("/execute", json={"command": "cat out/deep/a.txt"}, headers=headers())
    assert (await resp.json())["stdout"] == "A"


async def test_chunked_upload_without_content_length(http: TestClient) -> None:
    prefix = part_head("big/blob.bin")
    payload = bytes(range(256)) * 1024

    async def body() -> AsyncIterator[bytes]:
        yield prefix
        for i in range(0, len(payload), 10_000):
            yield payload[i : i + 10_000]
        yield f"\r\n--{BOUNDARY}--\r\n".encode()

    resp = await http.post(
        "/upload",
        data=body(),
        headers={**headers(), "Content-Type": MULTIPART},
    )
    assert resp.status == 200, await resp.text()
    assert "Content-Length" not in resp.request_info.headers
    got = await http.get("/download/big%2Fblob.bin", headers=headers())
    assert await got.read() == payload


@pytest.mark.parametrize("name", ["../x.txt", "a/../../x.txt", "..", "", "/"])
async def test_upload_refuses_paths_outside_the_sandbox(
    http: TestClient,
    standin: StandinRuntime,
    name: str,
) -> None:
    assert await upload(http, name, b"x") == 400
    assert not (standin.root / "ns1" / "x.txt").exists()


async def test_upload_without_file_field_is_refused(http: TestClient) -> None:
    data = FormData()
    data.add_field("other", b"x", filename="a.txt")
    resp = await http.post("/upload", data=data, headers=headers())
    assert resp.status == 400
    resp = await http.post("/upload", data=b"plain", headers=headers())
    assert resp.status == 400


@pytest.mark.parametrize("op", ["download", "list", "exists"])
async def test_reads_refuse_dotdot(http: TestClient, op: str) -> None:
    resp = await http.get(f"/{op}/{q('../sb-b/secret')}", headers=headers())
    assert resp.status == 400


async def test_symlink_out_of_the_sandbox_is_refused(http: TestClient, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    await http.post("/execute", json={"command": f"ln -s {outside} link"}, headers=headers())
    resp = await http.get("/download/link", headers=headers())
    assert resp.status == 400


async def test_missing_file_and_directory_are_404(http: TestClient) -> None:
    assert (await http.get("/download/none.txt", headers=headers())).status == 404
    assert (await http.get("/list/none", headers=headers())).status == 404


async def test_sandboxes_never_see_each_others_files(http: TestClient) -> None:
    assert await upload(http, "mine.txt", b"a", sandbox="sb-a") == 200
    for other in ({"sandbox": "sb-b"}, {"sandbox": "sb-a", "namespace": "ns2"}):
        resp = await http.get("/exists/mine.txt", headers=headers(**other))
        assert await resp.json() == {"exists": False}
        resp = await http.post("/execute", json={"command": "ls"}, headers=headers(**other))
        assert (await resp.json())["stdout"] == ""
        resp = await http.get("/list/", headers=headers(**other))
        assert await resp.json() == []


async def test_router_headers_are_recorded(
    http: TestClient,
    standin: StandinRuntime,
) -> None:
    await http.post("/execute", json={"command": "true"}, headers=headers())
    await http.get("/exists/x", headers={**headers("sb-b", "ns2"), "X-Sandbox-Timeout": "60"})
    await http.post("/execute", json={"command": "true"})
    await http.get("/")
    recorded = [
        (r.method, r.path, r.sandbox_id, r.namespace, r.port, r.pod_ip, r.timeout, r.status)
        for r in standin.requests
    ]
    assert recorded == [
        ("POST", "/execute", "sb-a", "ns1", "8888", "10.244.0.7", None, 200),
        ("GET", "/exists/x", "sb-b", "ns2", "8888", "10.244.0.7", "60", 200),
        ("POST", "/execute", None, None, None, None, None, 400),
    ]
    resp = await http.get("/_requests")
    listed = await resp.json()
    assert [(r["sandbox_id"], r["namespace"], r["status"]) for r in listed] == [
        ("sb-a", "ns1", 200),
        ("sb-b", "ns2", 200),
        (None, None, 400),
    ]


async def test_start_listens_on_loopback_port_and_stop_cleans_up() -> None:
    standin = StandinRuntime(default_timeout=5)
    port = await standin.start()
    root = standin.root
    try:
        assert port > 0 and standin.url == f"http://127.0.0.1:{port}"
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.get(standin.url + "/") as resp,
        ):
            assert await resp.json() == {"status": "ok"}
    finally:
        await standin.stop()
    assert not root.exists()
    async with aiohttp.ClientSession(trust_env=False) as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"http://127.0.0.1:{port}/")
