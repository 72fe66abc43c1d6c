"""The `evaluator` tool: scores produced files on the three tool-based dimensions.

A worker writes a subtask's files into a fresh workspace and runs this tool on them. It answers
with JSON: `{"dimensions": {"code_quality" | "security" | "testability": {score, applicable,
neutral, issues, suggestions, details}}, "analysers": {name: version or null}}`. Completeness
and architecture are scored by a model elsewhere; `overall()` combines all five.

Scores are 0 to 10 with one decimal:

- **code_quality** = 10 - deductions, for Python (ruff, radon, pylint when installed) and
  JS/TS (an `eslint` binary on PATH). A linter finding weighs critical 3 (syntax errors, taken
  in full), high 1.5, medium 0.75, low 0.25; the non-critical sum is scaled by
  100 / max(lines, 100) of that language, so it is a density per 100 non-blank lines (pylint
  counts half: it overlaps ruff). Radon: each function of cyclomatic grade C/D/E/F deducts
  0.5/1/1.5/2 and each file of maintainability grade B/C deducts 0.5/1.5. Ruff's C901 is
  listed but not deducted: radon scores complexity.
- **security** = 10 - sum of severity * confidence over bandit's results: severity HIGH 2, MEDIUM
  0.5, LOW 0.2 (the seed's weights) times confidence HIGH 1, MEDIUM 0.75, LOW 0.5. `assert` in
  test files (B101) is not counted.
- **testability** runs the produced tests (pytest under coverage) in a throw-away copy of the
  workspace. With pass rate p and statement coverage c of the produced non-test files:
  (4 + 6c) * p, capped at 5 when any test fails or errors; c is taken as 1 when there is no
  such code and as 0.5 when coverage could not be measured. No tests → 3; tests that do not
  finish in time → 2; pytest unable to collect or run anything → 1.

A dimension without files it applies to has `applicable: false` and no score. When none of a
dimension's analysers could run, it is `neutral` with score 7 and a suggestion naming what to
install. One analyser crashing or timing out is reported in details and issues; nothing raises.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from shoal.artifacts.paths import resolve_inside
from shoal.config import Settings
from shoal.errors import ShoalError, ToolError
from shoal.tools.base import Probe, ToolOutcome, ToolRun
from shoal.tools.cli_support import cli_env, cli_version, find_cli
from shoal.worker.process import CommandResult, run_command

Severity = Literal["critical", "high", "medium", "low"]
Status = Literal["ran", "skipped", "failed", "timed_out"]

WEIGHTS: dict[str, float] = {"code_quality": 1.5, "completeness": 1.5, "security": 2.0,
                             "architecture": 1.0, "testability": 1.0}
NEUTRAL_SCORE = 7.0
PYTHON_ANALYSERS = ("ruff", "radon", "bandit", "pytest", "coverage")
JS_SUFFIXES = frozenset({".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx"})
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".tox",
                          ".mypy_cache", ".ruff_cache", ".pytest_cache"})
RUFF_RULES = "E,F,W,B,SIM,C90"

_LINT_WEIGHT: dict[Severity, float] = {"critical": 3.0, "high": 1.5, "medium": 0.75, "low": 0.25}
_CC_DEDUCTION = {"C": 0.5, "D": 1.0, "E": 1.5, "F": 2.0}
_CC_SEVERITY: dict[str, Severity] = {"C": "low", "D": "medium", "E": "high", "F": "high"}
_MI_DEDUCTION = {"B": 0.5, "C": 1.5}
_BANDIT_SEVERITY = {"HIGH": 2.0, "MEDIUM": 0.5, "LOW": 0.2}
_BANDIT_CONFIDENCE = {"HIGH": 1.0, "MEDIUM": 0.75, "LOW": 0.5}
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


def overall(scores: Mapping[str, float | None]) -> float | None:
    """The weighted mean of the dimensions that have a score (names not in WEIGHTS ignored)."""
    pairs = [(WEIGHTS[name], score) for name, score in scores.items()
             if score is not None and name in WEIGHTS]
    total = sum(weight for weight, _ in pairs)
    if not pairs or total <= 0:
        return None
    return round(sum(weight * score for weight, score in pairs) / total, 1)


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


# --- code quality ----------------------------------------------------------------------------


def _ruff_severity(code: str | None) -> Severity:
    if code is None or code in ("invalid-syntax", "syntax-error") or code.startswith("E9"):
        return "critical"
    if code in ("F821", "F822", "F823") or code.startswith(("F63", "F7")):
        return "high"
    if code.startswith(("B", "C90")) or (code.startswith("F") and code not in _RUFF_LOW_F):
        return "medium"
    return "low"


_RUFF_LOW_F = frozenset({"F401", "F403", "F405", "F541", "F811", "F841"})


async def run_ruff(ctx: _Context) -> Finding:
    """Ruff's pyflakes, pycodestyle, bugbear, simplify and mccabe rules, no project config."""
    files = ctx.selection.python
    result = await _execute(ctx, [sys.executable, "-m", "ruff", "check", "--no-cache",
                                  "--isolated", "--output-format", "json", "--select",
                                  RUFF_RULES, *_args(files)])
    issues = [Issue("ruff", _relative(ctx.workspace, item["filename"]),
                    (item.get("location") or {}).get("row"), item.get("code"),
                    _ruff_severity(item.get("code")), str(item["message"]))
              for item in _json_output(result)]
    return Finding("ruff", "ran", issues, _density(issues, ctx.selection.line_count(files)))


async def run_radon(ctx: _Context) -> Finding:
    """Cyclomatic complexity (grade C or worse deducts) and maintainability index per file."""
    files = _args(ctx.selection.python)
    radon = [sys.executable, "-m", "radon"]
    blocks = _json_output(await _execute(ctx, [*radon, "cc", "-j", *files]))
    indexes = _json_output(await _execute(ctx, [*radon, "mi", "-j", *files]))
    finding = Finding("radon", "ran")
    for name, entries in blocks.items():
        path = _relative(ctx.workspace, name)
        if isinstance(entries, dict):  # {"error": ...}: a file radon cannot parse
            finding.issues.append(Issue("radon", path, None, None, "low",
                                        f"radon could not parse it: {entries.get('error')}"))
            continue
        for block in _functions(entries):
            _grade_block(finding, path, block)
    for name, index in indexes.items():
        _grade_file(finding, _relative(ctx.workspace, name), index)
    return finding


def _functions(entries: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Functions and methods with their closures; classes are left out (methods are listed)."""
    for entry in entries:
        if entry.get("type") != "class":
            yield entry
            yield from _functions(entry.get("closures") or [])


def _grade_block(finding: Finding, path: str, block: Mapping[str, Any]) -> None:
    rank = str(block.get("rank", "A"))
    if rank not in _CC_DEDUCTION:
        return
    name = ".".join(filter(None, [block.get("classname"), block.get("name")]))
    finding.deduction += _CC_DEDUCTION[rank]
    finding.issues.append(Issue(
        "radon", path, block.get("lineno"), f"CC-{rank}", _CC_SEVERITY[rank],
        f"{name} has cyclomatic complexity {block.get('complexity')} (grade {rank})"))
    finding.extra.setdefault("complex", []).append(f"{name} ({rank}, {block.get('complexity')})")


def _grade_file(finding: Finding, path: str, index: Mapping[str, Any]) -> None:
    rank = str(index.get("rank", "A"))
    finding.extra.setdefault("maintainability", {})[path] = (
        round(float(index["mi"]), 1) if "mi" in index else None)
    if rank in _MI_DEDUCTION:
        finding.deduction += _MI_DEDUCTION[rank]
        finding.issues.append(Issue(
            "radon", path, None, f"MI-{rank}", "medium" if rank == "C" else "low",
            f"maintainability index {float(index['mi']):.1f} (grade {rank})"))


_PYLINT_SEVERITY: dict[str, Severity] = {"fatal": "critical", "error": "high",
                                          "warning": "medium"}


def _pylint_severity(kind: str) -> Severity:
    return _PYLINT_SEVERITY.get(kind, "low")


async def run_pylint(ctx: _Context) -> Finding:
    """Pylint's messages, counted at half weight because they overlap ruff's."""
    assert ctx.pylint is not None  # only called when pylint was found
    files = ctx.selection.python
    result = await _execute(ctx, [*ctx.pylint, "--output-format=json", "--persistent=n",
                                  "--score=n", *_args(files)])
    issues = parse_pylint(ctx.workspace, _json_output(result))
    return Finding("pylint", "ran", issues,
                   _density(issues, ctx.selection.line_count(files), factor=0.5))


def parse_pylint(root: Path, messages: Iterable[Mapping[str, Any]]) -> list[Issue]:
    """Issues from pylint's `--output-format=json` list."""
    return [Issue("pylint", _relative(root, str(m.get("path", ""))), m.get("line"),
                  m.get("message-id") or m.get("symbol"), _pylint_severity(str(m.get("type"))),
                  str(m.get("message", ""))) for m in messages]


async def run_eslint(ctx: _Context) -> Finding:
    """ESLint with the project's own configuration, if it has one."""
    assert ctx.eslint is not None  # only called when eslint was found
    files = ctx.selection.js
    result = await _execute(ctx, [ctx.eslint, "--format", "json", *_args(files)])
    issues = parse_eslint(ctx.workspace, _json_output(result))
    return Finding("eslint", "ran", issues, _density(issues, ctx.selection.line_count(files)))


def parse_eslint(root: Path, reports: Iterable[Mapping[str, Any]]) -> list[Issue]:
    """Issues from ESLint's `--format json` list of file reports."""
    issues: list[Issue] = []
    for report in reports:
        path = _relative(root, str(report.get("filePath", "")))
        for m in report.get("messages") or []:
            severity: Severity = ("critical" if m.get("fatal") else
                                  "medium" if m.get("severity") == 2 else "low")
            issues.append(Issue("eslint", path, m.get("line"), m.get("ruleId"), severity,
                                str(m.get("message", ""))))
    return issues


async def score_code_quality(ctx: _Context) -> Dimension:
    """Linters and complexity on the produced Python and JS/TS files."""
    sel = ctx.selection
    if not sel.python and not sel.js:
        return _not_applicable("no Python or JavaScript/TypeScript files")
    findings = await _gather(ctx, {
        "ruff": run_ruff if sel.python and ctx.versions.get("ruff") else None,
        "radon": run_radon if sel.python and ctx.versions.get("radon") else None,
        "pylint": run_pylint if sel.python and ctx.pylint else None,
        "eslint": run_eslint if sel.js and ctx.eslint else None,
    }, {"ruff": bool(sel.python), "radon": bool(sel.python), "pylint": bool(sel.python),
        "eslint": bool(sel.js)})
    details: dict[str, Any] = {
        "analysers": {f.tool: f.summary() for f in findings},
        "python_files": len(sel.python), "python_lines": sel.line_count(sel.python),
        "js_files": len(sel.js), "js_lines": sel.line_count(sel.js)}
    ran = [f for f in findings if f.status == "ran"]
    issues = [issue for f in findings for issue in f.issues]
    if not ran:
        return Dimension(NEUTRAL_SCORE, neutral=True, issues=issues, details=details,
                         suggestions=[_install_hint(sel.python, sel.js)])
    score = _clamp(10.0 - sum(f.deduction for f in ran))
    return Dimension(score, issues=issues, details=details,
                     suggestions=_quality_suggestions(ran))


def _install_hint(python: Sequence[str], js: Sequence[str]) -> str:
    wanted = []
    if python:
        wanted.append("ruff and radon in the worker's Python environment "
                      "(pip install ruff radon)")
    if js:
        wanted.append("ESLint on the worker's PATH (npm install -g eslint)")
    return ("No code-quality analyser could run, so this score is neutral. Install "
            + " and ".join(wanted) + ".")


def _quality_suggestions(findings: Iterable[Finding]) -> list[str]:
    suggestions: list[str] = []
    for f in findings:
        lint = [i for i in f.issues if f.tool != "radon" and i.code != "C901"]
        if lint:
            codes = sorted({str(i.code) for i in lint if i.code})[:6]
            suggestions.append(f"Fix the {len(lint)} {f.tool} findings ({', '.join(codes)}).")
        if f.extra.get("complex"):
            suggestions.append("Split the most complex functions into smaller ones: "
                               + ", ".join(f.extra["complex"][:5]) + ".")
        if any(i.code and i.code.startswith("MI-") for i in f.issues):
            suggestions.append("Improve maintainability of the files radon grades B or C: "
                               "shorter functions, less nesting, fewer branches.")
    return suggestions


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


# --- security --------------------------------------------------------------------------------


async def run_bandit(ctx: _Context) -> Finding:
    """Bandit on every produced Python file; severity * confidence deducts."""
    result = await _execute(ctx, [sys.executable, "-m", "bandit", "-f", "json", "-q",
                                  *_args(ctx.selection.python)])
    report = _json_output(result)
    finding = Finding("bandit", "ran")
    counts: dict[str, int] = {}
    for item in report.get("results", []):
        path = _relative(ctx.workspace, item["filename"])
        if item.get("test_id") == "B101" and _is_test_support(path):
            continue  # assert is how tests check things
        severity, confidence = item["issue_severity"], item["issue_confidence"]
        counts[severity] = counts.get(severity, 0) + 1
        finding.deduction += (_BANDIT_SEVERITY.get(severity, 0.2)
                              * _BANDIT_CONFIDENCE.get(confidence, 0.5))
        finding.issues.append(Issue(
            "bandit", path, item.get("line_number"), item.get("test_id"),
            _bandit_severity(severity, confidence),
            f"{item['issue_text']} ({item.get('test_name')}, severity {severity}, "
            f"confidence {confidence}; {item.get('more_info', '')})"))
    for error in report.get("errors", []):
        finding.issues.append(Issue("bandit", _relative(ctx.workspace, error["filename"]),
                                    None, None, "low", f"bandit: {error.get('reason')}"))
    finding.extra["counts"] = counts
    return finding


def _bandit_severity(severity: str, confidence: str) -> Severity:
    if severity == "HIGH":
        return "critical" if confidence == "HIGH" else "high"
    return "medium" if severity == "MEDIUM" else "low"


async def score_security(ctx: _Context) -> Dimension:
    """Bandit's findings on the produced Python files."""
    if not ctx.selection.python:
        return _not_applicable("no Python files (bandit scans Python only)")
    [finding] = await _gather(ctx, {"bandit": run_bandit if ctx.versions.get("bandit")
                                    else None}, {"bandit": True})
    details = {"analysers": {"bandit": finding.summary()}}
    if finding.status != "ran":
        return Dimension(NEUTRAL_SCORE, neutral=True, issues=finding.issues, details=details,
                         suggestions=["Bandit could not run, so this score is neutral. Install "
                                      "bandit in the worker's Python environment "
                                      "(pip install bandit)."])
    score = _clamp(10.0 - finding.deduction)
    suggestions = []
    if any(i.severity in ("critical", "high") for i in finding.issues):
        suggestions.append("Fix the high-severity security findings first (shell=True, eval, "
                           "unsafe deserialisation and the like).")
    if score < 7:
        suggestions.append("Review every bandit finding and follow OWASP guidance; keep "
                           "secrets out of code (read them from the environment).")
    return Dimension(score, issues=finding.issues, details=details, suggestions=suggestions)


# --- testability -----------------------------------------------------------------------------


@dataclass(slots=True)
class _TestReport:
    passed: int = 0
    skipped: int = 0
    failures: list[Issue] = field(default_factory=list)

    @property
    def executed(self) -> int:
        return self.passed + len(self.failures)


def parse_junit(root: Path, text: str) -> _TestReport:
    """Counts and failing tests from pytest's xunit1 JUnit XML (it carries file and line)."""
    report = _TestReport()
    for case in ElementTree.fromstring(text).iter("testcase"):  # pytest wrote it
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            report.passed += 1
        elif outcome.tag == "skipped":
            report.skipped += 1
        else:
            report.failures.append(_failure(root, case, outcome))
    return report


def _failure(root: Path, case: ElementTree.Element, outcome: ElementTree.Element) -> Issue:
    file = case.get("file")
    path = _relative(root, file) if file else None
    module = path.removesuffix(".py").replace("/", ".") if path else ""
    inner = (case.get("classname") or "").removeprefix(module).strip(".")
    nodeid = "::".join(filter(None, [path, *inner.split("."), case.get("name")]))
    line = case.get("line")
    number = int(line) + 1 if line and line.isdigit() else None  # xunit1 lines count from 0
    if not case.get("classname"):  # a module that could not be imported
        last = (outcome.text or "").strip().splitlines()[-1:] or [outcome.get("message", "")]
        return Issue("pytest", path, None, None, "high",
                     f"{path or case.get('name')} could not be collected: "
                     f"{last[0].removeprefix('E ').strip()}")
    what = "failed" if outcome.tag == "failure" else "errored"
    reason = (outcome.get("message") or "").strip().splitlines()
    return Issue("pytest", path, number, None, "high",
                 f"Test {nodeid} {what}: {reason[0] if reason else outcome.tag}")


async def score_testability(ctx: _Context) -> Dimension:
    """Run the produced tests under coverage in a copy of the workspace and score the result."""
    sel = ctx.selection
    if not sel.python:
        return _not_applicable("no Python files (only Python tests are run)")
    details: dict[str, Any] = {"test_files": sel.test_modules, "source_files": sel.sources}
    if not sel.test_modules:
        return _untested(details, "No test files were produced (test_*.py or *_test.py).")
    missing = [name for name in ("pytest", "coverage") if not ctx.versions.get(name)]
    if missing:
        details["analysers"] = {name: _skipped(name, "not installed").summary()
                                for name in missing}
        return Dimension(NEUTRAL_SCORE, neutral=True, details=details, suggestions=[
            f"The produced tests could not be run, so this score is neutral. Install "
            f"{' and '.join(missing)} in the worker's Python environment "
            f"(pip install {' '.join(missing)})."])
    scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="shoal-evaluate-"))
    try:
        return await _run_tests(ctx, scratch, details)
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)


def _untested(details: dict[str, Any], why: str) -> Dimension:
    return Dimension(3.0, details=details, issues=[Issue("pytest", None, None, None, "high", why)],
                     suggestions=["Add pytest tests for the produced code (test_*.py files) "
                                  "and aim for 80% statement coverage or more."])


async def _run_tests(ctx: _Context, scratch: Path, details: dict[str, Any]) -> Dimension:
    copy, home = scratch / "workspace", scratch / "home"
    await asyncio.to_thread(_prepare, ctx.workspace, copy, home, scratch)
    pythonpath = os.pathsep.join(str(p) for p in (copy, copy / "src"))
    env = {**ctx.env, "HOME": str(home), "TMPDIR": str(home), "PYTHONPATH": pythonpath,
           "COVERAGE_FILE": str(scratch / "coverage.data")}
    rcfile, junit = f"--rcfile={scratch / 'coveragerc'}", scratch / "junit.xml"
    argv = [sys.executable, "-m", "coverage", "run", rcfile, "--source=.", "-m", "pytest",
            "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
            f"--junitxml={junit}", "-o", "junit_family=xunit1",
            *_args(ctx.selection.test_modules)]
    try:
        result = await _execute(ctx, argv, cwd=copy, limit=ctx.test_timeout, env=env)
    except _Broken as exc:
        details["pytest"] = {"status": exc.status, "detail": exc.detail}
        score = 2.0 if exc.status == "timed_out" else NEUTRAL_SCORE
        return Dimension(score, neutral=exc.status != "timed_out", details=details, issues=[
            Issue("pytest", None, None, None, "high", f"The produced tests {exc.detail}.")],
            suggestions=["Make the tests finish quickly: no network, no sleeps, no endless "
                         "loops or prompts for input."])
    written = await asyncio.to_thread(_read_if_there, junit)
    report = parse_junit(copy, written) if written is not None else _TestReport()
    details["pytest"] = {"status": "ran", "exit_code": result.exit_code,
                         "passed": report.passed, "failed": len(report.failures),
                         "skipped": report.skipped, "duration": round(result.duration, 2)}
    if report.executed == 0:
        return _no_results(result, details)
    coverage = await _measure_coverage(ctx, copy, env, rcfile, details)
    return _grade_tests(report, coverage, details)


def _read_if_there(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        return None


def _prepare(workspace: Path, copy: Path, home: Path, scratch: Path) -> None:
    """A copy of the workspace to run in, so nothing the tests write lands in the original."""
    shutil.copytree(workspace, copy, symlinks=True,
                    ignore=shutil.ignore_patterns(*SKIPPED_DIRS, ".coverage*"))
    home.mkdir()
    (scratch / "coveragerc").write_text("", "utf-8")  # ignore the produced project's settings


def _no_results(result: CommandResult, details: dict[str, Any]) -> Dimension:
    if result.exit_code == 5:
        return _untested(details, "The test files hold no tests pytest could collect.")
    tail = (result.stdout + result.stderr).strip()[-_TAIL:]
    return Dimension(1.0, details=details, issues=[Issue(
        "pytest", None, None, None, "high",
        f"pytest could not run the produced tests (exit code {result.exit_code}): {tail}")],
        suggestions=["Make the test suite importable and runnable with `python -m pytest`."])


async def _measure_coverage(ctx: _Context, copy: Path, env: Mapping[str, str], rcfile: str,
                            details: dict[str, Any]) -> float | None:
    """Statement coverage of the produced non-test files; None when there are none."""
    sources = ctx.selection.sources
    if not sources:
        return None
    target = copy.parent / "coverage.json"
    try:
        result = await _execute(ctx, [sys.executable, "-m", "coverage", "json", rcfile, "-i",
                                      "-q", "-o", str(target)], cwd=copy, env=env)
        written = await asyncio.to_thread(_read_if_there, target)
        files = json.loads(written)["files"] if written is not None else None
    except (_Broken, ValueError, KeyError) as exc:
        files, result = None, None
        details["coverage"] = {"status": "failed", "detail": str(exc)}
    if files is None:  # counted as half covered: neither rewarded nor punished
        if result is not None:
            details["coverage"] = {"status": "failed", "detail": f"coverage json exited with "
                                   f"{result.exit_code}: {result.stderr.strip()[-_TAIL:]}"}
        return 0.5
    per_file = await asyncio.to_thread(_file_coverage, copy, sources, files)
    covered = sum(c for c, _ in per_file.values())
    total = sum(n for _, n in per_file.values())
    details["coverage"] = {"status": "ran", "files": {
        f: round(c / n, 3) if n else None for f, (c, n) in per_file.items()}}
    return covered / total if total else None


def _file_coverage(copy: Path, sources: Iterable[str], report: Mapping[str, Any],
                   ) -> dict[str, tuple[int, int]]:
    """(covered, statements) per source; a file coverage never saw counts its statements."""
    found: dict[str, tuple[int, int]] = {}
    for name in sources:
        summary = (report.get(name) or {}).get("summary")
        if summary is not None:
            found[name] = (int(summary["covered_lines"]), int(summary["num_statements"]))
        else:
            found[name] = (0, _statement_lines(copy / name))
    return found


def _statement_lines(path: Path) -> int:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return 0
    return len({node.lineno for node in ast.walk(tree) if isinstance(node, ast.stmt)})


def _grade_tests(report: _TestReport, coverage: float | None,
                 details: dict[str, Any]) -> Dimension:
    rate = report.passed / report.executed
    base = 4.0 + 6.0 * (coverage if coverage is not None else 1.0)
    score = base * rate if not report.failures else min(base * rate, 5.0)
    details.update(pass_rate=round(rate, 3),
                   coverage_ratio=round(coverage, 3) if coverage is not None else None)
    suggestions = []
    if report.failures:
        suggestions.append(f"Make the failing tests pass ({len(report.failures)} of "
                           f"{report.executed}, listed in issues).")
    issues = list(report.failures)
    if coverage is not None and coverage < 0.8:
        low = [f for f, ratio in details.get("coverage", {}).get("files", {}).items()
               if ratio is not None and ratio < 0.5]
        issues.extend(Issue("pytest", f, None, None, "medium", "Less than half of this file's "
                            "statements run under the produced tests (coverage).") for f in low)
        suggestions.append(f"Raise statement coverage of the produced code from "
                           f"{coverage:.0%} to 80% or more.")
    return Dimension(_clamp(score), issues=issues, suggestions=suggestions, details=details)


# --- the tool --------------------------------------------------------------------------------


async def find_analysers(settings: Settings | None = None) -> dict[str, str | None]:
    """The version of each analyser this worker can run, or None when it is missing."""
    versions = await asyncio.to_thread(
        lambda: {name: _installed(name) for name in PYTHON_ANALYSERS})
    for name in ("pylint", "eslint"):
        path = find_cli(name, settings)
        versions[name] = await cli_version(path, settings) if path else None
    return versions


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


class EvaluatorTool:
    """Scores code quality, security and testability of produced files with real analysers.

    Options: `files` (workspace-relative paths to evaluate; default every file),
    `analyser_timeout` and `test_timeout` (seconds; default from `run.timeout`).
    """

    name = "evaluator"
    local = True
    version = "1"

    def __init__(self, settings: Settings | None = None,
                 analysers: Mapping[str, str | None] | None = None) -> None:
        self._settings = settings
        self._analysers = dict(analysers) if analysers is not None else None
        self._lock = asyncio.Lock()

    async def analysers(self) -> dict[str, str | None]:
        """The analysers found on this worker (looked up once)."""
        async with self._lock:
            if self._analysers is None:
                self._analysers = await find_analysers(self._settings)
            return dict(self._analysers)

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Evaluate the files and answer with the dimensions as JSON."""
        wanted = run.options.get("files")
        if wanted is not None and (isinstance(wanted, str) or not isinstance(wanted, list)
                                   or not all(isinstance(f, str) for f in wanted)):
            return ToolOutcome("failed", error="The evaluator's `files` option must be a list "
                               "of workspace-relative paths.")
        versions = await self.analysers()
        workspace = await asyncio.to_thread(run.workspace.resolve)
        selection = await asyncio.to_thread(select_files, workspace, wanted)
        run.log(f"evaluator: {len(selection.files)} files, {len(selection.python)} Python, "
                f"{len(selection.js)} JS/TS")
        home = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="shoal-evaluator-home-"))
        try:
            ctx = self._context(run, workspace, selection, versions, home)
            dimensions = await _score_all(ctx)
        finally:
            await asyncio.to_thread(shutil.rmtree, home, True)
        if selection.ignored:
            for dimension in dimensions.values():
                dimension.details["ignored_files"] = list(selection.ignored)
        report = {"dimensions": {k: d.to_json() for k, d in dimensions.items()},
                  "analysers": versions}
        return ToolOutcome("succeeded", output=json.dumps(report))

    def _context(self, run: ToolRun, workspace: Path, selection: Selection,
                 versions: Mapping[str, str | None], home: Path) -> _Context:
        timeout = float(run.options.get("analyser_timeout") or min(60.0, max(5.0,
                                                                               run.timeout / 4)))
        tests = float(run.options.get("test_timeout") or min(120.0, run.timeout / 2))
        pylint = find_cli("pylint", self._settings) if versions.get("pylint") else None
        eslint = find_cli("eslint", self._settings) if versions.get("eslint") else None
        return _Context(workspace, selection, versions, safe_env(home, self._settings, {}),
                        timeout, tests, run.log, (pylint,) if pylint else None, eslint)


async def _score_all(ctx: _Context) -> dict[str, Dimension]:
    scorers = {"code_quality": score_code_quality, "security": score_security,
               "testability": score_testability}
    async with asyncio.TaskGroup() as tg:
        tasks = {name: tg.create_task(_guarded(name, scorer(ctx)))
                 for name, scorer in scorers.items()}
    return {name: task.result() for name, task in tasks.items()}


async def _guarded(name: str, work: Awaitable[Dimension]) -> Dimension:
    """A dimension that breaks unexpectedly is neutral, with the reason, instead of raising."""
    try:
        return await work
    except Exception as exc:
        return Dimension(NEUTRAL_SCORE, neutral=True,
                         details={"error": f"{type(exc).__name__}: {exc}"},
                         suggestions=[f"The {name} evaluation failed unexpectedly; see the "
                                      "details and the worker log."])


async def probe(settings: Settings) -> Probe:
    """Always available; the detail lists which analysers were found, with versions."""
    versions = await find_analysers(settings)
    found = ", ".join(f"{name} {version}" if version else f"{name} not found"
                      for name, version in versions.items())
    return Probe("evaluator", True, version=EvaluatorTool.version, local=True,
                 detail=f"built in; analysers: {found}")


def create(settings: Settings, probe: Probe) -> EvaluatorTool:
    """The evaluator tool (the analysers are looked up again on its first run)."""
    return EvaluatorTool(settings)
