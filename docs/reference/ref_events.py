"""The events page: every event type (`shoal.events.EventType`, each member's comment), how
events travel over Server-Sent Events and the client WebSocket `/ws`, and every message a
client may send on `/ws` (the models of `shoal.api.client_ws`)."""

from __future__ import annotations

import typing

from pydantic import BaseModel
from ref_api import openapi
from ref_text import GENERATED, code, default_text, field_type, member_notes, summary, table

from shoal.api import client_ws
from shoal.events import EventType

SSE_ROUTE = "/api/v1/tasks/{task_id}/events"


def types_table() -> str:
    notes = member_notes(EventType)
    return table(["Type", "What happened"], [[code(t.value), notes.get(t.value, "")]
                                             for t in EventType])


def message_section(model: type[BaseModel]) -> str:
    kind = typing.get_args(model.model_fields["type"].annotation)[0]
    rows = [[code(name), field_type(field, lambda t: t.__name__), default_text(field),
             field.description or ""]
            for name, field in model.model_fields.items() if name != "type"]
    text = f"#### `{kind}` {{#ws-{kind}}}\n\n{summary(model)}\n\n"
    return text + (table(["Field", "Type", "Default", "What it does"], rows) + "\n"
                   if rows else "")


def client_messages() -> list[type[BaseModel]]:
    union = typing.get_args(client_ws.ClientMessage)[0]
    return list(typing.get_args(union))


def sse_section() -> str:
    route = openapi()["paths"][SSE_ROUTE]["get"]
    return (f"## Server-Sent Events\n\n`GET {SSE_ROUTE}`: {route.get('description', '')}\n\n"
            "Each event comes as `id: <seq>`, `event: <type>` (or the workflow's name for it) "
            "and `data: <the event as JSON>`; a comment line keeps an idle stream open.\n\n")


def page() -> str:
    return (
        "# Events\n\n" + GENERATED + "\n"
        "Everything that happens to a task is an event, stored in order and numbered by a "
        "global sequence (`seq`). Every stream sends it as `{type, data, timestamp, seq}`; "
        "`data` holds what the type says. A workflow may give events its own names "
        "([`events:`](workflow-language.md#eventname)).\n\n## Event types\n\n"
        + types_table() + "\n" + sse_section()
        + "## WebSocket `/ws`\n\n" + summary(client_ws) + "\n\n"
        "### Messages a client sends\n\n"
        + "".join(message_section(m) for m in client_messages()))
