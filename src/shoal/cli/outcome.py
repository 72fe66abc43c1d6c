"""How a followed task ends on the terminal, the same for `shoal submit --follow` and `make run`
(`shoal up --demo`): its outcome, its report or result, where its files were saved, what it
used, and the command's exit status."""

from __future__ import annotations

import asyncio
import json
import zipfile
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from shoal.cli.client import ApiError, ShoalClient

EXIT_CODES = {"completed": 0, "failed": 3, "cancelled": 4, "budget_exceeded": 5}
"""A followed task's exit status by how it ended (docs/getting-started/first-task.md has the
table). 1 is an error of the command itself (the server unreachable, a refused submission), 2 a
mistake in its use, 130 an interruption (Ctrl-C; the task goes on)."""
STYLE = {"completed": "bold green", "failed": "bold red"}
SHOWN = 6000  # characters of a report or result printed; the rest is a command away


async def show_ending(client: ShoalClient, console: Console, task_id: str, *,
                      results: Path) -> int:
    """After a follow: the task's report (or result), its outcome, its files saved in
    `results` as `<task>.zip`, its tokens and cost. The exit status (`EXIT_CODES`)."""
    detail = await client.task(task_id)
    status = str(detail["status"])
    shown = await _report(client, task_id) or await _result(client, task_id)
    if shown is not None:
        title, text = shown
        more = (f"\n… (the first {SHOWN:,} characters; all of it: shoal task report "
                f"{task_id})" if len(text) > SHOWN else "")
        console.print(Panel(Text(text[:SHOWN] + more), title=title))
    saved = await _save_files(client, task_id, results)
    say = Text(f"Task {status}: {task_id}", style=STYLE.get(status, "bold yellow"))
    console.print(say, soft_wrap=True)
    lines = [f"  Why:     {detail['error']}"] if detail.get("error") else []
    if shown is not None and shown[0] == "Report":
        lines.append(f"  Report:  shoal task report {task_id} (Markdown; --pdf FILE for a "
                     f"PDF), or {client.creds.server}/tasks/{task_id}")
    lines.append(f"  Files:   {saved}" if saved else "  Files:   none were produced")
    usage = detail["usage"]
    lines.append(f"  Used:    {usage['input_tokens']:,} tokens in, {usage['output_tokens']:,} "
                 f"out; ${usage['cost_usd']:.4f}")
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    return EXIT_CODES.get(status, 1)


async def _report(client: ShoalClient, task_id: str) -> tuple[str, str] | None:
    """The task's report as Markdown, if its workflow wrote one."""
    try:
        body = await client.request("GET", f"/api/v1/tasks/{task_id}/report",
                                    headers={"Accept": "text/markdown"})
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return "Report", body.decode("utf-8") if isinstance(body, bytes) else str(body)


async def _result(client: ShoalClient, task_id: str) -> tuple[str, str] | None:
    """The task's result entry (a workflow document's `response`), if it has one."""
    state = await client.request("GET", f"/api/v1/tasks/{task_id}/state")
    response = state["state"].get("response")
    if response is None:
        return None
    if isinstance(response, list) and all(isinstance(r, str) for r in response):
        return "Result", "\n".join(f"- {r}" for r in response)  # what each step did
    return "Result", response if isinstance(response, str) else json.dumps(response, indent=1)


async def _save_files(client: ShoalClient, task_id: str, results: Path) -> str | None:
    """The task's files saved as `results/<task>.zip`: where, and how many; None (and no
    file) when it produced none."""
    await asyncio.to_thread(results.mkdir, parents=True, exist_ok=True)
    dest = results / f"{task_id}.zip"
    await client.download(f"/api/v1/tasks/{task_id}/download", dest)
    count = await asyncio.to_thread(_members, dest)
    if not count:
        await asyncio.to_thread(dest.unlink)
        return None
    return f"{dest.resolve()} ({count} file{'s' if count != 1 else ''})"


def _members(path: Path) -> int:
    with zipfile.ZipFile(path) as archive:
        return len(archive.namelist())

