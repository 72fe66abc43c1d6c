"""The testability dimension: the produced tests run under coverage in a copy of the workspace."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.process import CommandResult
from shoal.tools.evaluator.common import (
    _TAIL,
    NEUTRAL_SCORE,
    SKIPPED_DIRS,
    Dimension,
    Issue,
    _args,
    _Broken,
    _clamp,
    _Context,
    _execute,
    _not_applicable,
    _relative,
    _skipped,
)


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
