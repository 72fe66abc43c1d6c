"""The code-quality dimension: ruff, radon and pylint on Python, ESLint on JS/TS."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from shoal.tools.evaluator.common import (
    NEUTRAL_SCORE,
    Dimension,
    Finding,
    Issue,
    Severity,
    _args,
    _clamp,
    _Context,
    _density,
    _execute,
    _gather,
    _json_output,
    _not_applicable,
    _relative,
)

RUFF_RULES = "E,F,W,B,SIM,C90"
_CC_DEDUCTION = {"C": 0.5, "D": 1.0, "E": 1.5, "F": 2.0}
_CC_SEVERITY: dict[str, Severity] = {"C": "low", "D": "medium", "E": "high", "F": "high"}
_MI_DEDUCTION = {"B": 0.5, "C": 1.5}


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
