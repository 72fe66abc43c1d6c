"""The live view of `shoal submit --follow`: what it draws from a task's events."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from shoal.cli.follow import Progress


def _event(event_type: str, /, **data: Any) -> dict[str, Any]:
    return {"type": event_type, "data": data, "seq": 1, "timestamp": "2025-01-01T00:00:00Z"}


def _screen(view: Progress) -> str:
    console = Console(file=io.StringIO(), width=200, no_color=True)
    console.print(view.render())
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


CHECKPOINT_ID = "11111111-2222-3333-4444-555555555555"


def test_follow_view_shows_a_checkpoint_until_it_is_decided() -> None:
    """`checkpoint_ready` shows why and how to answer; `checkpoint_decided` clears it."""
    view = Progress("t1")
    view.apply(_event("task_update", status="checkpoint_pending", progress=50))
    view.apply(_event("checkpoint_ready", checkpoint_id=CHECKPOINT_ID, reason="low_score",
                      status="pending_review", subtask_id="a",
                      message="'notes' scored 3 (below 7).", completed_count=0,
                      average_score=3.0, overall_score=3.0, deadline_at=None))
    screen = _screen(view)
    assert "waiting for you" in screen
    assert "'notes' scored 3 (below 7)." in screen
    assert "Score 3" in screen
    assert f"shoal approve {CHECKPOINT_ID}" in screen
    assert f'shoal reject {CHECKPOINT_ID} --reason "why"' in screen
    assert f"shoal correct {CHECKPOINT_ID} --type TYPE --guidance" in screen
    view.apply(_event("checkpoint_decided", checkpoint_id=CHECKPOINT_ID, decision="approve",
                      status="approved", reason=None))
    view.apply(_event("task_update", status="in_progress", progress=60))
    screen = _screen(view)
    assert CHECKPOINT_ID not in screen
    assert "waiting for you" not in screen


def test_follow_view_nests_quality_steps_and_shows_scores() -> None:
    """Quality steps sit indented under their subtask, whose row shows score and review."""
    view = Progress("t1")
    view.apply(_event("task_update", status="in_progress", progress=10, plan=[
        {"subtask_id": "a", "name": "Storage", "kind": "agent", "status": "queued"},
        {"subtask_id": "b", "name": "Docs", "kind": "agent", "status": "queued"}]))
    view.apply(_event("subtask_update", subtask_id="j", name="Judge: Storage", kind="judge",
                      target_id="a", status="completed"))
    view.apply(_event("evaluation", subtask_id="a", name="Storage", overall=8.7, scores={},
                      missing=[]))
    view.apply(_event("review", subtask_id="a", name="Storage", cycle=1, score=9.0,
                      decision="approved", outcome="approve", issues=0))
    lines = _screen(view).splitlines()
    storage = next(i for i, line in enumerate(lines) if "Storage" in line)
    assert "score 8.7 · review: approve" in lines[storage]
    assert "└ Judge" in lines[storage + 1]
    assert "Docs" in lines[storage + 2]


def test_follow_view_shows_the_models_words_as_they_stream() -> None:
    """`agent_token` events show the end of what the model is writing, on one line; the next
    log line takes its place."""
    view = Progress("t1")
    view.apply(_event("subtask_update", subtask_id="a", name="Notes", kind="agent",
                      status="in_progress"))
    for piece in ("Cats hunt ", "birds\nin ", "city parks"):
        view.apply({**_event("agent_token", subtask_id="a", text=piece), "seq": 0})
    assert "… Cats hunt birds in city parks" in _screen(view)
    view.apply(_event("agent_log", subtask_id="a", message="write_file notes.md (12 bytes)"))
    assert "write_file notes.md" in _screen(view)
