"""The server's refusals in the command line's words, against a real control plane: options
and commands, not API routes and fields; a misspelt workflow gets "did you mean"."""

from __future__ import annotations

from pathlib import Path

from tests.cli.harness import Plane, Run


def refused(result: Run) -> str:
    """The refusal a command printed, after checking it failed cleanly and spoke no API."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "/api/v1" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return result.stderr


async def test_a_refused_submission_names_the_options(plane: Plane) -> None:
    """A misspelt workflow is told the one it may mean; a workflow that reads files is told
    --source; a parameter is --param NAME."""
    said = refused(await plane.shoal("submit", "Cats", "--workflow", "pipline"))
    assert said == ("The task was not submitted:\n  --workflow: no workflow named 'pipline'; "
                    "did you mean 'pipeline'? `shoal workflows list` lists them.\n")
    said = refused(await plane.shoal("submit", "Cats", "--workflow", "research"))
    assert "--source: the research workflow reads your own files: give them with --source " \
           "FILE" in said
    said = refused(await plane.shoal("submit", "Cats", "--workflow", "pipeline", "--param",
                                     "max_revisions=99"))
    assert "  --param max_revisions: " in said


async def test_a_misspelt_workflow_shown_is_told_what_it_may_mean(plane: Plane) -> None:
    """`shoal workflows show` of a near name suggests the workflow."""
    said = refused(await plane.shoal("workflows", "show", "supervisr"))
    assert said.startswith("No workflow named 'supervisr'; did you mean 'supervisor'?")


async def test_deleting_a_running_task_says_to_cancel_it(plane: Plane) -> None:
    """A running task is not deleted: the command says `shoal cancel` first."""
    task_id = await plane.submit([{"name": "wait", "tool": "echo", "description": "waits",
                                   "options": {"delay": 30}}])
    said = refused(await plane.shoal("task", "delete", task_id, "--yes"))
    assert f"cancel it first (shoal cancel {task_id}), then delete it." in said


async def test_a_refused_session_says_how_to_sign_in_again(plane: Plane) -> None:
    """A token the server does not take is told `shoal login --server URL`."""
    said = refused(await plane.shoal("tasks", "--token", "not-a-token"))
    assert said.startswith(f"{plane.server.url} refused your session: ")
    assert f"Sign in again: shoal login --server {plane.server.url}" in said


async def test_a_refused_submission_leaves_no_upload_behind(plane: Plane,
                                                            tmp_path: Path) -> None:
    """`submit --source` uploads, then submits: a task refused (here, its workflow unknown)
    takes its upload with it; one taken keeps its upload."""
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe tide turns at six.\n", encoding="utf-8")
    refused(await plane.shoal("submit", "Sum up", "--workflow", "pipline", "--source",
                              str(notes)))
    assert (await plane.http.get("/api/v1/uploads")).json()["uploads"] == []
    taken = await plane.shoal("submit", "Sum up", "--workflow", "pipeline", "--source",
                              str(notes))
    assert taken.returncode == 0, taken.stderr
    assert [u["name"] for u in (await plane.http.get("/api/v1/uploads")).json()["uploads"]] \
        == ["notes.md"]
