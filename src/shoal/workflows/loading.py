"""Loading a workflow document: YAML parsed, the models validated, the whole checked
(`consistency`), and the first problem reported with the file, the line and the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from shoal.errors import InvalidInput
from shoal.workflows.consistency import problems
from shoal.workflows.document import Path, WorkflowDocument

# libyaml's safe loader (PyYAML's wheels ship it) where there is one: the built-in documents
# are loaded at every start, and the pure-Python parser took ~0.4 s for them.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(InvalidInput):
    """A document that cannot be used; `details` name the file, line and field."""


def load_document(text: str, *, source: str = "<document>") -> WorkflowDocument:
    """The document in `text` (YAML), checked; `DocumentError` names what is wrong, where."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise _error(source, line, None, f"not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise _error(source, 1, None, "a workflow document is a mapping (name, version, …)")
    try:
        doc = WorkflowDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        path = tuple(p for p in first["loc"] if isinstance(p, str | int))
        raise _error(source, _line(node, path), path, _message(first)) from None
    for path, message in problems(doc):
        raise _error(source, _line(node, path), path, message)
    return doc


def _line(node: yaml.Node | None, path: Path) -> int | None:
    """The line (1-based) of the deepest node along `path` in the composed YAML."""
    found = node
    for part in path:
        if isinstance(found, yaml.MappingNode):
            found = next((v for k, v in found.value if k.value == part), None) or found
            if found is None:
                break
        elif isinstance(found, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(found.value):
                break
            found = found.value[part]
        else:
            break
    return found.start_mark.line + 1 if found is not None else None


def _message(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        return "is required"
    if error["type"] == "extra_forbidden":
        return "is not a field here"
    return message


def _error(source: str, line: int | None, path: Path | None, message: str) -> DocumentError:
    field = ".".join(str(p) for p in path) if path else None
    where = f"{source}:{line}" if line is not None else source
    text = f"{where}: {field}: {message}" if field else f"{where}: {message}"
    return DocumentError(text, details={"file": source, "line": line, "field": field,
                                        "problem": message})
