"""Workflow documents: a valid one loads; each kind of mistake is refused with its line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from shoal.workflows.document import DocStepKind, WorkflowDocument
from shoal.workflows.loading import DocumentError, load_document

TRANSLATE = """\
name: translate
version: 1
description: Translate, critique, polish; back to the translator while the critic objects.
parameters:
  max_rounds: {type: integer, default: 2, minimum: 0, maximum: 5}
  language: {type: string, default: French}
roles:
  translator:
    prompt: "Translate into {language}:\\n\\n{query}\\n\\n{feedback}"
    tools: [claude_code, agent_loop]
  critic:
    prompt: "Critique this translation: {draft}"
    output:
      type: object
      required: [verdict]
      properties:
        verdict: {enum: [APPROVED, NEEDS_REVISION]}
        feedback: {type: string}
  polisher:
    prompt: "Polish {draft} using {feedback.feedback}"
steps:
  - id: translate
    kind: agent
    role: translator
    writes: draft
  - id: critique
    kind: agent
    role: critic
    after: [translate]
    writes: feedback
    optional: true
  - id: polish
    kind: agent
    role: polisher
    after: [critique]
    writes: final_report
loops:
  - from: critique
    to: translate
    when: {entry: feedback, field: verdict, equals: NEEDS_REVISION}
    max: "{max_rounds}"
"""


def test_a_user_workflow_loads() -> None:
    doc = load_document(TRANSLATE, source="translate.yaml")
    assert doc.name == "translate"
    assert [s.kind for s in doc.steps] == [DocStepKind.AGENT] * 3
    assert doc.steps[0].entry == "draft"
    assert doc.loops[0].source == "critique"
    assert doc.parameters["max_rounds"].check(3) == 3


def _broken(old: str, new: str) -> DocumentError:
    assert old in TRANSLATE, old
    with pytest.raises(DocumentError) as caught:
        load_document(TRANSLATE.replace(old, new, 1), source="translate.yaml")
    return caught.value


def refusal(text: str, at: str, source: str) -> tuple[Mapping[str, Any], int]:
    """The details of the error loading `text` as `source` gives, and the line of the first
    line of `text` holding `at` (where the error should point)."""
    line = next(n for n, got in enumerate(text.splitlines(), start=1) if at in got)
    with pytest.raises(DocumentError) as caught:
        load_document(text, source=source)
    return caught.value.details, line


def _line_of(text: str) -> int:
    """The line of `text`: a whole line of the document, else where it starts."""
    lines = TRANSLATE.splitlines()
    if text in lines:
        return lines.index(text) + 1
    return TRANSLATE[:TRANSLATE.index(text)].count("\n") + 1


@pytest.mark.parametrize(("old", "new", "field", "line_text", "words"), [
    ("    kind: agent\n    role: critic", "    kind: agnet\n    role: critic", "steps.1.kind",
     None, "agent"),
    ("    role: polisher\n", "    role: editor\n", "steps.2.role", "    role: polisher",
     "no role 'editor'"),
    ('    max: "{max_rounds}"\n', "", "loops.0.max", "  - from: critique", "is required"),
    ("    after: [critique]", "    after: [critic]", "steps.2.after.0",
     "    after: [critique]", "no step 'critic'"),
    ("default: 2, minimum: 0", "default: 9, minimum: 0", "parameters.max_rounds",
     "  max_rounds: {type: integer, default: 2, minimum: 0, maximum: 5}", "at most 5"),
    ("{draft}\"", "{drfat}\"", "roles.critic.prompt", '    prompt: "Critique this translation: '
     '{draft}"', "{drfat}"),
    ("    to: translate", "    to: polish", "loops.0.to", "    to: translate",
     "does not come before"),
    ("maximum: 5}", "maximum: 500}", "loops.0.max", '    max: "{max_rounds}"', "maximum"),
])
def test_a_broken_document_is_refused_with_the_field_and_its_line(
    old: str, new: str, field: str, line_text: str | None, words: str
) -> None:
    error = _broken(old, new)
    assert error.details["file"] == "translate.yaml"
    assert error.details["field"] == field
    assert error.details["line"] == _line_of(line_text or old)
    assert words in error.message
    assert error.message.startswith(f"translate.yaml:{error.details['line']}: {field}")


def test_bad_yaml_names_its_line() -> None:
    error = _broken("    writes: draft\n", "    writes: [draft\n")
    assert error.details["line"] is not None
    assert "not valid YAML" in error.message


def test_a_cycle_of_steps_is_refused() -> None:
    error = _broken("    role: translator\n    writes: draft",
                    "    role: translator\n    after: [polish]\n    writes: draft")
    assert "cycle" in error.message
    assert error.details["field"].startswith("steps.")


def test_not_a_mapping_is_refused() -> None:
    with pytest.raises(DocumentError, match="is a mapping"):
        load_document("- just\n- a list\n", source="x.yaml")


def test_the_published_schema_names_every_step_kind() -> None:
    schema = WorkflowDocument.model_json_schema(by_alias=True)
    kinds = schema["$defs"]["DocStepKind"]["enum"]
    assert set(kinds) == {k.value for k in DocStepKind}
    assert "from" in schema["$defs"]["Loop"]["properties"]


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    """The real `shoal workflows check`, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    return subprocess.run([str(Path(sys.executable).with_name("shoal")), "workflows", "check",
                           str(path)], capture_output=True, text=True, timeout=60,
                          env={**env, "NO_COLOR": "1", "COLUMNS": "200"})


def test_shoal_workflows_check_says_valid_or_names_the_line(tmp_path: Path) -> None:
    good = tmp_path / "translate.yaml"
    good.write_text(TRANSLATE)
    done = _check(good)
    assert done.returncode == 0, done.stderr
    assert "translate v1 is valid (steps: 3, roles: 3, parameters: 2, loops: 1)" in done.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(TRANSLATE.replace("kind: agent", "kind: agnet", 1))
    done = _check(bad)
    assert done.returncode == 1
    assert f"{bad}:{_line_of('    kind: agent')}: steps.0.kind:" in done.stderr
    assert "Traceback" not in done.stderr
    missing = _check(tmp_path / "nowhere.yaml")
    assert missing.returncode == 2
    assert "cannot be read" in missing.stderr
