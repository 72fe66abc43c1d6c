"""The README's test command sets up everything its tests drive: every Makefile target that
installs something (pip, npm, apt-get) is reached from `make test`, so a fresh machine runs the
deployment, browser, PDF and CLI checks instead of skipping them, and CI (`.ci/run`) runs
exactly that command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLS = re.compile(r"\b(pip install|npm install|apt-get install)\b")


def rules() -> dict[str, tuple[list[str], str]]:
    """Each Makefile target: its prerequisites and its recipe (variables $(VENV) expanded to
    their default, the only ones rule names use)."""
    found: dict[str, tuple[list[str], str]] = {}
    current: list[str] = []
    for line in (ROOT / "Makefile").read_text().replace("$(VENV)", ".venv").splitlines():
        if line.startswith("\t"):
            for target in current:
                prerequisites, recipe = found[target]
                found[target] = (prerequisites, recipe + line + "\n")
            continue
        rule = re.match(r"^([^\s:#=][^:#=]*?)\s*:(?!=)\s*([^#]*)", line)
        if rule is None or line.startswith((".PHONY", "export")):
            current = []  # a comment, a variable or a blank line ends a recipe
            continue
        current = rule.group(1).split()
        for target in current:
            found[target] = (rule.group(2).split(), "")
    return found


def reached_from(target: str, table: dict[str, tuple[list[str], str]]) -> set[str]:
    seen, todo = set(), [target]
    while todo:
        name = todo.pop()
        if name in seen or name not in table:
            continue
        seen.add(name)
        todo += table[name][0]
    return seen


def test_make_test_installs_what_its_tests_drive() -> None:
    """Every target that installs a tool is a prerequisite (direct or not) of `test`."""
    table = rules()
    installers = {name for name, (_, recipe) in table.items() if INSTALLS.search(recipe)}
    assert {"deploy-tools", "browser", "pdf", ".tools/.installed-clis",
            ".venv/.installed"} <= installers, installers
    assert installers - reached_from("test", table) == set()


def test_ci_runs_the_readmes_test_command() -> None:
    """`.ci/run` ends with `make test`, the command the README gives, and installs nothing
    that command would not."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[-1] == "make test"
    assert [line for line in lines if line.startswith("make ")] == ["make test"]
    assert "make test   # set up and run the whole test suite" in (ROOT / "README.md").read_text()
