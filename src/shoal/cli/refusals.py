"""What the server's refusals mean in the command line's words. The API's messages say what to
do over the API (`POST /api/v1/uploads`, a field's name); a person at the terminal is told the
option and the command instead, chosen by the error's code and each field's `type`, never by
reading the server's sentence (which stays the fallback)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shoal.cli.client import ApiError
from shoal.errors import Conflict, NotFound, ShoalError, Unauthorized

SUBMIT_FLAGS = {"description": "DESCRIPTION", "workflow": "--workflow", "sources": "--source",
                "plan": "--plan", "skip": "--skip", "insert": "--insert",
                "quality": "--quality", "privacy_level": "--privacy",
                "checkpoint_frequency": "--checkpoints", "tool_preferences": "--tool"}
BUDGET_FLAGS = {"tokens": "--budget-tokens", "cost_usd": "--budget-cost",
                "seconds": "--budget-seconds"}


def refused_task(exc: ApiError, body: Mapping[str, Any]) -> ShoalError:
    """A submission refused as invalid (422), each field as `shoal submit`'s option."""
    if exc.status != 422 or not isinstance(exc.details, list):
        return exc
    said = [{"field": submit_flag(str(d.get("field"))), "message": _say(d, body)}
            for d in exc.details if isinstance(d, dict)]
    return ShoalError("The task was not submitted:", code=exc.code, details=said)


def submit_flag(field: str) -> str:
    """The option of `shoal submit` that sets an API field (`parameters.x`: `--param x`)."""
    root, _, rest = field.partition(".")
    if root == "parameters" and rest:
        return f"--param {rest}"
    if root == "budget" and rest in BUDGET_FLAGS:
        return BUDGET_FLAGS[rest]
    flag = SUBMIT_FLAGS.get(root)
    if flag is None:
        return field
    return f"{flag} ({field})" if rest else flag


def _say(detail: Mapping[str, Any], body: Mapping[str, Any]) -> str:
    match detail.get("type"):
        case "unknown_workflow":
            return no_workflow_sentence(str(body.get("workflow")), detail.get("did_you_mean"))
        case "sources_required":
            return (f"the {body.get('workflow')} workflow reads your own files: give them with "
                    "--source FILE (repeatable; a .zip brings its files).")
        case "unknown_upload":
            return "a file uploaded for this task is gone (deleted meanwhile?); submit again."
        case _:
            return str(detail.get("message"))


def no_workflow_sentence(name: str, meant: Any) -> str:
    """There is no workflow `name`; what it may have meant, and how to list them."""
    close = [str(m) for m in meant] if isinstance(meant, list) else []
    maybe = f"; did you mean {' or '.join(repr(m) for m in close)}?" if close else "."
    return f"no workflow named {name!r}{maybe} `shoal workflows list` lists them."


def no_workflow(exc: ApiError, name: str) -> ShoalError:
    """`shoal workflows show NAME` of a name nobody offers."""
    if exc.status != 404:
        return exc
    meant = exc.details.get("did_you_mean") if isinstance(exc.details, dict) else None
    said = no_workflow_sentence(name, meant)
    return NotFound(said[0].upper() + said[1:], code=exc.code)


def not_ended(exc: ApiError, task_id: str) -> ShoalError:
    """`shoal task delete` of a task that still runs."""
    if exc.code != "task_not_ended":
        return exc
    status = exc.details.get("status") if isinstance(exc.details, dict) else None
    return Conflict(f"Task {task_id} is {status or 'not ended'}: cancel it first (shoal cancel "
                    f"{task_id}), then delete it.", code=exc.code)


def refused_session(exc: ApiError, server: str) -> ShoalError:
    """Any command whose session the server refuses (401): sign in again, and how."""
    if exc.status != 401:
        return exc
    why = exc.message.removesuffix(" Sign in again.")
    return Unauthorized(f"{server} refused your session: {why} Sign in again: shoal login "
                        f"--server {server}", code=exc.code)
