"""A workflow's conversation on the task page, in a real browser against a real control plane
and echo worker, run by a document of our own whose two steps each ask the user one question
(their roles' prompts open with the `{"ask": …}` the echo tool answers with) in two declared
stages: the page says the stage and that the task waits for an answer; the message log reads as
a conversation (the user's words apart from the agents', the questions outlined); each answer
given in the checkpoint dialog appears in it live, the stage moves on, and an output read by
the next step opens to the value it read."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.async_api import Locator, Page, expect

from shoal.api.server import running_server
from shoal.config import Settings
from tests.runtime.harness import echo_worker, login, sse_events
from tests.web.browser import browser_page, sign_in
from tests.web.test_accessibility import named_and_fitting
from tests.web.test_owned import both_themes

STAGED = """\
name: two_stages
version: 1
description: Ask who it is for, then how long, then write.
roles:
  interviewer:
    prompt: '{"ask": "Who is it for?"} Notes on {query}: {conversation}'
    tools: [echo]
  writer:
    prompt: '{"ask": "How long should it be?"} Write about {query}: {conversation}'
    tools: [echo]
stages:
  initial: init
  allowed: {init: [asking], asking: [writing]}
  final: done
steps:
  - {id: interview, kind: agent, role: interviewer, asks: {max: 1}, stage: asking}
  - {id: write, kind: agent, role: writer, after: [interview], asks: {max: 1}, stage: writing}
"""
PLAIN = """\
name: plain_note
version: 1
description: Write a note.
roles:
  writer: {prompt: "Write a note on {query}", tools: [echo]}
steps:
  - {id: write, kind: agent, role: writer}
"""


async def start(client: httpx.AsyncClient, document: str, description: str) -> str:
    """Add `document`, then submit a task of it."""
    added = await client.post("/api/v1/workflows", json={"document": document})
    assert added.status_code == 201, added.text
    name = document.split("\n", 1)[0].removeprefix("name: ")
    resp = await client.post("/api/v1/tasks", json={"workflow": name,
                                                    "description": description})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["task_id"])


async def answer(page: Page, question: str, text: str) -> None:
    """Answer the task's open question in the checkpoint dialog."""
    dialog = page.get_by_role("dialog")
    await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: question")
    await expect(dialog.locator("#cp-question")).to_have_text(question)
    await dialog.get_by_label("Your answer").fill(text)
    await dialog.get_by_role("button", name="Answer").click()


async def said(messages: Locator) -> list[dict[str, Any]]:
    """Each message shown: its kind, from whom, its line of who to whom."""
    return [{"kind": await m.get_attribute("data-kind"),
             "from": await m.get_attribute("data-from"),
             "who": " ".join((await m.locator(".who").inner_text()).split()[:3])}
            for m in await messages.all()]


async def test_a_conversation_is_read_answered_and_followed_live(settings: Settings) -> None:
    """The stage and the wait for an answer beside the status; the request and the question
    in the conversation; each answer appears live, the stage moves, the task completes; an
    output opens to the revision it read; nothing is shown twice."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await start(client, STAGED, "Bike lanes")
            async with browser_page("conversation", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                status, stage = page.locator("#task-status"), page.locator("#task-stage")
                waiting = page.locator("#task-waiting")
                messages = page.locator("#conversation li.message")
                await expect(status).to_have_text("awaiting_input")
                await expect(waiting).to_have_text("waiting for your answer")
                await expect(stage).to_have_text("Stage: asking")
                await expect(messages).to_have_count(2)
                assert await said(messages) == [
                    {"kind": "request", "from": "user", "who": "user → interviewer"},
                    {"kind": "question", "from": "agent", "who": "interviewer → user"}]
                await expect(messages.nth(0).locator(".says")).to_have_text("Bike lanes")
                await expect(messages.nth(1).locator(".says")).to_have_text("Who is it for?")
                await expect(page.locator("#conversation-empty")).to_be_hidden()

                await answer(page, "Who is it for?", "The city council")
                await expect(stage).to_have_text("Stage: writing")
                await expect(messages).to_have_count(5)
                assert (await said(messages))[2:] == [
                    {"kind": "answer", "from": "user", "who": "user → interviewer"},
                    {"kind": "output", "from": "agent", "who": "interviewer → writer"},
                    {"kind": "question", "from": "agent", "who": "writer → user"}]
                await expect(messages.nth(2).locator(".says")).to_have_text("The city council")
                await expect(messages.nth(3).locator("summary")).to_have_text(
                    "read interview (revision 1)")
                await expect(messages.nth(4).locator(".says")).to_have_text(
                    "How long should it be?")
                await expect(waiting).to_have_text("waiting for your answer")
                # Read again: the log and the replayed events, each message once.
                await page.reload()
                await expect(page.locator("#live")).to_have_text("Live")  # caught up
                await expect(stage).to_have_text("Stage: writing")
                await expect(messages).to_have_count(5)

                await answer(page, "How long should it be?", "One page")
                await expect(page.get_by_role("dialog")).to_be_hidden()
                await expect(status).to_have_text("completed")
                await expect(stage).to_have_text("Stage: done")
                await expect(waiting).to_be_hidden()
                await expect(messages).to_have_count(6)
                await expect(messages.nth(5)).to_have_attribute("data-from", "user")
                await expect(messages.nth(5).locator(".says")).to_have_text("One page")
                ids = [await m.get_attribute("data-message-id") for m in await messages.all()]
                assert len(set(ids)) == 6, ids

                output = messages.nth(3).locator("details")
                await output.locator("summary").click()
                await expect(output.locator("pre")).to_contain_text(
                    "The user answered: The city council")
                await named_and_fitting(page)
                await both_themes(page, "conversation")
                watched.clean()
            events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
            assert events[-1]["type"] == "task_complete", events[-1]
            log = (await client.get(f"/api/v1/tasks/{task_id}/messages")).json()
            assert [m["id"] for m in log["messages"]] == ids  # the log, in its order
        finally:
            await client.aclose()


async def test_a_document_without_stages_shows_none(settings: Settings) -> None:
    """No stage declared: no stage shown; the conversation is the request and nothing else,
    also after a reload (the log read again, the events replayed: each message once)."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await start(client, PLAIN, "Tides")
            await sse_events(client, task_id, until={"task_complete"})
            async with browser_page("conversation-plain", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                await expect(page.locator("#task-status")).to_have_text("completed")
                messages = page.locator("#conversation li.message")
                await expect(messages).to_have_count(1)
                await expect(page.locator("#task-stage")).to_be_hidden()
                await expect(page.locator("#task-waiting")).to_be_hidden()
                assert await said(messages) == [
                    {"kind": "request", "from": "user", "who": "user → writer"}]
                await page.reload()
                await expect(page.locator("#live")).to_have_text("Live")  # caught up
                await expect(page.locator("#blackboard")).to_contain_text("Write a note on Tides")
                await expect(messages).to_have_count(1)
                watched.clean()
        finally:
            await client.aclose()
