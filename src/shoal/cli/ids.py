"""Ids as a person types them: the whole id, or any start of it of at least `MIN_PREFIX`
characters that names one of their tasks (or checkpoints) alone. Looked up with the list
routes' `id_prefix`; an ambiguous start lists what it matches."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shoal.cli.client import ShoalClient
from shoal.errors import InvalidInput, NotFound

MIN_PREFIX = 6
SHOWN = 8  # the length `shoal tasks` shows, longer where two ids of a page share it
_HEX = re.compile(r"^(?:[0-9a-fA-F]-?)+$")
LISTED = 10  # matches of an ambiguous start that are named


@dataclass(frozen=True, slots=True)
class _Kind:
    """What a kind of id is looked up in, and how its matches are told apart."""

    name: str
    path: str
    items: str
    key: str
    listing: str  # the command that lists them


TASK = _Kind("task", "/api/v1/tasks", "tasks", "task_id", "shoal tasks")
CHECKPOINT = _Kind("checkpoint", "/api/v1/checkpoints", "checkpoints", "checkpoint_id",
                   "shoal checkpoints --all")


async def task_id(client: ShoalClient, given: str) -> str:
    """The whole id of the task `given` names (its id, or a start of it)."""
    return await _resolve(client, given, TASK)


async def checkpoint_id(client: ShoalClient, given: str) -> str:
    """The whole id of the checkpoint `given` names (its id, or a start of it)."""
    return await _resolve(client, given, CHECKPOINT)


async def _resolve(client: ShoalClient, given: str, kind: _Kind) -> str:
    text = given.strip()
    digits = text.replace("-", "")
    if not _HEX.fullmatch(text) or len(digits) > 32:
        raise NotFound(f"No {kind.name} {given!r}: an id is hexadecimal (0-9, a-f, with its "
                       f"dashes or not). List them with: {kind.listing}")
    if len(digits) < MIN_PREFIX:
        raise InvalidInput(f"{given!r} is too short to name a {kind.name}: give at least "
                           f"{MIN_PREFIX} characters of its id. List them with: {kind.listing}",
                           code="id_too_short")
    page = await client.request("GET", kind.path, params={"id_prefix": text, "limit": LISTED})
    listed: list[dict[str, Any]] = page[kind.items]
    # checked here too: a server older than `id_prefix` answers every task
    found = [item for item in listed
             if str(item[kind.key]).replace("-", "").startswith(digits.lower())]
    if not found:
        raise NotFound(f"No {kind.name} {given} (or it is not yours). List them with: "
                       f"{kind.listing}")
    if len(found) == 1:
        return str(found[0][kind.key])
    count = page["total"] if len(found) == len(listed) else len(found)
    raise InvalidInput(
        f"{given} is the start of {count} {kind.name}s' ids; give more of it:",
        code="ambiguous_id", details=[{"field": item[kind.key], "message": _about(item)}
                                      for item in found])


def _about(item: dict[str, Any]) -> str:
    """A match of an ambiguous id, in a few words."""
    words = " ".join(str(item.get("description") or item.get("task_description") or "")
                     .split())
    parts = (str(item.get("status", "")), str(item.get("reason") or ""),
             words[:60] + ("…" if len(words) > 60 else ""))
    return ", ".join(part for part in parts if part)


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id cut to one length, `SHOWN` or more: as long as it takes for no two of them to
    read the same. A person types one back (`shoal task show …`)."""
    size = SHOWN
    while size < 36 and len({i[:size] for i in ids}) < len(set(ids)):
        size += 1
    return {i: i[:size] for i in ids}
