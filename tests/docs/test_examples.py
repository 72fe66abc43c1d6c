"""Every workflow document the site shows is a file `shoal workflows check` passes: the guides
include docs/examples/*.yaml (and the built-ins) with pymdownx.snippets, so a page shows exactly
the checked file; README.md's taste of a document is docs/examples/readme.yaml, word for word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.yaml"))
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def _included() -> set[str]:
    """The files the site's pages include with `--8<-- "path"`."""
    return {m for page in (ROOT / "docs").rglob("*.md") for m in SNIPPET.findall(page.read_text())}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_passes_shoal_workflows_check(path: Path) -> None:
    """`shoal workflows check` (the command a reader runs) says the example is valid."""
    checked = CliRunner().invoke(app, ["workflows", "check", str(path)])
    assert checked.exit_code == 0, checked.output
    # (rich wraps at 80 columns off a terminal: a long checkout path moves "valid" to a new line)
    assert "is valid" in " ".join(checked.output.split())


def test_the_checker_refuses_a_broken_example(tmp_path: Path) -> None:
    """The same command fails on an example with a step naming a role nobody declared, so the
    tests above can fail."""
    broken = tmp_path / "broken.yaml"
    broken.write_text((ROOT / "docs/examples/01-one-step.yaml").read_text()
                      .replace("role: writer}", "role: author}"))
    checked = CliRunner().invoke(app, ["workflows", "check", str(broken)])
    assert checked.exit_code == 1
    assert "no role 'author' in roles" in checked.output


def test_every_example_is_shown_by_a_page() -> None:
    """No example lies unused: each docs/examples file is included by some page of the site
    (the README's, readme.yaml, by the tutorial too)."""
    shown = _included()
    assert EXAMPLES
    assert {f"docs/examples/{p.name}" for p in EXAMPLES} <= shown


def test_every_builtin_workflow_is_shown_from_its_file() -> None:
    """The built-in workflows page includes each of src/shoal/workflows/builtin/ rather than a
    copy of it."""
    builtins = sorted((ROOT / "src/shoal/workflows/builtin").glob("*.yaml"))
    assert {f"src/shoal/workflows/builtin/{p.name}" for p in builtins} <= _included()


def test_the_readmes_workflow_is_the_checked_example() -> None:
    """README.md's YAML block is docs/examples/readme.yaml exactly (GitHub cannot include it)."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    assert blocks == [(ROOT / "docs/examples/readme.yaml").read_text()]


def test_the_receivers_check_agrees_with_shoals_signature() -> None:
    """docs/examples/verify_webhook.py accepts what Shoal signs, and refuses a changed body, a
    wrong secret and an old timestamp."""
    import importlib.util
    import time

    from shoal.notify.signing import signature_header

    spec = importlib.util.spec_from_file_location("verify_webhook",
                                                  ROOT / "docs/examples/verify_webhook.py")
    assert spec is not None
    assert spec.loader is not None
    receiver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(receiver)
    body, now = b'{"id": "n1", "type": "ping"}', int(time.time())
    header = signature_header("s" * 32, body, now)
    assert receiver.verify("s" * 32, body, header)
    assert not receiver.verify("s" * 32, body + b" ", header)
    assert not receiver.verify("t" * 32, body, header)
    assert not receiver.verify("s" * 32, body, signature_header("s" * 32, body, now - 301))
