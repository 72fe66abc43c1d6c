"""Every `shoal …` command the site and the README show is one the CLI has: its subcommands
exist and each `--option` it passes is one of that command's options. Every `make …` target
they show is one of the Makefile's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from shoal.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
BLOCK = re.compile(r"```(?:bash|sh)\n(.*?)```", re.DOTALL)


def _commands(text: str, program: tuple[str, ...] = ("shoal", ".venv/bin/shoal")
              ) -> list[list[str]]:
    """The `shoal` command lines of a page's shell blocks, as words (each quoted text one word),
    comments dropped."""
    found = []
    for block in BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            code = re.sub(r'"[^"]*"|\'[^\']*\'', "TEXT", line.split(" # ")[0])
            for part in re.split(r"\|\||&&|[|;&()]|\$\(", code):
                words = part.split()
                while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                    words = words[1:]  # environment assignments before the command
                if words and words[0] in program:
                    found.append(words[1:])
    return found


def _problem(cli: Any, words: list[str]) -> str | None:
    """Why `shoal <words>` is not a command line the CLI takes, or None. (Typer brings its own
    copy of click: a group is told by its `commands`.)"""
    command, rest = cli, list(words)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        if rest[0] not in command.commands:
            return f"no command {rest[0]!r}"
        command, rest = command.commands[rest[0]], rest[1:]
    if hasattr(command, "commands"):
        return None if rest[:1] == ["--help"] else "a group without its command"
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    unknown = [w.split("=")[0] for w in rest if w.startswith("--") and w.split("=")[0] not in known]
    return f"no option {unknown[0]} of {command.name}" if unknown else None


def test_the_pages_show_shoal_commands() -> None:
    """The scan finds the commands (so the test below is not vacuous)."""
    assert sum(len(_commands(p.read_text())) for p in PAGES) > 50


def test_a_made_up_option_is_caught() -> None:
    """A command with an option `shoal submit` lacks is refused by the check."""
    cli = typer.main.get_command(app)
    assert _problem(cli, ["submit", "--colour", "red", "x"]) == "no option --colour of submit"
    assert _problem(cli, ["workflow", "check", "x.yaml"]) == "no command 'workflow'"
    assert _problem(cli, ["task"]) == "a group without its command"
    assert _problem(cli, ["task", "report", "x", "--pdf", "r.pdf"]) is None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shoal_command_of_a_page_exists(page: Path) -> None:
    """Each `shoal …` line of the page names real subcommands and options."""
    cli = typer.main.get_command(app)
    bad = [(" ".join(words), why) for words in _commands(page.read_text())
           if (why := _problem(cli, words)) is not None]
    assert not bad, bad


def test_every_make_target_of_a_page_exists() -> None:
    """Each `make TARGET` the pages show (with or without VAR=value) is a Makefile rule."""
    rules = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    shown = {w for p in PAGES for words in _commands(p.read_text(), ("make",))
             for w in words if "=" not in w}
    assert {"run", "test"} <= shown
    assert shown <= rules, shown - rules
