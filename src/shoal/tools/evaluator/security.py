"""The security dimension: bandit's findings on the produced Python files."""

from __future__ import annotations

import sys

from shoal.tools.evaluator.common import (
    NEUTRAL_SCORE,
    Dimension,
    Finding,
    Issue,
    Severity,
    _args,
    _clamp,
    _Context,
    _execute,
    _gather,
    _is_test_support,
    _json_output,
    _not_applicable,
    _relative,
)

_BANDIT_SEVERITY = {"HIGH": 2.0, "MEDIUM": 0.5, "LOW": 0.2}
_BANDIT_CONFIDENCE = {"HIGH": 1.0, "MEDIUM": 0.75, "LOW": 0.5}


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
