"""A workflow's own names for Shoal's events (`events:` in its document), for clients written
against another system's event names (seed 002's `project_created`, `task_started`, …).

```yaml
events:
  task_started: {event: subtask_update, where: {status: in_progress, plan_type: "*"}}
  project_complete: {event: task_complete, report: true}
```

One event system: what is stored and streamed is Shoal's; a client that asks for the workflow's
names (`GET /api/v1/tasks/{id}/events?names=workflow`) gets each event that matches an entry
under that name (the SSE `event:` field, and `name` in its data), the first entry that matches
winning; `where` compares fields of the event's data (`"*"`: present and not null); `report`
adds the task's `report_url`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shoal.events import EventType

ANY = "*"  # in `where`: the field is present and not null
Item = dict[str, Any]  # a streamed event: seq, type, data, task_id, timestamp


class EventName(BaseModel):
    """Which of Shoal's events a workflow's name stands for."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    event: EventType = Field(description="Shoal's event it names.")  # (not `on`: YAML's true)
    where: dict[str, str | int | bool | None] = Field(
        default_factory=dict, description="Fields of the event's data that must have these "
                                          "values (`\"*\"`: present and not null).")
    report: bool = Field(default=False, description="Add the task's `report_url` to its data.")


def renamer(names: Mapping[str, EventName], report_url: str) -> Callable[[Item], Item]:
    """What turns a streamed event into the workflow's: named where an entry matches."""
    def rename(item: Item) -> Item:
        data = item.get("data") or {}
        for name, spec in names.items():
            if item.get("type") == spec.event and all(
                    data.get(k) is not None if v == ANY else data.get(k) == v
                    for k, v in spec.where.items()):
                extra = {"report_url": report_url} if spec.report else {}
                return {**item, "name": name, "data": {**data, **extra}}
        return item
    return rename
