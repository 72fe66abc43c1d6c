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

import asyncio
import importlib.metadata
import json
import shutil
import tempfile
from collections.abc import Awaitable, Mapping
from pathlib import Path

from shoal.config import Settings
from shoal.tools.base import Probe, ToolOutcome, ToolRun
from shoal.tools.cli_support import cli_version, find_cli
from shoal.tools.evaluator.common import (
    NEUTRAL_SCORE,
    Dimension,
    Issue,
    Selection,
    _Context,
    safe_env,
    select_files,
)
from shoal.tools.evaluator.quality import parse_eslint, parse_pylint, score_code_quality
from shoal.tools.evaluator.security import score_security
from shoal.tools.evaluator.testability import score_testability

__all__ = ["WEIGHTS", "Dimension", "EvaluatorTool", "Issue", "create", "find_analysers",
           "overall", "parse_eslint", "parse_pylint", "probe"]

WEIGHTS: dict[str, float] = {"code_quality": 1.5, "completeness": 1.5, "security": 2.0,
                             "architecture": 1.0, "testability": 1.0}
PYTHON_ANALYSERS = ("ruff", "radon", "bandit", "pytest", "coverage")


def overall(scores: Mapping[str, float | None]) -> float | None:
    """The weighted mean of the dimensions that have a score (names not in WEIGHTS ignored)."""
    pairs = [(WEIGHTS[name], score) for name, score in scores.items()
             if score is not None and name in WEIGHTS]
    total = sum(weight for weight, _ in pairs)
    if not pairs or total <= 0:
        return None
    return round(sum(weight * score for weight, score in pairs) / total, 1)


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
