"""How `shoal submit --follow` ends, against a real control plane, worker and demo model: the
outcome on a line of its own, why it did not complete, the files saved as a zip, the tokens
and cost, and an exit status for each ending."""

from __future__ import annotations

import asyncio
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from tests.cli.harness import LOW_SCORE_PLAN, Plane, Run
from tests.runtime.harness import wait_until

FAILING_PLAN = [{"name": "notes", "tool": "openai_compat",
                 "description": "Write notes.md. [demo:fail]"}]


async def follow(plane: Plane, tmp_path: Path, plan: list[dict[str, Any]], *extra: str) -> Run:
    """`shoal submit --plan PLAN EXTRA --follow`, its files saved under `tmp_path/out`."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return await plane.shoal("submit", "Notes", "--plan", str(path), *extra, "--follow",
                             "--output", str(tmp_path / "out"))


def ending(result: Run, status: str) -> str:
    """The task's id, from the ending's first line: `Task STATUS: ID`, a line of its own."""
    found = re.search(rf"^Task {status}: ([0-9a-f-]{{36}})$", result.stdout, re.MULTILINE)
    assert found, result.stdout + result.stderr
    return found.group(1)


async def test_a_completed_task_ends_with_its_files_and_usage(plane: Plane,
                                                              tmp_path: Path) -> None:
    """Exit 0; the ending names the zip saved (which holds the task's file) and the tokens
    and cost used, after the live view's last line."""
    result = await follow(plane, tmp_path, LOW_SCORE_PLAN, "--quality", "off")
    assert result.returncode == 0, result.stdout + result.stderr
    task_id = ending(result, "completed")
    saved = tmp_path / "out" / f"{task_id}.zip"
    assert f"  Files:   {saved} (1 file)" in result.stdout
    with zipfile.ZipFile(saved) as archive:
        assert [n.rsplit("/", 1)[-1] for n in archive.namelist()] == ["notes.md"]
    used = re.search(r"^  Used:    ([\d,]+) tokens in, ([\d,]+) out; \$\d+\.\d{4}$",
                     result.stdout, re.MULTILINE)
    assert used, result.stdout
    detail = (await plane.http.get(f"/api/v1/tasks/{task_id}")).json()
    assert int(used.group(1).replace(",", "")) == detail["usage"]["input_tokens"] > 0
    assert result.stdout.endswith("\n")


async def test_a_failed_task_exits_3_saying_why(plane: Plane, tmp_path: Path) -> None:
    """A task whose step fails every attempt: exit 3, with the task's error and no files."""
    result = await follow(plane, tmp_path, FAILING_PLAN, "--quality", "off")
    assert result.returncode == 3, result.stdout + result.stderr
    ending(result, "failed")
    assert "  Why:     Step 'notes' failed after 3 attempt(s)" in result.stdout
    assert "  Files:   none were produced" in result.stdout
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


async def test_a_task_out_of_budget_exits_5(plane: Plane, tmp_path: Path) -> None:
    """A task past its token budget ends the follow (it has no ending event of its own):
    exit 5, saying which limit ran out."""
    result = await follow(plane, tmp_path, LOW_SCORE_PLAN, "--quality", "off",
                          "--budget-tokens", "1")
    assert result.returncode == 5, result.stdout + result.stderr
    ending(result, "budget_exceeded")
    assert "  Why:     The task's budget ran out (tokens: " in result.stdout


async def test_a_rejected_task_exits_4(plane: Plane, tmp_path: Path) -> None:
    """A task rejected at its checkpoint from elsewhere while followed: exit 4."""
    following = asyncio.create_task(follow(plane, tmp_path, LOW_SCORE_PLAN))

    async def waiting() -> str | None:
        page = (await plane.http.get("/api/v1/checkpoints",
                                     params={"status": "pending_review"})).json()
        return page["checkpoints"][0]["checkpoint_id"] if page["checkpoints"] else None

    checkpoint_id = await wait_until(waiting, what="the followed task's checkpoint")
    resp = await plane.http.post(f"/api/v1/checkpoints/{checkpoint_id}/reject",
                                 json={"reason": "Not these notes"})
    assert resp.status_code == 200, resp.text
    result = await following
    assert result.returncode == 4, result.stdout + result.stderr
    ending(result, "cancelled")
    assert "Not these notes" in result.stdout
