"""A typed plan on the task page, in a real browser against a real control plane and echo
worker, run by a document of our own whose planner and judges answer with the JSON that opens
their prompts: each planned node says its type, the graph's layers are headed by their wave, a
gap is a badge with its reason, a gate's judges and retry are its task's quality steps, and the
task says it ended partial; a plan waiting for approval is read as a table in the checkpoint
dialog, then approved, rejected, or edited (a bad edit's refusal shown in the dialog)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from playwright.async_api import Locator, Page, expect

from shoal.api.server import running_server
from shoal.config import Settings
from tests.runtime.harness import by_name, echo_worker, login, sse_events, task_detail
from tests.web.browser import SCREENSHOTS, browser_page, sign_in
from tests.web.test_accessibility import named_and_fitting
from tests.web.test_owned import both_themes, refusals_only

PLAN = json.dumps({"subtasks": [
    {"name": "Find tides", "type": "find", "description": "passages on the tides"},
    {"name": "Count ports", "type": "count", "description": "rows of ports"},
    {"name": "Write up", "type": "write", "description": "the report",
     "dependencies": ["Find tides", "Count ports"]}]})
# `find`'s judge never passes it: judged, retried, judged again, then a gap.
TIDES = f"""\
name: tides
version: 1
description: Find, count, write up; in waves, each finding and count gated by a judge.
roles:
  planner: {{prompt: '{PLAN}', tools: [echo]}}
  finder: {{prompt: "Find {{item}}", tools: [echo]}}
  counter: {{prompt: "Count {{item}}", tools: [echo]}}
  writer: {{prompt: "Write {{item}}", tools: [echo]}}
  doubter:
    prompt: '{{"score": 0.1, "feedback": "thin"}}'
    tools: [echo]
    output: {{type: object, required: [score], properties: {{score: {{type: number}}}}}}
  judge:
    prompt: '{{"score": 0.9}}'
    tools: [echo]
    output: {{type: object, required: [score], properties: {{score: {{type: number}}}}}}
steps:
  - id: plan
    kind: expand
    role: planner
    schedule: waves
    types:
      find:
        role: finder
        if_failed: gap
        gate: {{judge: doubter, min_score: 0.5, retries: 1, then: gap, hint: Look wider.}}
      count: {{role: counter, gate: {{judge: judge, min_score: 0.5}}}}
      write: {{role: writer}}
"""
APPROVED = TIDES.replace("name: tides\n", "name: tides_approved\n").replace(
    "    schedule: waves\n", "    schedule: waves\n    approve_plan: true\n")
EDITED = {"subtasks": [
    {"name": "Find ports", "type": "find", "description": "passages on the ports"},
    {"name": "Write it", "type": "write", "description": "the report",
     "dependencies": ["Find ports"]}]}


async def start(client: httpx.AsyncClient, workflow: str, description: str) -> str:
    """Add `workflow`'s document if it is not there yet, then submit a task of it."""
    document = {"tides": TIDES, "tides_approved": APPROVED}[workflow]
    added = await client.post("/api/v1/workflows", json={"document": document})
    assert added.status_code in (201, 409), added.text
    resp = await client.post("/api/v1/tasks", json={"workflow": workflow,
                                                    "description": description})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["task_id"])


async def plan_dialog(page: Page, task_id: str) -> Locator:
    """The task's page, with its plan checkpoint's dialog open on it."""
    await page.goto(f"/tasks/{task_id}")
    dialog = page.get_by_role("dialog")
    await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: plan")
    return dialog


async def test_a_typed_plan_shows_its_types_waves_gaps_and_gates(settings: Settings) -> None:
    """Each node says its type, the layers are headed Wave 1 and Wave 2, the gap is a badge
    whose title says why, its judges and retry are its quality steps, and the task is
    partial; the plan's list says the same by wave."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await start(client, "tides", "The tides")
            events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
            assert events[-1]["type"] == "task_complete", events[-1]
            assert (events[-1]["data"]["partial"], events[-1]["data"]["gaps"]) == \
                (True, ["Find tides"])
            why: str = by_name(await task_detail(client, task_id))["Find tides"]["gap"]
            async with browser_page("typed-plan", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.locator("#task-partial")).to_have_text(
                    "Partial: 1 gap (Find tides) ·")
                graph = page.locator("#graph")
                await expect(graph.locator(".heading")).to_have_text(["Wave 1", "Wave 2"])
                find = graph.locator(".node", has_text="Find tides")
                await expect(find).to_have_attribute("data-plan-type", "find")
                await expect(find.locator("small")).to_contain_text("find · completed")
                gap = find.locator(".badge.gap")
                await expect(gap).to_have_text("gap")
                await expect(gap).to_have_attribute("title", f"Gap: {why}")
                await expect(find).to_have_attribute("aria-description", re.compile(
                    r"^Wave 1\. Gap: .+\. Waits for plan$"))
                write = graph.locator(".node", has_text="Write up")
                await expect(write.locator("small")).to_contain_text("write · completed")
                await expect(write.locator(".badge.gap")).to_have_count(0)
                await expect(graph.locator(".node[data-gap]")).to_have_count(1)

                listed = page.locator("#plan")
                await expect(listed.locator("tbody[data-wave='0'] th")).to_have_text("Wave 1 of 2")
                await expect(listed.locator("tbody[data-wave='1']")).to_contain_text("Write up")
                row = listed.locator("tr", has_text="Find tides")
                await expect(row).to_contain_text("judged 2 times, retried once")
                await expect(row).to_contain_text(f"Gap: {why}")
                await expect(listed.locator("tr", has_text="Count ports")).to_contain_text(
                    "judged once")

                await find.click()
                steps = page.locator("#quality-steps li")
                await expect(steps).to_have_count(3)
                assert [await s.get_attribute("data-kind") for s in await steps.all()] == \
                    ["judge", "correct", "judge"]
                await expect(steps.nth(1)).to_contain_text("Retry: Find tides")
                await named_and_fitting(page)
                await both_themes(page, "typed-plan")
                watched.clean()
        finally:
            await client.aclose()


async def test_a_plan_is_read_then_approved_or_rejected_in_the_dialog(
        settings: Settings) -> None:
    """The plan is a table of task, type and dependencies; approving one task's runs it,
    rejecting another's with a reason cancels that task."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            ids = {name: await start(client, "tides_approved", f"Tides to {name}")
                   for name in ("approve", "reject")}
            for task_id in ids.values():
                await sse_events(client, task_id, until={"checkpoint_ready"})
            async with browser_page("plan-approve", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                status = page.locator("#task-status")
                dialog = await plan_dialog(page, ids["approve"])
                await expect(dialog).to_contain_text("3 task(s) in 2 wave(s)")
                rows = dialog.locator("#cp-plan tbody tr")
                await expect(rows).to_have_count(3)
                await expect(rows.nth(0)).to_have_text(re.compile(r"^Find tides\s*find\s*—$"))
                await expect(rows.nth(2).locator("td")).to_have_text(
                    ["write", "Find tides, Count ports"])
                await named_and_fitting(page)
                await page.screenshot(path=str(SCREENSHOTS / "plan-dialog.png"))
                await dialog.get_by_role("button", name="Approve").click()
                await expect(dialog).to_be_hidden()
                await expect(status).to_have_text("completed")
                await expect(page.locator("#graph .node[data-plan-type]")).to_have_count(3)

                dialog = await plan_dialog(page, ids["reject"])
                await dialog.get_by_label("Why (optional)").fill("Not the tides again.")
                await dialog.get_by_role("button", name="Reject").click()
                await expect(status).to_have_text("cancelled")
                await expect(dialog).to_be_hidden()
                watched.clean()
            detail = await task_detail(client, ids["reject"])
            assert "Not the tides again." in (detail["error"] or "")
        finally:
            await client.aclose()


async def test_an_edited_plan_is_checked_then_run(settings: Settings) -> None:
    """An edit that breaks the plan's schema is refused in the dialog, which stays open;
    a good edit runs instead of the planner's plan, drawn live to its partial end."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await start(client, "tides_approved", "Tides to edit")
            await sse_events(client, task_id, until={"checkpoint_ready"})
            async with browser_page("plan-edit", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                dialog = await plan_dialog(page, task_id)
                await dialog.get_by_text("Edit plan").click()
                edited = dialog.get_by_label("The plan (JSON, as the planner writes it)")
                shown: dict[str, Any] = json.loads(await edited.input_value())
                assert [t["name"] for t in shown["subtasks"]] == \
                    ["Find tides", "Count ports", "Write up"]
                await edited.fill(json.dumps({"subtasks": [
                    {"name": "Dance", "type": "dance", "description": "x"}]}))
                send = dialog.get_by_role("button", name="Run the edited plan")
                await send.click()
                await expect(dialog.locator("#cp-answer-error")).to_contain_text(
                    "The edited plan does not fit")
                await expect(dialog).to_be_visible()
                watched.errors = refusals_only(watched.errors, 422)  # shown above
                await page.screenshot(path=str(SCREENSHOTS / "plan-dialog-refused.png"))
                await edited.fill(json.dumps(EDITED))
                await send.click()
                await expect(dialog).to_be_hidden()
                await expect(page.locator("#task-status")).to_have_text("completed")
                nodes = page.locator("#graph .node[data-plan-type]")
                await expect(nodes).to_have_count(2)
                await expect(nodes.filter(has_text="Find ports").locator(".badge.gap")) \
                    .to_have_text("gap")
                await expect(page.locator("#task-partial")).to_have_text(
                    "Partial: 1 gap (Find ports) ·")
                watched.clean()
            assert sorted(by_name(await task_detail(client, task_id))) == \
                ["Find ports", "Gate: Find ports", "Gate: Find ports (round 2)",
                 "Retry: Find ports", "Write it", "plan"]
        finally:
            await client.aclose()
