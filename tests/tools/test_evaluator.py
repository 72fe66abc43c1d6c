"""The evaluator tool: real analysers (ruff, radon, bandit, pytest, coverage) on real files."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest

from shoal.process import CommandResult, run_command
from shoal.tools.base import ToolRun
from shoal.tools.evaluator import (
    WEIGHTS,
    EvaluatorTool,
    create,
    overall,
    parse_eslint,
    parse_pylint,
    probe,
)
from shoal.tools.evaluator import common as evaluator_common
from tests.conftest import make_settings

CLEAN = '''"""Small arithmetic helpers."""


def add(a: int, b: int) -> int:
    """Return the sum."""
    return a + b


def halve(value: int) -> float:
    """Return half of the value."""
    return value / 2
'''

PASSING_TESTS = '''from calc import add, halve


def test_add():
    assert add(2, 3) == 5


def test_halve():
    assert halve(4) == 2
'''

FAILING_TESTS = '''from calc import add, halve


def test_add():
    assert add(2, 3) == 5


def test_halve_is_wrong():
    assert halve(4) == 3


class TestMore:
    def test_add_is_wrong(self):
        assert add(1, 1) == 3
'''

COMPLEX = "def decide(a, b, c, d, e):\n    total = 0\n" + "".join(
    f"    if a > {i} and b or c:\n        total += {i}\n    elif d or e:\n        total -= 1\n"
    for i in range(12)) + "    return total\n"

INSECURE = '''import subprocess

password = "hunter2-very-secret"


def run(command):
    subprocess.call(command, shell=True)
    return eval(command)
'''


def write(workspace: Path, files: dict[str, str]) -> None:
    workspace.mkdir(exist_ok=True)
    for name, text in files.items():
        target = workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


async def evaluate(workspace: Path, produced: dict[str, str] | None = None,
                   tool: EvaluatorTool | None = None, **options: Any) -> dict[str, Any]:
    """Write the `produced` files, run the evaluator on the workspace, return its answer."""
    await asyncio.to_thread(write, workspace, produced or {})
    run = ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                  role="evaluator", name="evaluate", instructions="", workspace=workspace,
                  timeout=60, log=lambda _line: None, options=options)
    outcome = await (tool or EvaluatorTool()).run(run)
    assert outcome.status == "succeeded", outcome.error
    answer: dict[str, Any] = json.loads(outcome.output)
    return answer


def listing(root: Path) -> list[str]:
    """Every file and folder under `root`, relative, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def codes(dimension: dict[str, Any]) -> set[str]:
    return {issue["code"] for issue in dimension["issues"] if issue["code"]}


async def test_clean_code_scores_high(tmp_path: Path) -> None:
    """Clean, tested code scores high on all three dimensions and lists the analysers."""
    answer = await evaluate(tmp_path, {"calc.py": CLEAN, "tests/test_calc.py": PASSING_TESTS})
    dims = answer["dimensions"]
    assert dims["code_quality"]["score"] >= 9.5
    assert dims["code_quality"]["issues"] == []
    assert dims["security"]["score"] == 10.0
    assert dims["testability"]["score"] == 10.0
    assert set(answer["analysers"]) == {"ruff", "radon", "bandit", "pytest", "coverage",
                                        "pylint", "eslint"}
    assert answer["analysers"]["ruff"]
    assert answer["analysers"]["bandit"]


async def test_lint_findings_are_issues_with_codes(tmp_path: Path) -> None:
    """Unused imports and undefined names become ruff issues with codes and lower the score."""
    sloppy = "import os\nimport sys\n\n\ndef f():\n    return missing_name + 1\n"
    dim = (await evaluate(tmp_path, {"sloppy.py": sloppy}))["dimensions"]["code_quality"]
    ruff = [i for i in dim["issues"] if i["tool"] == "ruff"]
    assert {"F401", "F821"} <= {i["code"] for i in ruff}
    undefined = next(i for i in ruff if i["code"] == "F821")
    assert (undefined["file"], undefined["line"], undefined["severity"]) == ("sloppy.py", 6,
                                                                              "high")
    assert dim["score"] < 9.0
    assert any("ruff" in s for s in dim["suggestions"])


async def test_complex_function_gets_a_radon_issue(tmp_path: Path) -> None:
    """A function of complexity grade C or worse is a radon issue and deducts."""
    dim = (await evaluate(tmp_path, {"decide.py": COMPLEX}))["dimensions"]["code_quality"]
    radon = [i for i in dim["issues"] if i["tool"] == "radon"]
    assert radon
    assert radon[0]["code"] in ("CC-C", "CC-D", "CC-E", "CC-F")
    assert "decide" in radon[0]["message"]
    assert dim["details"]["analysers"]["radon"]["deduction"] > 0
    assert dim["score"] < 10.0


async def test_insecure_code_gets_bandit_issues(tmp_path: Path) -> None:
    """shell=True, eval and a hard-coded password are bandit issues with a lower score."""
    dim = (await evaluate(tmp_path, {"run.py": INSECURE}))["dimensions"]["security"]
    assert {"B602", "B307", "B105"} <= codes(dim)
    shell = next(i for i in dim["issues"] if i["code"] == "B602")
    assert shell["severity"] in ("critical", "high")
    assert shell["line"] == 7
    assert dim["score"] <= 7.5
    assert dim["suggestions"]


async def test_passing_suite_beats_failing_suite(tmp_path: Path) -> None:
    """A passing suite scores higher; each failing test is a high-severity issue by name."""
    passing = await evaluate(tmp_path / "good", {"calc.py": CLEAN,
                                                 "test_calc.py": PASSING_TESTS})
    failing = await evaluate(tmp_path / "bad", {"calc.py": CLEAN,
                                                "test_calc.py": FAILING_TESTS})
    good, bad = passing["dimensions"]["testability"], failing["dimensions"]["testability"]
    assert good["score"] > bad["score"]
    assert bad["score"] <= 5.0
    messages = [i["message"] for i in bad["issues"] if i["severity"] == "high"]
    assert any("test_calc.py::test_halve_is_wrong" in m for m in messages)
    assert any("test_calc.py::TestMore::test_add_is_wrong" in m for m in messages)
    assert bad["details"]["pytest"]["passed"] == 1
    assert bad["details"]["pytest"]["failed"] == 2


async def test_uncovered_code_lowers_testability(tmp_path: Path) -> None:
    """Passing tests that leave produced code unrun score below full marks."""
    extra = CLEAN + "\n\ndef unused(x: int) -> int:\n    if x:\n        return 1\n    return 2\n"
    answer = await evaluate(tmp_path, {"calc.py": extra, "tests/test_calc.py": PASSING_TESTS,
                                       "lonely.py": "def lonely():\n    return 1\n"})
    dim = answer["dimensions"]["testability"]
    assert dim["details"]["pass_rate"] == 1.0
    assert dim["details"]["coverage"]["files"]["lonely.py"] == 0.0
    assert 4.0 < dim["score"] < 10.0
    assert any("coverage" in s for s in dim["suggestions"])


async def test_no_tests_scores_low_with_a_suggestion(tmp_path: Path) -> None:
    """Python code without tests scores 3 on testability and is told to add tests."""
    dim = (await evaluate(tmp_path, {"calc.py": CLEAN}))["dimensions"]["testability"]
    assert dim["applicable"] is True
    assert dim["score"] == 3.0
    assert any("Add pytest tests" in s for s in dim["suggestions"])


async def test_without_python_nothing_applies(tmp_path: Path) -> None:
    """Without Python (or JS) files no dimension applies and none has a score."""
    answer = await evaluate(tmp_path, {"README.md": "# Notes\n", "data.json": "{}"})
    for dim in answer["dimensions"].values():
        assert dim["applicable"] is False
        assert dim["score"] is None


async def test_workspace_holds_no_leftovers(tmp_path: Path) -> None:
    """After tests ran (writing files of their own), the workspace has only the produced files."""
    noisy = PASSING_TESTS + (
        "\n\ndef test_writes(tmp_path):\n"
        "    open('written-by-test.txt', 'w').write('x')\n"
        "    (tmp_path / 'f').write_text('y')\n")
    files = {"calc.py": CLEAN, "tests/test_calc.py": noisy}
    answer = await evaluate(tmp_path, files)
    assert answer["dimensions"]["testability"]["details"]["pytest"]["passed"] == 3
    assert await asyncio.to_thread(listing, tmp_path) == ["calc.py", "tests",
                                                          "tests/test_calc.py"]


async def test_produced_code_runs_without_secrets(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The produced tests see no secret or SHOAL_* variables and a private HOME."""
    monkeypatch.setenv("MY_API_KEY", "k")
    monkeypatch.setenv("SHOAL_SECRET_KEY", "s")
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    monkeypatch.setenv("DB_PASSWORD", "p")
    probe_env = (
        "import os\n\n\ndef test_env():\n"
        "    names = set(os.environ)\n"
        "    assert not names & {'MY_API_KEY', 'SHOAL_SECRET_KEY', 'GITHUB_TOKEN', "
        "'DB_PASSWORD'}\n"
        f"    assert os.environ['HOME'] != {str(Path.home())!r}\n")
    answer = await evaluate(tmp_path, {"test_env.py": probe_env})
    dim = answer["dimensions"]["testability"]
    assert dim["details"]["pytest"]["passed"] == 1, dim["issues"]


async def test_tests_that_hang_are_stopped(tmp_path: Path) -> None:
    """Tests running past the time limit are stopped and score 2 with an issue."""
    hang = "def test_forever():\n    while True:\n        pass\n"
    answer = await evaluate(tmp_path, {"test_hang.py": hang}, test_timeout=1)
    dim = answer["dimensions"]["testability"]
    assert dim["score"] == 2.0
    assert dim["details"]["pytest"]["status"] == "timed_out"
    assert any("did not finish" in i["message"] for i in dim["issues"])


async def test_analyser_time_outs_are_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Analysers stopped by their time limit are listed as timed out, with a neutral score.
    Ruff, radon and bandit are a process here that outlives the limit: the real ones, given
    1 ms, ended within it when a busy machine let the child exit before it was waited for."""

    def outliving(argv: Sequence[str], **options: Any) -> Awaitable[CommandResult]:
        if {"ruff", "radon", "bandit"} & set(argv):
            argv = [sys.executable, "-c", "import time; time.sleep(60)"]
        return run_command(argv, **options)

    monkeypatch.setattr(evaluator_common, "run_command", outliving)
    answer = await evaluate(tmp_path, {"calc.py": CLEAN}, analyser_timeout=0.5)
    quality = answer["dimensions"]["code_quality"]
    assert quality["details"]["analysers"]["ruff"]["status"] == "timed_out"
    assert (quality["score"], quality["neutral"]) == (7.0, True)
    assert any(i["tool"] == "ruff" and "did not finish" in i["message"]
               for i in quality["issues"])
    assert answer["dimensions"]["security"]["details"]["analysers"]["bandit"]["status"] == (
        "timed_out")


async def test_files_option_limits_what_is_evaluated(tmp_path: Path) -> None:
    """Only the listed files are evaluated; a path leading out of the workspace is ignored."""
    answer = await evaluate(tmp_path, {"calc.py": CLEAN, "run.py": INSECURE},
                            files=["calc.py", "../outside.py"])
    security = answer["dimensions"]["security"]
    assert security["score"] == 10.0
    assert security["details"]["ignored_files"] == ["../outside.py"]


async def test_missing_analysers_give_a_neutral_score(tmp_path: Path) -> None:
    """With no analyser installed, scores are a neutral 7 and say what to install."""
    nothing = dict.fromkeys(("ruff", "radon", "bandit", "pytest", "coverage", "pylint",
                             "eslint"))
    tool = EvaluatorTool(analysers=nothing)
    answer = await evaluate(tmp_path, {"calc.py": CLEAN, "test_calc.py": PASSING_TESTS,
                                       "app.js": "console.log(1)\n"}, tool=tool)
    for name, dim in answer["dimensions"].items():
        assert (dim["score"], dim["neutral"]) == (7.0, True), name
    quality = answer["dimensions"]["code_quality"]
    assert "pip install ruff radon" in quality["suggestions"][0]
    assert "eslint" in quality["suggestions"][0]
    assert quality["details"]["analysers"]["ruff"]["status"] == "skipped"


async def test_bad_files_option_fails_the_run(tmp_path: Path) -> None:
    """A `files` option that is not a list of paths fails the run with a clear error."""
    run = ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                  role="evaluator", name="evaluate", instructions="", workspace=tmp_path,
                  timeout=60, log=lambda _line: None, options={"files": "calc.py"})
    outcome = await EvaluatorTool().run(run)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "list of workspace-relative paths" in outcome.error


def test_pylint_and_eslint_output_become_issues(tmp_path: Path) -> None:
    """Pylint's and ESLint's JSON reports map onto issues with severities."""
    pylint = parse_pylint(tmp_path, [{"type": "error", "path": "a.py", "line": 3,
                                      "message-id": "E0602", "message": "Undefined variable"}])
    eslint = parse_eslint(tmp_path, [{"filePath": str(tmp_path / "web/app.js"), "messages": [
        {"ruleId": "no-unused-vars", "severity": 2, "line": 1, "message": "unused"},
        {"ruleId": None, "fatal": True, "severity": 2, "line": 4, "message": "Parsing error"}]}])
    assert [(i.file, i.line, i.code, i.severity) for i in pylint] == [
        ("a.py", 3, "E0602", "high")]
    assert [(i.file, i.code, i.severity) for i in eslint] == [
        ("web/app.js", "no-unused-vars", "medium"), ("web/app.js", None, "critical")]


def test_overall_weights_the_scored_dimensions() -> None:
    """overall() is the weighted mean of the dimensions that have a score."""
    assert WEIGHTS == {"code_quality": 1.5, "completeness": 1.5, "security": 2.0,
                       "architecture": 1.0, "testability": 1.0}
    every = {"code_quality": 8.0, "completeness": 6.0, "security": 10.0,
             "architecture": 4.0, "testability": 2.0}
    assert overall(every) == round((12 + 9 + 20 + 4 + 2) / 7, 1)
    assert overall({"security": 4.0, "testability": None, "code_quality": 9.0}) == round(
        (8 + 13.5) / 3.5, 1)
    assert overall({"testability": None}) is None
    assert overall({}) is None


async def test_probe_lists_the_analysers(tmp_path: Path) -> None:
    """The probe is always available and names every analyser with its version."""
    settings = make_settings(tmp_path)
    found = await probe(settings)
    assert found.available
    assert found.local
    for name in ("ruff", "radon", "bandit", "pytest", "coverage", "pylint", "eslint"):
        assert name in found.detail
    assert create(settings, found).name == "evaluator"
