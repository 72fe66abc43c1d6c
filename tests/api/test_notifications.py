"""`/api/v1/notifications`: webhooks (secrets write-only), the email address, the latest
deliveries and test pings, on the real app; and the app's own notifier at work."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.notify.signing import verify_signature
from shoal.worker.agent import Worker
from tests.conftest import make_settings
from tests.notify.receivers import Receiver, as_json, header, webhook_receiver
from tests.runtime.harness import login, submit, wait_for_status, wait_until

API = "/api/v1/notifications"
SECRET = "0123456789abcdef-secret"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Dev settings with an SMTP relay configured and a quick notifier."""
    return make_settings(tmp_path, smtp_host="127.0.0.1", smtp_port=2525, smtp_tls="none",
                         notify_poll_interval=0.05, notify_max_webhooks=3)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook receiver on 127.0.0.1."""
    async with webhook_receiver() as rx:
        yield rx


@pytest.fixture
async def bob(server: RunningServer, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Another user, signed in."""
    client = await login(server, settings, "bob")
    try:
        yield client
    finally:
        await client.aclose()


async def register(client: httpx.AsyncClient, url: str, **extra: Any) -> dict[str, Any]:
    resp = await client.post(f"{API}/webhooks", json={"url": url, "secret": SECRET, **extra})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


async def test_a_webhook_is_registered_and_its_secret_never_shown(
        client: httpx.AsyncClient) -> None:
    """The answer and the list show the URL, the events and that it is on; never the secret."""
    created = await register(client, "http://127.0.0.1:9/hook", events=["task.failed"])
    listed = await client.get(f"{API}/webhooks")
    assert created["url"] == "http://127.0.0.1:9/hook"
    assert (created["events"], created["enabled"]) == (["task.failed"], True)
    assert listed.json() == {"webhooks": [created]}
    assert "secret" not in created
    assert SECRET not in listed.text


async def test_events_default_to_every_kind(client: httpx.AsyncClient) -> None:
    """Without `events` a webhook gets every kind of notification."""
    created = await register(client, "http://localhost:9/hook")
    assert created["events"] == ["task.completed", "task.failed", "task.budget_exceeded",
                                 "checkpoint.waiting"]


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "http://127.0.0.1:9/h", "secret": "short"}, "secret"),
    ({"url": "http://127.0.0.1:9/h", "secret": "x" * 15 + "\x00"}, "secret"),
    ({"url": "ftp://127.0.0.1/h", "secret": SECRET}, "url"),
    ({"url": "http://hooks.example.com/h", "secret": SECRET}, "url"),
    ({"url": "https://u:p@hooks.example.com/h", "secret": SECRET}, "url"),
    ({"url": "http://127.0.0.1:9/h", "secret": SECRET, "events": ["task.started"]},
     "events.0"),
    ({"url": "http://127.0.0.1:9/h", "secret": SECRET, "events": []}, "events"),
    ({"url": "http://127.0.0.1:9/h", "secret": SECRET, "colour": "red"}, "colour"),
])
async def test_a_bad_webhook_is_refused_naming_the_field(
        client: httpx.AsyncClient, body: dict[str, Any], field: str) -> None:
    """422, and `details` names the field at fault."""
    resp = await client.post(f"{API}/webhooks", json=body)
    assert resp.status_code == 422, resp.text
    assert [d["field"] for d in resp.json()["details"]] == [field]


async def test_a_user_may_register_only_so_many_webhooks(client: httpx.AsyncClient) -> None:
    """Past `notify_max_webhooks` (3 here) a new one is refused with 409."""
    for n in range(3):
        await register(client, f"http://127.0.0.1:9/{n}")
    resp = await client.post(f"{API}/webhooks",
                             json={"url": "http://127.0.0.1:9/x", "secret": SECRET})
    assert (resp.status_code, resp.json()["error"]) == (409, "too_many_webhooks")


async def test_a_webhook_is_changed_switched_off_and_deleted(client: httpx.AsyncClient) -> None:
    """PATCH changes the events or switches it off; a switched-off webhook takes no ping;
    DELETE removes it."""
    hook = await register(client, "http://127.0.0.1:9/hook")
    changed = await client.patch(f"{API}/webhooks/{hook['id']}",
                                 json={"events": ["checkpoint.waiting"], "enabled": False})
    ping = await client.post(f"{API}/webhooks/{hook['id']}/ping")
    deleted = await client.delete(f"{API}/webhooks/{hook['id']}")
    again = await client.delete(f"{API}/webhooks/{hook['id']}")
    assert changed.status_code == 200
    assert (changed.json()["events"], changed.json()["enabled"]) == (["checkpoint.waiting"], False)
    assert (ping.status_code, ping.json()["error"]) == (409, "webhook_disabled")
    assert (deleted.status_code, again.status_code) == (204, 404)
    assert (await client.get(f"{API}/webhooks")).json() == {"webhooks": []}


async def test_nobody_sees_or_touches_another_users_webhooks(
        client: httpx.AsyncClient, bob: httpx.AsyncClient) -> None:
    """Bob's list is his own; alice's webhook is not found for him, whatever he asks."""
    hook = await register(client, "http://127.0.0.1:9/alice")
    url = f"{API}/webhooks/{hook['id']}"
    answers = [(await bob.patch(url, json={"enabled": False})).status_code,
               (await bob.delete(url)).status_code,
               (await bob.post(f"{url}/ping")).status_code,
               (await bob.get(f"{API}/deliveries", params={"webhook_id": hook["id"]}))
               .json()["deliveries"]]
    assert answers == [404, 404, 404, []]
    assert (await bob.get(f"{API}/webhooks")).json() == {"webhooks": []}
    assert (await client.get(f"{API}/webhooks")).json()["webhooks"][0]["enabled"]


async def test_a_ping_is_delivered_signed_and_shown_in_the_deliveries(
        client: httpx.AsyncClient, bob: httpx.AsyncClient, receiver: Receiver) -> None:
    """The app's notifier delivers a ping; the receiver verifies it; the deliveries list shows
    it delivered to its owner only."""
    hook = await register(client, receiver.endpoint("/hook"))
    queued = await client.post(f"{API}/webhooks/{hook['id']}/ping")
    assert queued.status_code == 202, queued.text
    (request,) = await wait_until(receiver.got("/hook"), what="the ping")

    async def delivered() -> Any:
        (row,) = (await client.get(f"{API}/deliveries")).json()["deliveries"]
        return dict(row) if row["status"] == "delivered" else None

    row: dict[str, Any] = await wait_until(delivered, what="the ping recorded as delivered")
    verify_signature(SECRET, request.body, header(request, "Shoal-Signature"), now=time.time())
    assert as_json(request)["type"] == "ping"
    assert as_json(request)["id"] == row["id"] == queued.json()["delivery_id"]
    assert (row["attempts"], row["last_status_code"], row["webhook_id"]) == (1, 200, hook["id"])
    assert (await bob.get(f"{API}/deliveries")).json() == {"deliveries": []}


async def test_the_app_notifies_when_a_task_completes(
        client: httpx.AsyncClient, worker: Worker, receiver: Receiver) -> None:
    """With nothing but the app running, a task's completion reaches its owner's webhook."""
    await register(client, receiver.endpoint("/hook"), events=["task.completed"])
    task = await submit(client, [{"name": "a", "description": "x", "tool": "echo"}])
    await wait_for_status(client, task, "completed")
    (request,) = await wait_until(receiver.got("/hook"), what="the notification")
    assert as_json(request)["task"]["id"] == task


async def test_the_email_address_is_set_read_and_removed(client: httpx.AsyncClient) -> None:
    """PUT sets the address and the events, GET reads them back, DELETE stops the emails."""
    empty = (await client.get(f"{API}/email")).json()
    put = await client.put(f"{API}/email", json={"address": "ada@example.com",
                                                 "events": ["task.failed"]})
    got = (await client.get(f"{API}/email")).json()
    bad = await client.put(f"{API}/email", json={"address": "ada at example"})
    removed = await client.delete(f"{API}/email")
    again = await client.delete(f"{API}/email")
    assert empty == {"address": None, "events": [], "updated_at": None}
    assert put.status_code == 200, put.text
    assert (got["address"], got["events"]) == ("ada@example.com", ["task.failed"])
    assert (bad.status_code, [d["field"] for d in bad.json()["details"]]) == (422, ["address"])
    assert (removed.status_code, again.status_code) == (204, 404)


async def test_email_is_refused_by_a_server_that_sends_none(tmp_path: Path) -> None:
    """Without SMTP settings, setting an address is refused with 409 saying why."""
    settings = make_settings(tmp_path / "plain")
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        try:
            resp = await client.put(f"{API}/email", json={"address": "ada@example.com"})
        finally:
            await client.aclose()
    assert (resp.status_code, resp.json()["error"]) == (409, "email_unavailable")
    assert "SHOAL_SMTP_HOST" in resp.json()["message"]


async def test_the_routes_need_a_signed_in_user(server: RunningServer) -> None:
    """Without a token every route answers 401."""
    async with httpx.AsyncClient(base_url=server.url) as anonymous:
        answers = {(await anonymous.get(f"{API}/{path}")).status_code
                   for path in ("webhooks", "email", "deliveries")}
    assert answers == {401}
