"""The reference pages are generated from the code and committed: the committed pages are what
the generator writes now, every field of the workflow language says what it does, and every
workflow example the docs include is a document `shoal workflows check` accepts."""

from __future__ import annotations

import enum
import os
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from shoal.workflows.document import WorkflowDocument

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
INCLUDE = re.compile(r'--8<-- "([^"]+\.ya?ml)"')


def generate(out: Path) -> None:
    done = subprocess.run([sys.executable, str(REFERENCE / "generate.py"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")})
    assert done.returncode == 0, done.stderr[-4000:]


def test_the_committed_reference_is_what_the_code_generates(tmp_path: Path) -> None:
    """Each page the generator writes now is the committed one, byte for byte."""
    generate(tmp_path)
    pages = sorted(p.name for p in tmp_path.glob("*.md"))
    assert pages, "the generator wrote no page"
    stale = sorted({p.name for p in REFERENCE.glob("*.md")} - set(pages))
    assert stale == [], f"docs/reference/{stale} are no longer generated: remove them"
    for name in pages:
        committed = REFERENCE / name
        assert committed.is_file(), f"docs/reference/{name} is missing: run `make docs` to " \
                                    "regenerate"
        assert committed.read_text() == (tmp_path / name).read_text(), (
            f"docs/reference/{name} differs from what the code says: run `make docs` to "
            "regenerate")


def included_examples() -> list[Path]:
    """The YAML files the docs include with `--8<--`."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return sorted({ROOT / m for p in pages for m in INCLUDE.findall(p.read_text())})


def check(path: Path) -> subprocess.CompletedProcess[str]:
    """The real `shoal workflows check`, as a reader runs it on an example."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    return subprocess.run([str(Path(sys.executable).with_name("shoal")), "workflows", "check",
                           str(path)], capture_output=True, text=True, timeout=60,
                          env={**env, "NO_COLOR": "1", "COLUMNS": "200"})


def test_the_docs_include_the_examples_and_every_builtin_workflow() -> None:
    """Every example file and every built-in workflow is shown from its file."""
    shown = set(included_examples())
    assert set((REFERENCE / "examples").glob("*.yaml")) <= shown
    assert set((ROOT / "src" / "shoal" / "workflows" / "builtin").glob("*.yaml")) <= shown


@pytest.mark.parametrize("path", included_examples(), ids=lambda p: p.name)
def test_every_included_example_is_a_valid_workflow(path: Path) -> None:
    """`shoal workflows check` accepts the example."""
    done = check(path)
    assert done.returncode == 0, done.stderr
    assert "is valid" in done.stdout


def test_a_broken_example_is_refused(tmp_path: Path) -> None:
    """The check the examples go through refuses a document with a step of no role."""
    text = (REFERENCE / "examples" / "review-loop.yaml").read_text()
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("role: reviewer", "role: nobody"))
    done = check(broken)
    assert done.returncode == 1
    assert "no role 'nobody' in roles" in done.stderr


def models_under(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    """`model` and every model its fields hold, each once."""
    seen: list[type[BaseModel]] = []
    queue = [model]
    while queue:
        current = queue.pop(0)
        if current in seen:
            continue
        seen.append(current)
        for field in current.model_fields.values():
            queue += inner_models(field.annotation)
    yield from seen


def inner_models(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return []
    return [m for arg in typing.get_args(tp) for m in inner_models(arg)]


def undescribed(root: type[BaseModel]) -> list[str]:
    """The fields under `root` that have no description."""
    return [f"{m.__name__}.{name}" for m in models_under(root)
            for name, field in m.model_fields.items() if not (field.description or "").strip()]


def test_every_field_of_the_workflow_language_says_what_it_does() -> None:
    """Each field of every model a document may hold has a description (its reference row)."""
    found = list(models_under(WorkflowDocument))
    assert len(found) > 10
    assert undescribed(WorkflowDocument) == [], "add Field(description=...) to these fields"


def test_a_field_without_a_description_is_found() -> None:
    """A nested model's field without a description is named, however deep it sits."""

    class Inner(BaseModel):
        bare: int = 0

    class Root(BaseModel):
        inner: dict[str, list[Inner]] | None = None  # described nowhere either

    assert undescribed(Root) == ["Root.inner", "Inner.bare"]


def test_every_setting_says_what_it_does() -> None:
    """Each `SHOAL_*` setting has a description (its row in the settings reference)."""
    from shoal.config import Settings

    bare = [n for n, f in Settings.model_fields.items() if not (f.description or "").strip()]
    assert len(Settings.model_fields) > 50
    assert bare == [], "add description=... to these settings"
