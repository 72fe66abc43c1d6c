"""The task commands against a real control plane: `submit` (its options, --follow), `task
report`, `task share`, `export`, `task delete`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.harness import LOW_SCORE_PLAN, Plane


async def test_submit_with_quality_off_skips_the_loop(plane: Plane, tmp_path: Path) -> None:
    """`shoal submit --quality off` runs a low-scoring plan straight to completion."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(LOW_SCORE_PLAN), encoding="utf-8")
    result = await plane.shoal("submit", "Notes", "--plan", str(plan), "--quality", "off",
                               "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "completed" in result.stdout
    bad = await plane.shoal("submit", "Notes", "--quality", "maybe")
    assert bad.returncode == 1
    assert "quality" in bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout


NOTE = """\
name: note
version: 1
description: One note, which is the report.
roles:
  writer: {prompt: "Write a short note on {query}.", tools: [openai_compat]}
steps:
  - {id: write, kind: agent, role: writer, writes: report}
result: report
"""


async def test_what_a_user_owns_from_the_command_line(plane: Plane, tmp_path: Path) -> None:
    """`submit --source --budget-tokens`, then the report as Markdown and as a PDF, a share
    link, the account's export, and `task delete`."""
    assert (await plane.http.post("/api/v1/workflows", json={"document": NOTE})).status_code \
        == 201
    mine = tmp_path / "mine.md"
    mine.write_text("# Cats\n\nTwelve in Oslo.\n", encoding="utf-8")
    done = await plane.shoal("submit", "Cats", "--workflow", "note", "--source", str(mine),
                             "--budget-tokens", "1000000", "--follow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Sources: mine.md (markdown)" in done.stdout
    page = (await plane.http.get("/api/v1/tasks", params={"limit": 1})).json()["tasks"][0]
    task_id = page["task_id"]
    detail = (await plane.http.get(f"/api/v1/tasks/{task_id}")).json()
    assert detail["sources"] == [{"name": "mine.md", "kind": "markdown", "size": 24}]
    assert detail["budget"] == {"tokens": 1000000}
    report = await plane.shoal("task", "report", task_id)
    assert report.returncode == 0, report.stderr
    assert report.stdout.strip()
    pdf = tmp_path / "report.pdf"
    saved = await plane.shoal("task", "report", task_id, "--pdf", str(pdf))
    assert saved.returncode == 0, saved.stderr
    assert pdf.read_bytes().startswith(b"%PDF")
    shared = await plane.shoal("task", "share", task_id)
    assert shared.stdout.strip().startswith(plane.server.url + "/s/shs_"), shared.stdout
    exported = tmp_path / "mine.zip"
    assert (await plane.shoal("export", str(exported))).returncode == 0
    assert exported.read_bytes().startswith(b"PK")
    deleted = await plane.shoal("task", "delete", task_id, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert (await plane.http.get(f"/api/v1/tasks/{task_id}")).status_code == 404
    again = await plane.shoal("task", "delete", task_id, "--yes")
    assert again.returncode == 1
    assert "No task" in again.stderr
    assert "Traceback" not in again.stderr
