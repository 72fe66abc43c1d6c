"""`shoal submit --follow`: live progress of a task in the terminal.

One row per subtask; the quality steps of a subtask (evaluate, judge, review, fix) sit dimmed
and indented under it, and the subtask's own row carries its score and review outcome. When a
checkpoint opens, a block under the table says why and how to answer it, until it is decided;
a workflow's question is asked at the terminal (`AskQuestions`) unless `--no-input`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from shoal.cli.client import ApiError, ShoalClient
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
_SCREEN: ContextVar[_Screen | None] = ContextVar("shoal_follow_screen", default=None)


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
            self.checkpoints.clear()  # an ended task closes its checkpoints

    def _task_update(self, data: dict[str, Any]) -> None:
        self.status = data.get("status", self.status)
        if self.status == "budget_exceeded":  # the one ending with no event of its own
            self.ending = self.status
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

    `on_checkpoint`, if given, is awaited with the data of each `checkpoint_ready` event (the
    events go on after it returns; `view_paused` inside it stops the live view for a prompt);
    its errors are printed and the follow goes on.
    """
    view = Progress(task_id)
    last = 0
    screen = _Screen(console, view.render())
    try:
        while view.ending is None:
            try:
                async for event in client.events(task_id, since=last):
                    last = event["seq"] or last  # a live-only event (seq 0) keeps the place
                    view.apply(event)
                    screen.live.update(view.render())
                    if event["type"] == "checkpoint_ready" and on_checkpoint is not None:
                        await _answer(on_checkpoint, event["data"], console, screen)
                    if view.ending:
                        break
            except (httpx.TransportError, httpx.RemoteProtocolError):
                console.print("[yellow]Connection lost; reconnecting…[/]")
                await asyncio.sleep(1.0)
    finally:
        screen.live.stop()
        if not console.is_terminal:  # a terminal's view ends its last line; a file's does not
            console.line()
    return view.ending or "unknown"


async def _answer(handler: CheckpointHandler, data: dict[str, Any], console: Console,
                  screen: _Screen) -> None:
    shown = _SCREEN.set(screen)  # for `view_paused`, in the handler
    try:
        await handler(data)
    except Exception as exc:  # a failing handler must not end the follow; say what happened
        message = exc.message if isinstance(exc, ShoalError) else f"{type(exc).__name__}: {exc}"
        console.print(Text(f"Could not answer checkpoint {data.get('checkpoint_id')}: {message}",
                           style="red"), soft_wrap=True)
    finally:
        _SCREEN.reset(shown)


class _Screen:
    """A follow's live view. Paused, it stops (its last picture stays on the screen) and a new
    one starts below whatever was printed meanwhile: the same one, started again, would begin
    by erasing as many lines as it last drew — the question and the answer."""

    def __init__(self, console: Console, picture: Group) -> None:
        self.console = console
        self.live = self._started(picture)

    def _started(self, picture: Any) -> Live:
        live = Live(picture, console=self.console, refresh_per_second=8, transient=False)
        live.start(refresh=True)
        return live

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The view stopped meanwhile; only in a terminal (elsewhere it draws nothing until
        the follow ends)."""
        if not self.console.is_terminal:
            yield
            return
        picture = self.live.renderable
        self.live.stop()
        try:
            yield
        finally:
            self.live = self._started(picture)


@contextlib.contextmanager
def view_paused() -> Iterator[None]:
    """Inside a follow's checkpoint handler: the live view stopped, so that its redraws do not
    run over a prompt, and started again after (below it)."""
    screen = _SCREEN.get()
    if screen is None:
        yield
        return
    with screen.paused():
        yield


async def read_line() -> str:
    """One line of standard input ("" at its end), read without blocking the event loop.

    In a daemon thread of its own rather than `asyncio.to_thread`'s executor: a Ctrl-C while
    it waits must end the command, and the executor's threads are joined at exit, so the
    command would hang until the person pressed Enter."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()

    def settle(line: str | None, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(line or "")

    def read() -> None:
        line, failed = None, None
        try:
            line = sys.stdin.readline()
        except BaseException as exc:  # handed to the waiting coroutine
            failed = exc
        with contextlib.suppress(RuntimeError):  # the loop closed while it waited
            loop.call_soon_threadsafe(settle, line, failed)

    threading.Thread(target=read, name="shoal-stdin", daemon=True).start()
    return await done


async def post_answer(client: ShoalClient, checkpoint_id: str, text: str) -> dict[str, Any]:
    """`POST /api/v1/checkpoints/{id}/answer`: the decision (`ApiError` if refused)."""
    result: dict[str, Any] = await client.request(
        "POST", f"/api/v1/checkpoints/{quote(checkpoint_id, safe='')}/answer",
        json={"answer": text})
    return result


class AskQuestions:
    """`on_checkpoint` of an interactive follow: each open question of the task (a `human`
    step's) is asked at the terminal once, and the line typed is its answer.

    An empty line, or the end of input, leaves the question open, says how to answer it later
    and asks nothing more for the rest of the follow; an answer the server refuses as invalid
    (too long) is asked again. A replayed question already decided is skipped. Other
    checkpoints are only shown, as without it.
    """

    def __init__(self, client: ShoalClient, console: Console, task_id: str, *,
                 read: Callable[[], Awaitable[str]] = read_line,
                 echo: bool | None = None) -> None:
        self.client, self.console, self.task_id, self.read = client, console, task_id, read
        # a line typed at a terminal is on the screen already; one from a pipe is printed
        self.echo = (not sys.stdin.isatty()) if echo is None else echo
        self.asked: set[str] = set()
        self.stopped = False

    async def __call__(self, data: dict[str, Any]) -> None:
        """Ask `data`'s question, if it is one still open and nothing stops the asking."""
        cid = str(data.get("checkpoint_id", ""))
        if data.get("reason") != "question" or self.stopped or cid in self.asked:
            return
        self.asked.add(cid)
        checkpoint = await self.client.checkpoint(cid)
        if checkpoint.get("status") != "pending_review":  # replayed, and decided since
            return
        question = checkpoint.get("question") or data.get("question") or ""
        with view_paused():
            self.console.print(Text(f"Question: {question}", style="bold"), soft_wrap=True)
            await self._ask(cid)

    async def _ask(self, cid: str) -> None:
        while True:
            self.console.print("Your answer: ", end="", markup=False, highlight=False)
            try:
                line = await self.read()
            except BaseException:  # Ctrl-C: what follows starts on a line of its own
                self.console.line()
                raise
            text = line.strip()
            if self.echo or not line.endswith("\n"):
                self.console.print(Text(clip(text, 200)), soft_wrap=True)
            if not text:
                self.stopped = True
                self.console.print(Text(
                    "Left unanswered; the task waits for it. Answer it later with: shoal "
                    f'answer {self.task_id} "…"', style="yellow"), soft_wrap=True)
                return
            try:
                decided = await post_answer(self.client, cid, text)
            except ApiError as exc:
                if exc.status != 422:
                    raise
                self.console.print(Text(f"Not taken: {_refusal(exc)}", style="red"),
                                   soft_wrap=True)
                continue
            self.console.print(Text(f"Checkpoint {cid} {decided['status']}: "
                                    f"{decided['message']}"), soft_wrap=True)
            return


def _refusal(exc: ApiError) -> str:
    """A refused answer's reason: its fields' messages, else the error's message."""
    found = [f"{d.get('field')}: {d.get('message')}" for d in exc.details or []
             if isinstance(d, dict) and d.get("message")] if isinstance(exc.details, list) else []
    return "; ".join(found) or exc.message


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
