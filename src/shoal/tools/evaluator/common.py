"""What the evaluator's dimensions share: issues and verdicts, file selection, analyser runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from shoal.artifacts.paths import resolve_inside
from shoal.config import Settings
from shoal.errors import ShoalError, ToolError
from shoal.process import CommandResult, run_command
from shoal.tools.cli_support import cli_env

Severity = Literal["critical", "high", "medium", "low"]
Status = Literal["ran", "skipped", "failed", "timed_out"]
NEUTRAL_SCORE = 7.0
JS_SUFFIXES = frozenset({".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx"})
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".tox",
                          ".mypy_cache", ".ruff_cache", ".pytest_cache"})

_LINT_WEIGHT: dict[Severity, float] = {"critical": 3.0, "high": 1.5, "medium": 0.75, "low": 0.25}
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_TAIL = 800  # characters of an analyser's output quoted in an issue


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem an analyser found, as stored with the evaluation."""

    tool: str
    file: str | None
    line: int | None
    code: str | None
    severity: Severity
    message: str


@dataclass(slots=True)
class Finding:
    """What one analyser run gave: its issues, its deduction, and how it went."""

    tool: str
    status: Status
    issues: list[Issue] = field(default_factory=list)
    deduction: float = 0.0
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The analyser's entry in a dimension's details."""
        return {"status": self.status, "detail": self.detail, "findings": len(self.issues),
                "deduction": round(self.deduction, 2), **self.extra}


@dataclass(frozen=True, slots=True)
class Dimension:
    """One dimension's verdict."""

    score: float | None
    applicable: bool = True
    neutral: bool = False
    issues: list[Issue] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The dimension as stored: issues become plain objects."""
        return {"score": self.score, "applicable": self.applicable, "neutral": self.neutral,
                "issues": [asdict(issue) for issue in self.issues],
                "suggestions": self.suggestions, "details": self.details}


def _clamp(score: float) -> float:
    return round(min(10.0, max(0.0, score)), 1)


def _not_applicable(reason: str) -> Dimension:
    return Dimension(score=None, applicable=False, details={"reason": reason})


# --- which files ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """The files to evaluate, the names refused, and non-blank line counts of code files."""

    files: tuple[str, ...]
    ignored: tuple[str, ...] = ()
    lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def python(self) -> list[str]:
        return [f for f in self.files if f.endswith(".py")]

    @property
    def js(self) -> list[str]:
        return [f for f in self.files if PurePosixPath(f).suffix in JS_SUFFIXES]

    @property
    def test_modules(self) -> list[str]:
        """Python files pytest collects by name: test_*.py and *_test.py."""
        return [f for f in self.python if _is_test_module(f)]

    @property
    def sources(self) -> list[str]:
        """Python files that are neither tests nor test support (conftest, tests/ folders)."""
        return [f for f in self.python if not _is_test_support(f)]

    def line_count(self, files: Iterable[str]) -> int:
        return sum(self.lines.get(f, 0) for f in files)


def _is_test_module(path: str) -> bool:
    name = PurePosixPath(path).name
    return name.startswith("test_") or name.endswith("_test.py")


def _is_test_support(path: str) -> bool:
    pure = PurePosixPath(path)
    return (_is_test_module(path) or pure.name == "conftest.py"
            or any(part in ("tests", "test") for part in pure.parts[:-1]))


def select_files(workspace: Path, wanted: Sequence[str] | None) -> Selection:
    """The workspace files named in `wanted` (folders expanded), or every file when None."""
    root = workspace.resolve()
    found: set[str] = set()
    ignored: list[str] = []
    for name in wanted if wanted is not None else ["."]:
        try:
            target = root if name == "." else resolve_inside(root, name)
        except ShoalError:
            ignored.append(name)
            continue
        if target.is_dir():
            found.update(_walk(root, target))
        elif target.is_file():
            found.add(target.relative_to(root).as_posix())
        else:
            ignored.append(name)
    files = tuple(sorted(found))
    lines = {f: _non_blank_lines(root / f) for f in files
             if f.endswith(".py") or PurePosixPath(f).suffix in JS_SUFFIXES}
    return Selection(files, tuple(ignored), lines)


def _walk(root: Path, folder: Path) -> Iterable[str]:
    for current, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in names:
            path = Path(current) / name
            with contextlib.suppress(ShoalError):  # a symlink that leads out is left out
                if resolve_inside(root, path.relative_to(root).as_posix()).is_file():
                    yield path.relative_to(root).as_posix()


def _non_blank_lines(path: Path) -> int:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if line.strip())


# --- running analysers ---------------------------------------------------------------------


class _Broken(Exception):
    """An analyser that could not start, timed out, or gave output that cannot be read."""

    def __init__(self, status: Status, detail: str) -> None:
        super().__init__(detail)
        self.status: Status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Context:
    workspace: Path
    selection: Selection
    versions: Mapping[str, str | None]
    env: Mapping[str, str]
    analyser_timeout: float
    test_timeout: float
    log: Callable[[str], None]
    pylint: tuple[str, ...] | None = None  # the command that runs pylint, when found
    eslint: str | None = None


def safe_env(home: Path, settings: Settings | None, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment analysers and produced code run with: no secrets, no SHOAL_*."""
    env = cli_env(home, {"PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(home), **extra},
                  settings)
    return {key: value for key, value in env.items()
            if not key.startswith("SHOAL_") and not any(w in key.upper() for w in _SECRET_WORDS)}


async def _execute(ctx: _Context, argv: Sequence[str], *, cwd: Path | None = None,
                   limit: float | None = None, env: Mapping[str, str] | None = None,
                   ) -> CommandResult:
    limit = limit if limit is not None else ctx.analyser_timeout
    try:
        result = await run_command(argv, cwd=cwd or ctx.workspace, timeout=limit,
                                   env=env if env is not None else ctx.env,
                                   interrupt_grace=1.0, terminate_grace=1.0)
    except ToolError as exc:
        raise _Broken("failed", exc.message) from exc
    if result.timed_out:
        raise _Broken("timed_out", f"did not finish within {limit:g} s")
    return result


def _json_output(result: CommandResult) -> Any:
    try:
        return json.loads(result.stdout)
    except ValueError:
        tail = (result.stderr or result.stdout).strip()[-_TAIL:]
        raise _Broken("failed", f"exited with {result.exit_code} without JSON output: "
                                f"{tail or '(no output)'}") from None


async def _analyse(tool: str, work: Awaitable[Finding], log: Callable[[str], None]) -> Finding:
    """Await one analyser; a crash or time-out becomes a finding that says so."""
    try:
        finding = await work
    except _Broken as exc:
        finding = Finding(tool, exc.status, detail=exc.detail)
    except Exception as exc:  # an unexpected output shape must not sink the whole evaluation
        finding = Finding(tool, "failed", detail=f"{type(exc).__name__}: {exc}")
    if finding.status in ("failed", "timed_out"):
        finding.issues.append(Issue(tool, None, None, None, "low",
                                    f"{tool} {finding.detail}; its checks are missing here."))
    log(f"evaluator: {tool} {finding.status} ({len(finding.issues)} issues)")
    return finding


def _skipped(tool: str, detail: str) -> Finding:
    return Finding(tool, "skipped", detail=detail)


def _relative(root: Path, name: str) -> str:
    path = Path(name)
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return path.relative_to(root).as_posix()
        return name
    return PurePosixPath(os.path.normpath(name)).as_posix()


def _args(files: Iterable[str]) -> list[str]:
    return [f"./{f}" for f in files]  # "./" keeps a name such as "-x.py" from reading as a flag


def _density(issues: Iterable[Issue], lines: int, factor: float = 1.0) -> float:
    """Critical findings in full; the others per 100 non-blank lines (at least 100 counted)."""
    critical = sum(_LINT_WEIGHT["critical"] for i in issues if i.severity == "critical")
    rest = sum(_LINT_WEIGHT[i.severity] for i in issues
               if i.severity != "critical" and i.code != "C901")
    return factor * (critical + rest * 100 / max(lines, 100))


async def _gather(ctx: _Context, jobs: Mapping[str, Callable[[_Context], Awaitable[Finding]]
                                                 | None],
                  wanted: Mapping[str, bool]) -> list[Finding]:
    """Run the analysers that are there concurrently; the others are reported as skipped."""
    findings: dict[str, Finding] = {}
    async with asyncio.TaskGroup() as tg:
        tasks = {name: tg.create_task(_analyse(name, job(ctx), ctx.log))
                 for name, job in jobs.items() if job is not None}
    for name in jobs:
        if name in tasks:
            findings[name] = tasks[name].result()
        elif wanted.get(name):
            findings[name] = _skipped(name, "not installed")
        else:
            findings[name] = _skipped(name, "no files it applies to")
    return list(findings.values())
