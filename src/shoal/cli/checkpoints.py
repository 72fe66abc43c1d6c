"""`shoal checkpoints`, `shoal checkpoint show`, and the answers to a checkpoint: `approve`,
`reject`, `correct` and `answer` (a workflow's question)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from shoal.cli import ids
from shoal.cli.base import CheckpointArg, ServerOpt, T, TokenOpt, client_call, console
from shoal.errors import NotFound, ShoalError

if TYPE_CHECKING:
    from shoal.cli.client import ApiError

checkpoint_app = typer.Typer(help="Look at one checkpoint.", no_args_is_help=True)


class CorrectionType(StrEnum):
    """What a correction asks the agent to change."""

    WRONG_APPROACH = "wrong_approach"
    INCOMPLETE = "incomplete"
    BUG = "bug"
    STYLE = "style"
    MISSING_FEATURE = "missing_feature"
    OTHER = "other"


FLAGS = {"subtask_id": "--subtask", "correction_type": "--type", "guidance": "--guidance",
         "reference_files": "--reference", "reason": "--reason"}


def _checkpoint_call(given: str, fn: Callable[[Any, str], Awaitable[T]],
                     server: str | None, token: str | None) -> T:
    """`fn(client, the checkpoint's whole id)` for the checkpoint `given` names (its id or a
    start of it); its 404, 409 and 422 answers become sentences."""
    from shoal.cli.client import ApiError

    async def go(client: Any) -> T:
        checkpoint_id = await ids.checkpoint_id(client, given)
        try:
            return await fn(client, checkpoint_id)
        except ApiError as exc:
            raise ShoalError(_checkpoint_error(checkpoint_id, exc), code=exc.code) from exc

    return client_call(go, server, token)


def _checkpoint_error(checkpoint_id: str, exc: ApiError) -> str:
    """What went wrong with a checkpoint command, and what to do about it."""
    details = exc.details
    if exc.status == 404:
        return (f"No checkpoint {checkpoint_id} (or it is not yours). "
                "List the open ones with: shoal checkpoints")
    if exc.code == "checkpoint_decided":
        status = details.get("status") if isinstance(details, dict) else None
        return (f"Checkpoint {checkpoint_id} was already decided"
                f"{f' ({status})' if status else ''}. "
                f"See it with: shoal checkpoint show {checkpoint_id}")
    if exc.status == 422 and isinstance(details, list) and details:
        return "; ".join(f"Invalid {FLAGS.get(d.get('field'), d.get('field'))}: "
                         f"{d.get('message')}" for d in details)
    if exc.status == 422 and isinstance(details, dict) and details.get("field"):
        return f"Invalid {FLAGS.get(details['field'], details['field'])}: {exc.message}"
    return str(exc.message)


def checkpoints_list(
    task: Annotated[str | None, typer.Option(
        "--task", help="Only this task's (its id, or its first 6 or more characters).")] = None,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Decided checkpoints too, not only those waiting for you.")] = False,
    limit: Annotated[int, typer.Option()] = 50,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """List the checkpoints waiting for you, newest first."""
    from shoal.cli.follow import age, clip, score_label

    status = None if show_all else "pending_review"

    async def listed(client: Any) -> dict[str, Any]:
        task_id = await ids.task_id(client, task) if task else None
        page: dict[str, Any] = await client.checkpoints(status, task_id, limit=limit)
        return page

    page = client_call(listed, server, token)
    if not page["checkpoints"]:
        console.print("No checkpoints." if show_all else "No checkpoint is waiting for you.")
        return
    for cp in page["checkpoints"]:  # one block each: readable at any width, ids whole
        subtask = (cp.get("subtask") or {}).get("name", "")
        head = Text.assemble(
            (cp["checkpoint_id"], "bold"), "  ", (cp["reason"], "yellow"), "  ",
            score_label(cp) or "no score", "  ", f"{age(cp['triggered_at'])} ago",
            f"  task {cp['task_id'][:8]}", (f"  {cp['status']}" if show_all else ""))
        console.print(head, no_wrap=True, overflow="ignore", crop=False)
        detail = " · ".join(part for part in (subtask, clip(cp.get("message") or "", 300))
                            if part)
        if detail:
            console.print(Text("    " + detail))
    console.print(f"{len(page['checkpoints'])} of {page['total']}. Details: shoal checkpoint "
                  "show ID. Answer: shoal approve ID | shoal reject ID --reason TEXT | "
                  "shoal correct ID --type TYPE --guidance TEXT | shoal answer ID TEXT (a "
                  "question)", soft_wrap=True)


@checkpoint_app.command("show")
def checkpoint_show(checkpoint_id: CheckpointArg, server: ServerOpt = None,
                    token: TokenOpt = None) -> None:
    """A checkpoint in full: why it opened, the scores, what was done and what comes next."""
    from shoal.cli import follow

    cp = _checkpoint_call(checkpoint_id, lambda c, cid: c.checkpoint(cid), server, token)
    cid = cp["checkpoint_id"]
    say = functools.partial(console.print, soft_wrap=True, markup=False)  # data, not markup
    opened = follow.age(cp["triggered_at"])
    console.print(f"[bold]Checkpoint {cid}[/]  {cp['status']}  (opened {opened} ago)",
                  soft_wrap=True)
    say(f"Task {cp['task_id']}: {cp['task_description']}")
    say(f"Why: {follow.describe_reason(cp['reason'])} ({cp['reason']}). {cp.get('message') or ''}")
    for part in (*follow.checkpoint_scores(cp), *follow.checkpoint_work(cp),
                 *follow.checkpoint_corrections(cp)):
        say(part)
    if cp["status"] == "pending_review":
        if cp.get("deadline_at"):
            say(f"Deadline: {cp['deadline_at']} (then: {cp['deadline_action']})")
        if cp.get("question"):
            say(f"Question: {cp['question']}")
        say("Answer it with one of:")
        for command in follow.answer_commands(cid, cp["reason"]):
            say(f"  {command}")
    else:
        say(f"Decided: {cp.get('decision')} at {cp.get('decided_at')}"
            + (f" — {cp['notes']}" if cp.get("notes") else ""))


def approve(checkpoint_id: CheckpointArg, server: ServerOpt = None,
            token: TokenOpt = None) -> None:
    """Approve a checkpoint: the work so far is accepted and the task continues."""
    r = _checkpoint_call(checkpoint_id, lambda c, cid: c.approve(cid), server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} {r['status']}: {r['message']}")


def answer(
    ident: Annotated[str, typer.Argument(
        metavar="ID", help="The question's checkpoint id, or its task's id (or the first 6 or "
                           "more characters of either).")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Answer a workflow's question (a `human` step) by its checkpoint's id, or by its task's
    id (the task's open question); the task goes on with your answer."""
    from shoal.cli.client import ApiError
    from shoal.cli.follow import post_answer

    async def go(client: Any) -> dict[str, Any]:
        cid = await _question(client, ident)
        try:
            return await post_answer(client, cid, text)
        except ApiError as exc:
            raise ShoalError(_checkpoint_error(cid, exc), code=exc.code) from exc

    r = client_call(go, server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} {r['status']}: {r['message']}")


async def _question(client: Any, ident: str) -> str:
    """The checkpoint `ident` names: one of yours (by its id or a start of it), else the open
    question of the task it names."""
    try:
        return await ids.checkpoint_id(client, ident)
    except NotFound:
        pass
    try:
        task_id = await ids.task_id(client, ident)
    except NotFound:
        raise NotFound(f"No checkpoint or task {ident} (or it is not yours). List the "
                       "questions waiting for you with: shoal checkpoints") from None
    return await _open_question(client, task_id)


async def _open_question(client: Any, task_id: str) -> str:
    """The id of the question the task waits at; a `ShoalError` saying why there is none."""
    page = await client.checkpoints("pending_review", task_id, limit=200)
    task = await client.task(task_id)
    open_ = page["checkpoints"]
    questions = [cp for cp in open_ if cp["reason"] == "question"]
    if len(questions) == 1:
        return str(questions[0]["checkpoint_id"])
    if questions:
        listed = "; ".join(f"{cp['checkpoint_id']} ({cp.get('question') or 'no text'})"
                           for cp in questions)
        raise ShoalError(f"Task {task_id} waits at {len(questions)} questions; answer one by "
                         f"its checkpoint id: {listed}", code="ambiguous")
    waiting = (f"; it waits at a {open_[0]['reason']} checkpoint: shoal checkpoint show "
               f"{open_[0]['checkpoint_id']}") if open_ else ""
    raise ShoalError(f"Task {task_id} has no open question (it is {task['status']}){waiting}.",
                     code="no_question")


def reject(
    checkpoint_id: CheckpointArg,
    reason: Annotated[str, typer.Option(help="Why the work is not acceptable.")],
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Reject a checkpoint: the task is cancelled and its agents are stopped."""
    r = _checkpoint_call(checkpoint_id, lambda c, cid: c.reject(cid, reason), server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} {r['status']}: {r['message']}")


def correct(
    checkpoint_id: CheckpointArg,
    correction_type: Annotated[CorrectionType, typer.Option(
        "--type", help="What kind of change is needed.")],
    guidance: Annotated[str, typer.Option(help="What the agent should change, in words.")],
    subtask: Annotated[str | None, typer.Option(
        help="The subtask to redo (default: the one the checkpoint is about).")] = None,
    reference: Annotated[list[str] | None, typer.Option(
        help="A file the agent should look at (repeatable).")] = None,
    apply_to_future: Annotated[bool, typer.Option(
        "--apply-to-future", help="Remember this guidance for your later tasks.")] = False,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Send a subtask back with guidance: it runs again, then is evaluated again."""
    r = _checkpoint_call(checkpoint_id, lambda c, cid: c.correct(
        cid, correction_type=correction_type.value, guidance=guidance,
        subtask_id=subtask, reference_files=reference or (), apply_to_future=apply_to_future),
        server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} corrected: {r['message']} "
                  f"(correction subtask {r['correction_subtask_id']})", soft_wrap=True)
