"""`shoal submit --follow`: live progress of a task in the terminal.

One row per subtask; the quality steps of a subtask (evaluate, judge, review, fix) sit dimmed
and indented under it, and the subtask's own row carries its score and review outcome. When a
checkpoint opens, a block under the table says why and how to answer it, until it is decided.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from shoal.client import ShoalClient
from shoal.errors import ShoalError

STYLE = {"completed": "green", "failed": "red", "cancelled": "yellow", "in_progress": "cyan",
         "queued": "blue", "pending": "dim", "verifying": "magenta", "correcting": "yellow",
         "checkpoint_pending": "bold yellow", "awaiting_input": "bold yellow"}
STATUS_LABEL = {"checkpoint_pending": "waiting for you",
                "awaiting_input": "waiting for your answer"}
ENDINGS = {"task_complete": "completed", "task_failed": "failed", "task_cancelled": "cancelled"}
QUALITY_KINDS = frozenset({"evaluate", "judge", "review", "correct"})
REASONS = {
    "frequency": "a scheduled check-in (the task's checkpoint frequency)",
    "low_score": "a low evaluation score",
    "review_escalation": "the peer review asks a person to decide",
    "max_review_cycles": "the peer review did not approve after its last cycle",
    "correction_failed": "a correction failed",
    "question": "the workflow asks you a question",
    "gate": "a score is below the workflow's gate",
}
CORRECTION_TYPES = ("wrong_approach", "incomplete", "bug", "style", "missing_feature", "other")
CheckpointHandler = Callable[[dict[str, Any]], Awaitable[None]]
STREAM_TAIL = 400  # characters of streamed model text kept per subtask for the view


def describe_reason(reason: str) -> str:
    """Why a checkpoint opened, in words."""
    return REASONS.get(reason, reason.replace("_", " "))


def answer_commands(checkpoint_id: str, reason: str = "") -> list[str]:
    """The commands that answer a checkpoint, ready to copy."""
    if reason == "question":
        return [f'shoal answer {checkpoint_id} "your answer"',
                f'shoal reject {checkpoint_id} --reason "why"']
    if reason == "gate":
        return [f"shoal approve {checkpoint_id}", f'shoal reject {checkpoint_id} --reason "why"']
    return [f"shoal approve {checkpoint_id}",
            f'shoal reject {checkpoint_id} --reason "why"',
            f'shoal correct {checkpoint_id} --type TYPE --guidance "what to change"',
            f"  (TYPE: {' | '.join(CORRECTION_TYPES)})"]


class Progress:
    """What the terminal shows: one row per subtask, status, a bar and its last log line."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.status = "pending"
        self.progress = 0
        self.rows: dict[str, dict[str, Any]] = {}
        self.notices: list[str] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}  # open ones, by id
        self.ending: str | None = None
        self.error: str | None = None

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event in."""
        kind, data = event["type"], event["data"]
        if kind == "task_update":
            self._task_update(data)
        elif kind == "subtask_update":
            self.rows.setdefault(data["subtask_id"], {}).update(data)
        elif kind == "agent_log" and data.get("subtask_id") and not self._is_planner(data):
            # the last line that says something: a judge's JSON would otherwise show "}"
            lines = [ln for ln in data["message"].splitlines()
                     if any(ch.isalnum() for ch in ln)] or [""]
            self.rows.setdefault(data["subtask_id"], {})["log"] = lines[-1].strip()[:120]
        elif kind == "agent_token" and data.get("subtask_id"):
            # the model's words as they come: the end of what it is writing, on one line
            row = self.rows.setdefault(data["subtask_id"], {})
            streamed = (row.get("streamed", "") + data.get("text", ""))[-STREAM_TAIL:]
            row["streamed"] = streamed
            row["log"] = "… " + " ".join(streamed.split())[-120:]
        elif kind in ("evaluation", "review"):
            self.rows.setdefault(data["subtask_id"], {})[kind] = data
        elif kind == "checkpoint_ready":
            self.checkpoints[data["checkpoint_id"]] = data
        elif kind == "checkpoint_decided":
            self.checkpoints.pop(data.get("checkpoint_id", ""), None)
        elif kind == "notice":
            self.notices = [*self.notices[-4:], data.get("message", "")]
        elif kind in ENDINGS:
            self.ending = ENDINGS[kind]
            self.error = data.get("error") or data.get("reason")
            self.checkpoints.clear()  # an ended task closes its checkpoints

    def _task_update(self, data: dict[str, Any]) -> None:
        self.status = data.get("status", self.status)
        self.progress = data.get("progress", self.progress)
        for sub in data.get("plan", []):
            self.rows.setdefault(sub["subtask_id"], {}).update(sub)
        if data.get("plan"):
            for row in self.rows.values():
                if row.get("role") == "planner":
                    row["log"] = (f"planned {len(data['plan'])} subtasks "
                                  f"({data.get('plan_source', 'planner')})")

    def _is_planner(self, data: dict[str, Any]) -> bool:
        return bool(self.rows.get(data["subtask_id"], {}).get("role") == "planner")

    def ordered_rows(self) -> list[tuple[dict[str, Any], bool]]:
        """Rows in display order, each with whether it is a quality step under its target."""
        children: dict[str, list[dict[str, Any]]] = {}
        top: list[tuple[str, dict[str, Any]]] = []
        for sid, row in self.rows.items():
            target = row.get("target_id")
            if row.get("kind") in QUALITY_KINDS and target in self.rows:
                children.setdefault(target, []).append(row)
            else:
                top.append((sid, row))
        ordered: list[tuple[dict[str, Any], bool]] = []
        for sid, row in top:
            ordered.append((row, False))
            ordered.extend((child, True) for child in children.get(sid, []))
        return ordered

    def render(self) -> Group:
        """The current picture."""
        table = Table(expand=True, show_edge=False)
        table.add_column("subtask", ratio=3, min_width=12, overflow="ellipsis", no_wrap=True)
        table.add_column("status", min_width=11, no_wrap=True)
        table.add_column("progress", min_width=10, no_wrap=True)
        table.add_column("tool", min_width=6, max_width=14, overflow="ellipsis", no_wrap=True)
        table.add_column("quality", overflow="ellipsis", no_wrap=True)
        table.add_column("last output", ratio=2, overflow="ellipsis", no_wrap=True)
        for row, nested in self.ordered_rows():
            table.add_row(*_cells(row, nested), style="dim" if nested else None)
        label = STATUS_LABEL.get(self.status, self.status)
        head = Text(f"Task {self.task_id}  {label}  {self.progress}%", style="bold")
        notes = [Text("! " + n, style="yellow") for n in self.notices]
        blocks = [line for cp in self.checkpoints.values() for line in checkpoint_block(cp)]
        return Group(head, table, *notes, *blocks)


def _cells(row: dict[str, Any], nested: bool) -> tuple[Text | str, ...]:
    status = row.get("status", "pending")
    done = 100 if status == "completed" else int(row.get("progress") or 0)
    bar = "█" * (done // 10) + "░" * (10 - done // 10)
    name = str(row.get("name", "?"))
    if nested:  # "Judge: Todo storage module" under "Todo storage module" reads "└ Judge"
        name = "  └ " + name.split(":", 1)[0]
    # Text, not str: names and logs are data ("[demo model] …"), never markup
    return (Text(name), Text(status, style=STYLE.get(status, "")), bar,
            Text(str(row.get("assigned_tool") or "")), quality_text(row),
            Text(str(row.get("log", ""))))


def quality_text(row: dict[str, Any]) -> Text:
    """An agent subtask's evaluation score and review outcome: "score 8.7 · review: approve"."""
    parts: list[Text] = []
    evaluation = row.get("evaluation") or {}
    if evaluation:
        overall = evaluation.get("overall")
        if overall is None:
            parts.append(Text("score —", style="dim"))
        else:
            style = "red" if overall < 7 else "green" if overall >= 8 else "yellow"
            parts.append(Text(f"score {overall:.1f}", style=style))
    review = row.get("review") or {}
    if review.get("outcome"):
        style = {"approve": "green", "fix": "yellow", "escalate": "red"}.get(review["outcome"], "")
        parts.append(Text(f"review: {review['outcome']}", style=style))
    return Text(" · ").join(parts)


def checkpoint_block(cp: dict[str, Any]) -> list[Text]:
    """The lines shown under the table while a checkpoint waits: why, scores, how to answer."""
    cid = str(cp["checkpoint_id"])
    reason = str(cp.get("reason", ""))
    lines = [Text(f"⏸ Checkpoint {cid} is waiting for you", style="bold yellow"),
             Text(f"  Why: {describe_reason(reason)}."
                  + (f" {cp['message']}" if cp.get("message") else ""))]
    if cp.get("question"):
        lines.append(Text(f"  Question: {cp['question']}", style="bold"))
    facts = []
    if cp.get("overall_score") is not None:
        facts.append(f"score {cp['overall_score']:g}")
    if cp.get("average_score") is not None:
        facts.append(f"average so far {cp['average_score']:g}")
    if cp.get("completed_count") is not None:
        facts.append(f"{cp['completed_count']} subtask(s) done")
    if cp.get("deadline_at"):
        facts.append(f"decide before {cp['deadline_at']}")
    if facts:
        text = " · ".join(facts)
        lines.append(Text(f"  {text[0].upper()}{text[1:]}"))
    lines.append(Text("  Answer it with one of:"))
    lines.extend(Text("    " + command, style="bold")
                 for command in answer_commands(cid, reason))
    lines.append(Text(f"  Details: shoal checkpoint show {cid}", style="dim"))
    return lines


async def follow(client: ShoalClient, task_id: str, console: Console, *,
                 on_checkpoint: CheckpointHandler | None = None) -> str:
    """Show live progress until the task ends; returns its final status. Reconnects on drops.

    `on_checkpoint`, if given, is awaited with the data of each `checkpoint_ready` event; its
    errors are printed and the follow goes on.
    """
    view = Progress(task_id)
    last = 0
    with Live(view.render(), console=console, refresh_per_second=8, transient=False) as live:
        while view.ending is None:
            try:
                async for event in client.events(task_id, since=last):
                    last = event["seq"] or last  # a live-only event (seq 0) keeps the place
                    view.apply(event)
                    live.update(view.render())
                    if event["type"] == "checkpoint_ready" and on_checkpoint is not None:
                        await _answer(on_checkpoint, event["data"], console)
                    if view.ending:
                        break
            except (httpx.TransportError, httpx.RemoteProtocolError):
                console.print("[yellow]Connection lost; reconnecting…[/]")
                await asyncio.sleep(1.0)
    if view.error:
        console.print(Text(view.error, style="red"))
    return view.ending or "unknown"


async def _answer(handler: CheckpointHandler, data: dict[str, Any], console: Console) -> None:
    try:
        await handler(data)
    except Exception as exc:  # a failing handler must not end the follow; say what happened
        message = exc.message if isinstance(exc, ShoalError) else f"{type(exc).__name__}: {exc}"
        console.print(Text(f"Could not answer checkpoint {data.get('checkpoint_id')}: {message}",
                           style="red"), soft_wrap=True)


# ---- checkpoints, as `shoal checkpoints` and `shoal checkpoint show` print them -------------


def age(stamp: str | None) -> str:
    """How long ago an ISO time was: "42s", "5m", "3h", "2d"."""
    if not stamp:
        return ""
    seconds = max(0, int((datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def clip(text: str, size: int) -> str:
    """`text`, cut to `size` characters with an ellipsis."""
    return text if len(text) <= size else text[:size - 1] + "…"


def score_label(cp: dict[str, Any]) -> str:
    """A checkpoint's score for a list: its subtask's, else the task's average."""
    if cp.get("overall_score") is not None:
        return f"{cp['overall_score']:g}"
    if cp.get("average_score") is not None:
        return f"avg {cp['average_score']:g}"
    return ""


def checkpoint_scores(cp: dict[str, Any]) -> list[Any]:
    """The subtask in question, its score per dimension, the average so far."""
    parts: list[Any] = []
    subtask = cp.get("subtask") or {}
    if subtask:
        parts.append(f"Subtask: {subtask.get('name')} ({subtask.get('subtask_id')})")
    scores = cp.get("evaluation_scores") or {}
    if scores:
        table = Table("dimension", "score", title="Evaluation", title_justify="left")
        for name, value in scores.items():
            table.add_row(Text(name), "n/a" if value is None else f"{value:g}")
        table.add_row(Text("overall", style="bold"), score_label(cp) or "n/a")
        parts.append(table)
    if cp.get("average_score") is not None:
        parts.append(f"Average score of the task so far: {cp['average_score']:g}")
    review = subtask.get("review") or {}
    if review:
        parts.append(f"Peer review (cycle {review.get('cycle')}): {review.get('decision')}, "
                     f"score {review.get('score')}, outcome {review.get('outcome')}")
        for issue in review.get("issues") or []:
            where = "".join(f"{sep}{issue[key]}" for sep, key in ((" ", "file"), (":", "line"))
                            if issue.get(key) is not None and issue.get("file"))
            parts.append(f"  - [{issue.get('severity')}]{where} {issue.get('description')}"
                         + (f" Suggestion: {issue['suggestion']}" if issue.get("suggestion")
                            else ""))
    return parts


def checkpoint_work(cp: dict[str, Any]) -> list[str]:
    """What is done and what comes next."""
    parts = [f"Completed subtasks: {len(cp['subtasks_completed']) or 'none yet'}"]
    for done in cp["subtasks_completed"]:
        files = ", ".join(done.get("files_created") or []) or "no files"
        parts.append(f"  - {done.get('name')} ({files})")
    names = [n.get("name", "?") for n in cp["next_subtasks"]]
    parts.append(f"Next: {', '.join(names) if names else 'nothing; this is the end of the plan'}")
    return parts


def checkpoint_corrections(cp: dict[str, Any]) -> list[str]:
    """Corrections already sent from this checkpoint."""
    return [f"Correction ({c['correction_type']}): {c['guidance']} → subtask "
            f"{c['correction_subtask_id']}" for c in cp.get("corrections") or []]
