"""The files the demo model writes: a real, working todo app, and generic templates.

Kept apart from `demo_model` because they are data, not logic. The todo files pass their own
tests (`python -m pytest -q` in a folder holding all four).
"""

from __future__ import annotations

SIGNATURE = "Written by the Shoal demo model: a script, not a real model."

GENERIC_MODULE = '''"""{title}: written by the Shoal demo model (a script, not a real model)."""

DESCRIPTION = {text!r}


def describe() -> str:
    """Say what this module is for."""
    return DESCRIPTION


if __name__ == "__main__":
    print(describe())
'''

GENERIC_TEST = '''"""Tests for {module}.py, written by the Shoal demo model."""

from {module} import describe


def test_describe_says_what_the_module_is_for() -> None:
    assert describe()
'''

GENERIC_TEST_ALONE = '''"""A placeholder test written by the Shoal demo model."""


def test_placeholder() -> None:
    assert True
'''

TODO_FILES: dict[str, str] = {
    "todo.py": r'''"""A small todo list kept in a JSON file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Todo:
    """One thing to do."""

    id: int
    text: str
    done: bool = False


class TodoList:
    """Todos in memory, loaded from and saved to JSON."""

    def __init__(self, items: list[Todo] | None = None) -> None:
        self.items: list[Todo] = list(items or [])

    def add(self, text: str) -> Todo:
        """Add a todo and return it."""
        if not text.strip():
            raise ValueError("A todo needs some text.")
        todo = Todo(id=max((t.id for t in self.items), default=0) + 1, text=text.strip())
        self.items.append(todo)
        return todo

    def complete(self, todo_id: int) -> Todo:
        """Mark a todo as done."""
        todo = self._find(todo_id)
        todo.done = True
        return todo

    def remove(self, todo_id: int) -> Todo:
        """Remove a todo and return it."""
        todo = self._find(todo_id)
        self.items.remove(todo)
        return todo

    def list(self, include_done: bool = True) -> list[Todo]:
        """The todos, oldest first; without the done ones if asked."""
        return [t for t in self.items if include_done or not t.done]

    def save(self, path: Path) -> None:
        """Write the todos to `path` as JSON."""
        data = [asdict(t) for t in self.items]
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> TodoList:
        """Read todos from `path`; a missing file is an empty list."""
        if not path.exists():
            return cls()
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls([Todo(**item) for item in data])

    def _find(self, todo_id: int) -> Todo:
        for todo in self.items:
            if todo.id == todo_id:
                return todo
        raise KeyError(f"No todo with id {todo_id}.")
''',
    "cli.py": r'''"""Command-line interface for the todo list: add, done, rm, ls."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from todo import TodoList


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per action."""
    parser = argparse.ArgumentParser(prog="todo", description="A tiny todo list.")
    parser.add_argument("--file", type=Path, default=Path("todos.json"),
                        help="where the todos are kept (default: todos.json)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("add", help="add a todo").add_argument("text", nargs="+")
    commands.add_parser("done", help="mark a todo done").add_argument("id", type=int)
    commands.add_parser("rm", help="remove a todo").add_argument("id", type=int)
    ls = commands.add_parser("ls", help="list the todos")
    ls.add_argument("--all", action="store_true", help="include the done ones")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; return the exit code."""
    args = build_parser().parse_args(argv)
    todos = TodoList.load(args.file)
    try:
        if args.command == "add":
            todo = todos.add(" ".join(args.text))
            print(f"Added {todo.id}: {todo.text}")
        elif args.command == "done":
            todo = todos.complete(args.id)
            print(f"Done {todo.id}: {todo.text}")
        elif args.command == "rm":
            todo = todos.remove(args.id)
            print(f"Removed {todo.id}: {todo.text}")
        else:
            for todo in todos.list(include_done=args.all):
                print(f"[{'x' if todo.done else ' '}] {todo.id}: {todo.text}")
            return 0
    except (KeyError, ValueError) as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 1
    todos.save(args.file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
''',
    "test_todo.py": r'''"""Tests for todo.py."""

from pathlib import Path

import pytest

from todo import TodoList


def test_add_numbers_todos_from_one() -> None:
    todos = TodoList()
    assert todos.add("buy milk").id == 1
    assert todos.add("call mum").id == 2


def test_complete_marks_a_todo_done() -> None:
    todos = TodoList()
    todo = todos.add("buy milk")
    todos.complete(todo.id)
    assert todos.list() == [todo]
    assert todo.done
    assert todos.list(include_done=False) == []


def test_remove_deletes_a_todo() -> None:
    todos = TodoList()
    todo = todos.add("buy milk")
    assert todos.remove(todo.id) == todo
    assert todos.list() == []


def test_unknown_id_is_an_error() -> None:
    with pytest.raises(KeyError):
        TodoList().complete(42)


def test_empty_text_is_refused() -> None:
    with pytest.raises(ValueError, match="needs some text"):
        TodoList().add("   ")


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "todos.json"
    todos = TodoList()
    todos.add("buy milk")
    todos.complete(todos.add("call mum").id)
    todos.save(path)
    assert TodoList.load(path).list() == todos.list()


def test_load_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert TodoList.load(tmp_path / "none.json").list() == []
''',
    "README.md": r'''# Todo

A tiny command-line todo list. Todos are kept in `todos.json` (change it with `--file`).

## Usage

```sh
python cli.py add Buy milk     # Added 1: Buy milk
python cli.py ls               # [ ] 1: Buy milk
python cli.py done 1           # Done 1: Buy milk
python cli.py ls --all         # [x] 1: Buy milk
python cli.py rm 1             # Removed 1: Buy milk
```

## Tests

```sh
python -m pytest -q
```
''',
}

# `[demo:messy]`: code with real problems, so the evaluators have something to find.
MESSY_MODULE = '''"""Deliberately poor code from the Shoal demo model ([demo:messy])."""
import os
import subprocess
import sys

PASSWORD = "hunter2"


def describe():
    return "messy"


def run(command):
    return subprocess.call(command, shell=True)


def calculate(expression):
    return eval(expression)


def add(a, b):
    return a - b
'''

MESSY_TEST = '''"""Tests from the Shoal demo model ([demo:messy]): one of them fails."""
from {module} import add, describe


def test_describe():
    assert describe() == "messy"


def test_add():
    assert add(2, 2) == 4
'''
