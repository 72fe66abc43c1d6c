"""The REST API page: every route of the OpenAPI document a control plane serves
(`create_app(settings).openapi()`), grouped by tag, with its parameters, body and responses,
then every schema those name."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from ref_text import GENERATED, cell, code, literal, table

from shoal.api.app import create_app
from shoal.config import Settings

METHODS = ("get", "post", "put", "patch", "delete")


@functools.cache
def openapi() -> dict[str, Any]:
    """The OpenAPI document of a control plane with the default settings."""
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(mode="dev", data_dir=Path(folder), _env_file=None)
        return create_app(settings).openapi()


def schema_text(schema: dict[str, Any]) -> str:
    """A JSON Schema in a few words: a linked schema name, `string`, `list of …`, …"""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema:
        parts = [schema_text(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(parts)
    if "enum" in schema:
        return "one of " + ", ".join(code(v) for v in schema["enum"])
    if schema.get("type") == "array":
        return "list of " + schema_text(schema.get("items", {}))
    kind = schema.get("type", "any")
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


def parameters(op: dict[str, Any]) -> str:
    rows = [[code(p["name"]), p["in"], "yes" if p.get("required") else "",
             schema_text(p.get("schema", {})), p.get("description", "")]
            for p in op.get("parameters", [])]
    return table(["Parameter", "In", "Required", "Type", "What it is"], rows) if rows else ""


def body(op: dict[str, Any]) -> str:
    content = op.get("requestBody", {}).get("content", {})
    return "".join(f"Body ({code(kind)}): {schema_text(c.get('schema', {}))}\n\n"
                   for kind, c in content.items())


def is_error(status: str, answer: dict[str, Any]) -> bool:
    """An error answer in the shared body, listed once at the top rather than per route."""
    shape = answer.get("content", {}).get("application/json", {}).get("schema", {})
    return not status.startswith("2") and shape.get("$ref", "").endswith("/ErrorBody")


def responses(op: dict[str, Any]) -> str:
    lines, errors = [], []
    for status, answer in op.get("responses", {}).items():
        if is_error(status, answer):
            errors.append(code(status))
            continue
        shapes = ", ".join(f"{code(k)} {schema_text(c['schema']) if c.get('schema') else ''}"
                           .rstrip() for k, c in answer.get("content", {}).items())
        lines.append(f"- {code(status)} {cell(answer.get('description', ''))}"
                     + (f" — {shapes}" if shapes else ""))
    if errors:
        lines.append(f"- [Errors](#errors): {', '.join(errors)}")
    return "Responses:\n\n" + "\n".join(lines) + "\n\n"


def errors(doc: dict[str, Any]) -> str:
    """Each error status the routes answer with, and what it means (its first wording)."""
    seen: dict[str, str] = {}
    for item in doc["paths"].values():
        for op in item.values():
            for status, answer in op.get("responses", {}).items():
                if is_error(status, answer):
                    seen.setdefault(status, answer.get("description", ""))
    rows = [[code(status), text] for status, text in sorted(seen.items())]
    return ("## Errors\n\nEvery error answers with [ErrorBody](#schema-errorbody), which "
            "says what happened and what to do.\n\n"
            + table(["Status", "What it means"], rows) + "\n")


def operation(path: str, method: str, op: dict[str, Any]) -> str:
    signed = "Signed in: `Authorization: Bearer <token>`.\n\n" if op.get("security") else ""
    return (f"### `{method.upper()} {path}` — {op.get('summary', '')}\n\n{signed}"
            f"{op.get('description', '').strip()}\n\n{parameters(op)}\n{body(op)}"
            f"{responses(op)}")


def by_tag(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Each tag's operations, by path, then method."""
    groups: dict[str, list[str]] = {}
    for path, item in sorted(doc["paths"].items()):
        for method in METHODS:
            if method in item:
                tag = (item[method].get("tags") or ["other"])[0]
                groups.setdefault(tag, []).append(operation(path, method, item[method]))
    return dict(sorted(groups.items()))


def default(schema: dict[str, Any]) -> str:
    return literal(schema["default"]) if "default" in schema else ""


def schema_section(name: str, schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    rows = [[code(p), schema_text(s), "required" if p in required else default(s),
             s.get("description", "")] for p, s in schema.get("properties", {}).items()]
    text = f"### {name} {{#schema-{name.lower()}}}\n\n{schema.get('description', '').strip()}\n\n"
    if "enum" in schema:
        text += "One of " + ", ".join(code(v) for v in schema["enum"]) + ".\n\n"
    return text + (table(["Field", "Type", "Default", "What it is"], rows) + "\n" if rows
                   else "")


def page() -> str:
    doc = openapi()
    parts = ["# REST API\n\n", GENERATED, "\n", doc["info"]["description"], " Every Shoal "
             "serves this API under `/api/v1`, its OpenAPI document at `/openapi.json` and a "
             "live explorer at `/docs`, where each route can be tried. Errors share one body, "
             "[ErrorBody](#schema-errorbody). Live events come over `/ws` and Server-Sent Events: "
             "[events](events.md).\n\n"]
    parts.append(errors(doc))
    for tag, operations in by_tag(doc).items():
        parts += [f"## {tag.capitalize()}\n\n", *operations]
    parts.append("## Schemas\n\n")
    parts += [schema_section(n, s) for n, s in sorted(doc["components"]["schemas"].items())]
    return "".join(parts).rstrip() + "\n"
