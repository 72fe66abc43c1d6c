"""Bad input against a real server: clear 4xx answers in the error shape, never a 500."""

from __future__ import annotations

import base64
import io
import json
import uuid
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.e2e.procs import (
    Cluster,
    access_token,
    cluster,
    finished,
    free_port,
    receive_until,
    sse_events,
    submit,
    wait_healthy,
    wait_task,
    wait_workers_online,
    worker_socket,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


@dataclass(frozen=True, slots=True)
class Server:
    """A running control plane and a signed-in user's token."""

    stack: Cluster
    root: Path
    url: str
    token: str
    worker_token: str

    def client(self) -> httpx.AsyncClient:
        """An HTTP client signed in as the user."""
        return httpx.AsyncClient(
            base_url=self.url, timeout=15, headers={"Authorization": f"Bearer {self.token}"}
        )


async def _serve(root: Path, *, with_worker: bool) -> AsyncIterator[Server]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with cluster(root) as stack:
        await stack.create_user("alice")
        server = stack.start_server(port)
        worker_token = await stack.create_worker_token("w1")
        await wait_healthy(url, server)
        async with httpx.AsyncClient(base_url=url, timeout=15) as anon:
            token = await access_token(anon, "alice")
        running = Server(stack, root, url, token, worker_token)
        if with_worker:
            worker = stack.start_worker("w1", worker_token, url)
            async with running.client() as client:
                await wait_workers_online(client, {"w1"}, [server, worker])
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    """A control plane with one echo-capable worker, shared by this module's tests."""
    async for running in _serve(tmp_path_factory.mktemp("bad-input"), with_worker=True):
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lonely(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    """A control plane no worker ever connects to."""
    async for running in _serve(tmp_path_factory.mktemp("no-worker"), with_worker=False):
        yield running


def _assert_error(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    where = f"{resp.request.method} {resp.request.url.path}"
    assert resp.status_code == status, f"{where}: {resp.status_code} {resp.text[:500]}"
    body: dict[str, Any] = resp.json()
    assert set(body) == {"error", "message", "details"}, f"{where}: {body}"
    assert body["message"], f"{where}: an error must say what happened"
    if code is not None:
        assert body["error"] == code, f"{where}: {body}"
    return body


async def test_submit_without_a_worker_is_503_with_retry_after(lonely: Server) -> None:
    """With no worker online, a submission is refused with 503, Retry-After and what to do."""
    async with lonely.client() as client:
        resp = await client.post("/api/v1/tasks", json={"description": "Anything at all"})
        body = _assert_error(resp, 503, "no_workers_available")
        assert int(resp.headers["retry-after"]) >= 1
        assert "shoal worker" in body["message"]
        assert (await client.get("/api/v1/tasks")).json()["total"] == 0


async def test_invalid_json_body_is_422(server: Server) -> None:
    """A body that is not JSON, or not a JSON object, is a validation error."""
    async with server.client() as client:
        for raw in (b"{not json", b"", b"[]", b'"just a string"', b"null"):
            resp = await client.post(
                "/api/v1/tasks", content=raw, headers={"Content-Type": "application/json"}
            )
            _assert_error(resp, 422, "validation_error")


async def test_unknown_fields_are_422(server: Server) -> None:
    """Fields the API does not know are refused, at the top and inside a plan item."""
    async with server.client() as client:
        for body in (
            {"description": "Do it", "colour": "red"},
            {"description": "Do it", "plan": [{"name": "a", "description": "b", "priority": 9}]},
        ):
            _assert_error(await client.post("/api/v1/tasks", json=body), 422, "validation_error")


async def test_missing_empty_or_huge_description_is_422(server: Server) -> None:
    """A description must be there, not blank, and at most 20,000 characters."""
    async with server.client() as client:
        for body in (
            {},
            {"description": ""},
            {"description": "   \n\t"},
            {"description": "x" * 100_000},
            {"description": 42},
        ):
            _assert_error(await client.post("/api/v1/tasks", json=body), 422, "validation_error")


async def test_unknown_enum_values_are_422(server: Server) -> None:
    """Values outside an enumeration are refused, naming the field."""
    cases = [
        ("privacy_level", "secret"),
        ("tool_preferences", ["nope"]),
        ("checkpoint_frequency", "often"),
        ("workflow", "magic"),
        ("permissions", {"commands": "maybe"}),
        ("permissions", {"network": "allow"}),
    ]
    async with server.client() as client:
        for field_name, value in cases:
            body = {"description": "Do it", field_name: value}
            error = _assert_error(await client.post("/api/v1/tasks", json=body), 422)
            assert any(d["field"].startswith(field_name) for d in error["details"]), error
        plan = [{"name": "a", "description": "b", "tool": "nope"}]
        _assert_error(
            await client.post("/api/v1/tasks", json={"description": "x", "plan": plan}),
            422,
            "validation_error",
        )


async def test_bad_query_parameters_are_422(server: Server) -> None:
    """Out-of-range or unknown query values are validation errors, not crashes."""
    async with server.client() as client:
        for params in (
            {"limit": 0},
            {"limit": 100_000},
            {"offset": -1},
            {"status": "bogus"},
            {"limit": "many"},
        ):
            _assert_error(await client.get("/api/v1/tasks", params=params), 422, "validation_error")
        _assert_error(await client.get("/api/v1/workers", params={"status": "asleep"}), 422)


async def test_malformed_or_unknown_ids_are_404(server: Server) -> None:
    """A malformed id is simply not found; so is a well-formed id nobody has."""
    async with server.client() as client:
        for some in ("not-a-uuid", "1", "%00", str(uuid.uuid4())):
            for method, path in (
                ("GET", f"/api/v1/tasks/{some}"),
                ("POST", f"/api/v1/tasks/{some}/cancel"),
                ("GET", f"/api/v1/tasks/{some}/download"),
                ("GET", f"/api/v1/tasks/{some}/events"),
                ("GET", f"/api/v1/tasks/{some}/subtasks"),
                ("GET", f"/api/v1/subtasks/{some}"),
                ("GET", f"/api/v1/subtasks/{some}/files"),
                ("GET", f"/api/v1/workers/{some}"),
            ):
                _assert_error(await client.request(method, path), 404, "not_found")


async def test_cyclic_or_dangling_plan_is_invalid_graph(server: Server) -> None:
    """A plan that is not a DAG is refused with `invalid_graph` before anything is stored."""
    plans = [
        [
            {"name": "a", "description": "A", "dependencies": ["b"]},
            {"name": "b", "description": "B", "dependencies": ["a"]},
        ],
        [{"name": "a", "description": "A", "dependencies": [0]}],
        [{"name": "a", "description": "A", "dependencies": ["ghost"]}],
        [{"name": "a", "description": "A", "dependencies": [7]}],
    ]
    async with server.client() as client:
        before = (await client.get("/api/v1/tasks")).json()["total"]
        for plan in plans:
            resp = await client.post("/api/v1/tasks", json={"description": "Loop", "plan": plan})
            body = _assert_error(resp, 422, "invalid_graph")
            assert body["details"], body
        assert (await client.get("/api/v1/tasks")).json()["total"] == before


async def test_unsafe_file_from_a_subtask_is_rejected_and_reported(server: Server) -> None:
    """A result naming `../evil.txt` completes; that file is refused, reported and not stored."""
    plan = [{"name": "writer", "description": "Write two files.", "tool": "claude_code"}]
    files = [
        {"path": "../evil.txt", "content_b64": base64.b64encode(b"x").decode()},
        {"path": "ok.txt", "content_b64": base64.b64encode(b"fine").decode()},
    ]
    async with server.client() as client, worker_socket(server.url, server.worker_token) as ws:
        # A worker that speaks the protocol itself, so it can return a name no real tool writes.
        await ws.send(
            _message(
                "worker_register",
                machine_id=f"fake-{uuid.uuid4()}",
                machine_name="fake",
                slots=1,
                tools=[{"name": "claude_code", "local": True}],
            )
        )
        await receive_until(ws, lambda m: m["type"] == "registered")
        task_id = await submit(client, {"description": "Produce an unsafe file", "plan": plan})
        run = await receive_until(ws, lambda m: m["type"] == "execute_task")
        await ws.send(_message("task_accepted", attempt_id=run["attempt_id"]))
        await ws.send(
            _message(
                "task_result",
                attempt_id=run["attempt_id"],
                fence=run["fence"],
                status="succeeded",
                output="wrote two files",
                files=files,
            )
        )
        ack = await receive_until(ws, lambda m: m["type"] == "ack")
        assert ack["accepted"] is True, ack
        detail = await wait_task(
            client, task_id, until=finished, within=15, what="the task to finish"
        )
        assert detail["status"] == "completed", detail
        sub_id = detail["subtasks"][0]["subtask_id"]
        output = (await client.get(f"/api/v1/subtasks/{sub_id}")).json()["output"]
        rejected = {r["path"]: r["reason"] for r in output["rejected_files"]}
        assert set(rejected) == {"../evil.txt"}
        assert "'..'" in rejected["../evil.txt"]
        listed = (await client.get(f"/api/v1/subtasks/{sub_id}/files")).json()["files"]
        assert [f["path"] for f in listed] == ["ok.txt"]
        _assert_error(await client.get(f"/api/v1/subtasks/{sub_id}/previews/../evil.txt"), 404)
        events = await sse_events(client, task_id, until={"task_complete"})
        notices = [e["data"]["message"] for e in events if e["type"] == "notice"]
        assert any("../evil.txt" in n for n in notices), notices
        archive = await client.get(f"/api/v1/tasks/{task_id}/download")
        with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
            assert zipped.namelist() == ["ok.txt"]
    assert _escaped(server.root) == []


async def test_echo_refuses_to_write_outside_its_workspace(server: Server) -> None:
    """The echo tool on a real worker fails the subtask rather than write `../evil.txt`."""
    plan = [
        {
            "name": "writer",
            "description": "Write outside.",
            "tool": "echo",
            "options": {"files": {"../evil.txt": "x"}},
        }
    ]
    async with server.client() as client:
        task_id = await submit(client, {"description": "Escape the workspace", "plan": plan})
        detail = await wait_task(
            client, task_id, until=finished, within=20, what="the task to finish"
        )
        assert detail["status"] == "failed", detail
        sub = (await client.get(f"/api/v1/subtasks/{detail['subtasks'][0]['subtask_id']}")).json()
        assert sub["status"] == "failed"
        assert "inside the workspace" in (sub["error"] or ""), sub
        assert all(h["status"] == "failed" for h in sub["attempt_history"])
    assert _escaped(server.root) == []


def _escaped(root: Path) -> list[Path]:
    """Every `evil.txt` under the test's folder or beside it."""
    return [*root.rglob("evil.txt"), *root.parent.glob("evil.txt")]


def _message(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "v": 1, **fields})


async def test_never_a_500_on_odd_requests(server: Server) -> None:
    """Odd methods, paths and bodies get 4xx answers in the error shape."""
    async with server.client() as client:
        _assert_error(await client.delete("/api/v1/tasks"), 405)
        _assert_error(await client.get("/api/v1/nothing-here"), 404)
        _assert_error(
            await client.post("/api/v1/tasks", json={"description": "x", "plan": []}), 422
        )
        _assert_error(
            await client.post("/api/v1/tasks", json={"description": "x", "plan": "not a list"}), 422
        )
        _assert_error(await client.get("/api/v1/subtasks/x/files/%2e%2e/etc/passwd"), 404)
        _assert_error(await client.get("/api/v1/subtasks/x/previews/%2e%2e/etc/passwd"), 404)
