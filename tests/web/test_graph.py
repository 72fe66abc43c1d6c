"""The task page's graph and timeline in a real browser (Debian's chromium through Playwright)
against a real control plane and worker: an edge per dependency and a dashed one for a loop's
way back; the view zooms, pans and fits; the timeline has a bar per attempt on its worker's
row; and the keyboard keeps its node across a redraw."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from playwright.async_api import Page, expect

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.tools.echo import EchoTool
from tests.conftest import make_settings
from tests.runtime.harness import GatedEcho, echo_worker, login, sse_events, submit
from tests.web.browser import SCREENSHOTS, browser_page, sign_in

DIAMOND: list[dict[str, Any]] = [
    {"name": "Plan", "description": "p", "tool": "echo", "options": {"delay": 0.2}},
    {"name": "Left", "description": "l", "tool": "echo", "dependencies": [0],
     "options": {"delay": 0.3}},
    {"name": "Right", "description": "r", "tool": "echo", "dependencies": [0],
     "options": {"delay": 0.3}},
    {"name": "Join", "description": "j", "tool": "echo", "dependencies": [1, 2]},
]

# The critic echoes the draft, whose NEEDS_REVISION verdict sends the loop back once.
REVIEW = """\
name: review
version: 1
description: Draft, critique, polish; the critic sends the draft back once.
roles:
  writer:
    prompt: 'Draft {"verdict": "NEEDS_REVISION"} on {query}. Feedback: {feedback}'
    tools: [echo]
  critic:
    prompt: 'Critique: {draft}'
    tools: [echo]
    output:
      type: object
      required: [verdict]
      properties:
        verdict: {enum: [APPROVED, NEEDS_REVISION]}
  editor:
    prompt: "Polish: {draft}"
    tools: [echo]
steps:
  - {id: write, kind: agent, role: writer, writes: draft}
  - {id: critique, kind: agent, role: critic, after: [write], writes: verdict}
  - {id: polish, kind: agent, role: editor, after: [critique], writes: final_report}
loops:
  - {from: critique, to: write, when: {entry: verdict, field: verdict, equals: NEEDS_REVISION},
     max: 1}
"""


class HeldDrafts(EchoTool):
    """Echo, except that drafts wait until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def run(self, run: ToolRun) -> ToolOutcome:
        if run.instructions.startswith("Draft"):
            await self.gate.wait()
        return await super().run(run)


async def open_task(page: Page, task_id: str) -> None:
    await sign_in(page, "alice")
    await page.goto(f"/tasks/{task_id}")
    await expect(page.locator("#task-status")).to_have_text("completed")


async def test_each_dependency_is_an_edge(settings: Settings) -> None:
    """One edge per dependency, from the node waited for to the node that waits; in both
    themes."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, DIAMOND, description="A diamond")
            await sse_events(client, task_id, until={"task_complete"})
            detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
            async with browser_page("graph-edges", srv.url) as watched:
                page = watched.page
                await open_task(page, task_id)
                edges = page.locator("#graph [data-edge=dependency]")
                await expect(edges).to_have_count(4)
                drawn = {(await e.get_attribute("data-from"), await e.get_attribute("data-to"))
                         for e in await edges.all()}
                assert drawn == {(d, s["subtask_id"]) for s in detail["subtasks"]
                                 for d in s["dependencies"]}
                await expect(page.locator("#graph [data-edge=loop]")).to_have_count(0)
                join = page.locator("#graph .node", has_text="Join")
                await expect(join).to_have_attribute("aria-description", "Waits for Left, Right")
                await page.screenshot(path=str(SCREENSHOTS / "graph-light.png"))
                await page.get_by_role("button", name=re.compile("theme")).click()
                await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
                await page.screenshot(path=str(SCREENSHOTS / "graph-dark.png"))
                watched.clean()
        finally:
            await client.aclose()


async def test_a_graph_with_no_node_yet_is_drawn_when_they_come(tmp_path: Path) -> None:
    """A task waiting in its user's queue has no subtask yet: its page shows an empty graph,
    then the nodes once it starts."""
    settings = make_settings(tmp_path, max_active_tasks=1)
    tool = GatedEcho()
    async with running_server(settings) as srv, echo_worker(srv, settings, tools={"echo": tool}):
        client = await login(srv, settings)
        try:
            await submit(client, [{"name": "Held", "description": "d", "tool": "echo",
                                   "options": {"gated": True}}], description="Ahead")
            added = await client.post("/api/v1/workflows", json={"document": REVIEW})
            assert added.status_code == 201, added.text
            resp = await client.post("/api/v1/tasks", json={"description": "Cats",
                                                            "workflow": "review"})
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            async with browser_page("graph-empty", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                await expect(page.locator("#task-status")).to_have_text("queued")
                await expect(page.locator("#graph")).to_be_visible()
                await expect(page.locator("#graph .node")).to_have_count(0)
                tool.gate.set()
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.locator("#graph .node")).to_have_count(5)
                watched.clean()
        finally:
            await client.aclose()


async def test_the_graph_zooms_pans_and_fits(settings: Settings) -> None:
    """Zoom in and out change the scale, the arrow keys pan, and Fit brings every node back
    into view."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, DIAMOND, description="A diamond to zoom")
            await sse_events(client, task_id, until={"task_complete"})
            async with browser_page("graph-zoom", srv.url) as watched:
                page = watched.page
                await open_task(page, task_id)
                graph = page.locator("#graph")
                nodes = graph.locator(".node")
                await expect(nodes).to_have_count(4)
                for node in await nodes.all():  # fitted from the start (1 but for rounding)
                    await expect(node).to_be_in_viewport(ratio=0.99)

                async def scale() -> float:
                    return float(await graph.get_attribute("data-scale") or "nan")

                fitted = await scale()
                for _ in range(4):
                    await page.get_by_role("button", name="Zoom in").click()
                zoomed = await scale()
                assert zoomed > fitted * 1.9
                await expect(nodes.filter(has_text="Plan")).not_to_be_in_viewport()
                await page.get_by_role("button", name="Zoom out").click()
                assert fitted < await scale() < zoomed

                plan = nodes.filter(has_text="Plan")
                before = await plan.bounding_box()
                await graph.focus()
                await page.keyboard.press("ArrowLeft")  # the view moves left: the plane right
                after = await plan.bounding_box()
                assert before
                assert after
                assert abs(after["x"] - before["x"] - 48) < 0.5

                await page.get_by_role("button", name="Fit").click()
                assert await scale() == fitted
                for node in await nodes.all():
                    await expect(node).to_be_in_viewport(ratio=0.99)
                watched.clean()
        finally:
            await client.aclose()


async def test_the_timeline_has_a_bar_per_attempt(settings: Settings) -> None:
    """Each attempt is a bar on its worker's row, said in words too, and the keyboard opens
    its subtask from it."""
    async with running_server(settings) as srv, echo_worker(srv, settings, slots=2):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, DIAMOND, description="A diamond in time")
            await sse_events(client, task_id, until={"task_complete"})
            attempts = (await client.get(f"/api/v1/tasks/{task_id}/attempts")).json()["attempts"]
            assert len(attempts) == 4
            async with browser_page("timeline", srv.url) as watched:
                page = watched.page
                await open_task(page, task_id)
                timeline = page.locator("#timeline")
                await expect(timeline).to_be_hidden()
                await page.get_by_role("tab", name="Timeline").click()
                bars = timeline.locator(".bar")
                await expect(bars).to_have_count(4)
                assert {await b.get_attribute("data-attempt-id") for b in await bars.all()} == {
                    a["attempt_id"] for a in attempts}
                lane = timeline.locator(".lane")
                await expect(lane).to_have_count(1)
                await expect(lane.locator(".worker")).to_have_text("w1")
                await expect(bars.first).to_have_attribute("aria-label", re.compile(
                    r"^Plan on w1: succeeded, sent at \+0\.0 s, waited .* s, ran .* s$"))
                await expect(page.locator("#timeline-summary")).to_contain_text(
                    "4 attempts on 1 worker · at most 2 at once")
                await timeline.get_by_text("As a table").click()
                await expect(timeline.locator("tbody tr")).to_have_count(4)
                await expect(timeline.locator("tbody tr").first).to_be_visible()
                await page.screenshot(path=str(SCREENSHOTS / "timeline-light.png"))
                right = bars.filter(has_text="Right")
                await right.focus()
                await page.keyboard.press("Enter")
                await expect(page.locator("aside.drawer h2")).to_have_text("Right")
                await page.get_by_role("button", name=re.compile("theme")).click()
                await page.screenshot(path=str(SCREENSHOTS / "timeline-dark.png"))
                await page.get_by_role("tab", name="Timeline").focus()
                await page.keyboard.press("ArrowLeft")  # back to the graph's tab
                await expect(page.locator("#graph")).to_be_visible()
                await expect(timeline).to_be_hidden()
                watched.clean()
        finally:
            await client.aclose()


async def test_the_keyboard_keeps_its_node_across_redraws(settings: Settings) -> None:
    """A node reached with Tab keeps the focus while a workflow's later rounds are drawn, and
    Enter opens it; the loop's way back is a dashed edge from each round to the next."""
    tool = HeldDrafts()
    async with running_server(settings) as srv, echo_worker(srv, settings, tools={"echo": tool}):
        client = await login(srv, settings)
        try:
            added = await client.post("/api/v1/workflows", json={"document": REVIEW})
            assert added.status_code == 201, added.text
            resp = await client.post("/api/v1/tasks", json={"description": "Cats",
                                                            "workflow": "review"})
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            async with browser_page("graph-keyboard", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                nodes = page.locator("#graph .node")
                await expect(nodes).to_have_count(1)
                first = nodes.first
                await expect(first).to_have_attribute("data-status", "in_progress")
                await page.locator("#graph").focus()
                await page.keyboard.press("Tab")
                await expect(first).to_be_focused()
                tool.gate.set()
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(nodes).to_have_count(5)  # write, critique, twice; polish
                focused = page.locator("#graph .node:focus")
                await expect(focused).to_contain_text("write")
                await expect(focused).not_to_contain_text("round 2")
                await page.keyboard.press("Enter")
                await expect(focused).to_have_attribute("aria-pressed", "true")
                await expect(page.locator("aside.drawer h2")).to_have_text("write")
                await expect(page.locator("#graph [data-edge=dependency]")).to_have_count(3)
                loops = page.locator("#graph [data-edge=loop]")
                await expect(loops).to_have_count(2)  # write#1 → write#2, critique too
                await page.screenshot(path=str(SCREENSHOTS / "graph-loop.png"))
                watched.clean()
        finally:
            await client.aclose()
