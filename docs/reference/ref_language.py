"""The workflow language page: every mapping a document may hold, walked from
`WorkflowDocument` through each nested model, with each field's type, default, allowed values
and description; then the example documents and the built-in workflows, included from their
files (tests/docs/test_reference.py checks each)."""

from __future__ import annotations

import enum
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from ref_text import (
    GENERATED,
    code,
    default_text,
    field_type,
    member_notes,
    summary,
    table,
)

from shoal.workflows.document import BUILTIN_FIELDS, WorkflowDocument
from shoal.workflows.loading import load_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = Path("docs/reference/examples")
BUILTIN = Path("src/shoal/workflows/builtin")


def nested(tp: Any, at: str) -> Iterator[tuple[str, type]]:
    """The models and enums inside the annotation `tp` of a field at path `at`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        yield from nested(args[0], at)
    elif origin in (list, tuple):
        yield from nested(args[0], at + "[]")
    elif origin is dict:
        yield from nested(args[1], at + ".<name>")
    elif args:
        for arg in args:
            yield from nested(arg, at)
    elif isinstance(tp, type) and issubclass(tp, BaseModel | enum.Enum):
        yield at, tp


def models() -> dict[type[BaseModel], str]:
    """Every model of the language, in the order met from the root, with the path where it
    first sits in a document."""
    found: dict[type[BaseModel], str] = {WorkflowDocument: ""}
    queue: list[type[BaseModel]] = [WorkflowDocument]
    while queue:
        model = queue.pop(0)
        for name, field in model.model_fields.items():
            at = ".".join(filter(None, (found[model], field.alias or name)))
            for path, kind in nested(field.annotation, at):
                if issubclass(kind, BaseModel) and kind not in found:
                    found[kind] = path
                    queue.append(kind)
    return found


def anchor(model: type) -> str:
    return model.__name__.lower()


def link(model: type) -> str:
    return f"[{model.__name__}](#{anchor(model)})"


def field_rows(model: type[BaseModel]) -> list[list[str]]:
    return [[code(field.alias or name), field_type(field, link), default_text(field),
             field.description or ""] for name, field in model.model_fields.items()]


def enum_notes(model: type[BaseModel]) -> str:
    """What each allowed value of the model's enum fields means, where the source says it."""
    out = []
    for name, field in model.model_fields.items():
        for _, kind in nested(field.annotation, name):
            notes = member_notes(kind) if issubclass(kind, enum.Enum) else {}
            if notes:
                items = "".join(f"\n    - {code(v)}: {n}" for v, n in notes.items())
                out.append(f"- {code(field.alias or name)}:{items}")
    return "\n".join(out) + "\n\n" if out else ""


def used_in(value: Any) -> set[type]:
    """The model classes of every mapping in a loaded document."""
    if isinstance(value, BaseModel):
        found = {type(value)}
        for name in type(value).model_fields:
            found |= used_in(getattr(value, name))
        return found
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) \
        else ()
    return set().union(*(used_in(v) for v in items))


def documents() -> list[tuple[Path, WorkflowDocument]]:
    """The example documents, then the built-in workflows, each loaded and checked."""
    paths = sorted((ROOT / EXAMPLES).glob("*.yaml")) + sorted((ROOT / BUILTIN).glob("*.yaml"))
    return [(p.relative_to(ROOT), load_document(p.read_text(encoding="utf-8"), source=str(p)))
            for p in paths]


def doc_anchor(path: Path) -> str:
    return ("builtin-" if path.parent == BUILTIN else "example-") + path.stem


def model_section(model: type[BaseModel], at: str,
                  docs: list[tuple[Path, WorkflowDocument]]) -> str:
    title = code(at) if at else "The document"
    shown = [f"[{p.stem}](#{doc_anchor(p)})" for p, d in docs if model in used_in(d)]
    seen = f"Shown in: {', '.join(shown)}.\n\n" if shown else ""
    return (f"## {title} {{#{anchor(model)}}}\n\n{model.__name__}: {summary(model)}\n\n"
            f"{table(['Field', 'Type', 'Default', 'What it does'], field_rows(model))}\n"
            f"{enum_notes(model)}{seen}")


def include(path: Path, indent: str = "") -> str:
    return f'{indent}```yaml\n{indent}--8<-- "{path.as_posix()}"\n{indent}```\n'


def doc_section(path: Path, doc: WorkflowDocument) -> str:
    if path.parent == BUILTIN:
        return (f"### {doc.name} {{#{doc_anchor(path)}}}\n\n{doc.description.strip()}\n\n"
                f'??? example "{path.as_posix()}"\n\n{include(path, "    ")}\n')
    return (f"### {doc.name} {{#{doc_anchor(path)}}}\n\n{doc.description.strip()}\n\n"
            f"{include(path)}\n")


def intro() -> str:
    builtins = table(["Name", "What it becomes"],
                     [[code("{" + name + "}"), text] for name, text in BUILTIN_FIELDS.items()])
    return (
        "# Workflow language\n\n" + GENERATED + "\n"
        "A workflow document is a YAML file that organises agents: its `parameters`, the "
        "`roles` that do the work and the `steps` they run, with the edges between them "
        "(`after`) and the `loops` back. Check one with [`shoal workflows check FILE`]"
        "(cli.md#shoal-workflows-check) (it names the file, line and field of the first "
        "problem); add it to a server with [`shoal workflows add FILE`]"
        "(cli.md#shoal-workflows-add). The JSON Schema of the language is served at "
        "`GET /api/v1/workflows/schema`.\n\n"
        "Each section below is one kind of mapping, under the path where it sits in a "
        "document (`<name>`: a key you choose; `[]`: an item of a list).\n\n"
        "## Prompts {#prompts}\n\n"
        "A prompt (and a human step's question) names what it needs in braces: a parameter "
        "(`{tone}`), an entry a step writes (`{draft}`, or `{feedback.verdict}` for a field "
        "of an answer with a contract), or one of these:\n\n" + builtins + "\n")


def page() -> str:
    docs = documents()
    parts = [intro()]
    parts += [model_section(m, at, docs) for m, at in models().items()]
    parts.append("## Examples\n\nEach is a file that `shoal workflows check` accepts "
                 "(tests/docs/test_reference.py checks every one).\n\n")
    parts += [doc_section(p, d) for p, d in docs if p.parent == EXAMPLES]
    parts.append("## Built-in workflows\n\nThe workflows every Shoal offers, from their "
                 "files.\n\n")
    parts += [doc_section(p, d) for p, d in docs if p.parent == BUILTIN]
    return "".join(parts).rstrip() + "\n"
