"""The demo model server, driven by the official OpenAI SDK over real HTTP."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from shoal.demo.fake.openai_chat import decode
from shoal.demo.files import TODO_FILES
from shoal.demo.model import (
    DEMO_MODEL,
    create_demo_model_app,
    decide_reply,
    recorded_requests,
    running_demo_model,
    task_description,
)
from shoal.engine.answers import AnswerError, parse_judge, parse_review
from shoal.process import run_command

PLANNER = "You are Shoal's planner agent. Role: planner."
CODER = "You are Shoal's coder agent. Role: coder."
JUDGE = "You are Shoal's judge."
REVIEWER = "You are Shoal's peer reviewer."


def chat(system: str, user: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def test_plain_completion_answers_a_todo_plan() -> None:
    """A planner request for a todo app gets the four-step JSON plan, labelled as the demo."""
    async with running_demo_model() as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        answer = await client.chat.completions.create(
            model="anything", messages=chat(PLANNER, "Plan it.\nTask: Build a CLI todo app"))
    plan = json.loads(answer.choices[0].message.content or "")
    assert [step["name"] for step in plan] == [
        "Todo storage module", "Command-line interface", "Tests", "README"]
    assert [step["dependencies"] for step in plan] == [[], [0], [0], []]
    assert answer.model == DEMO_MODEL
    assert answer.usage is not None
    assert answer.usage.prompt_tokens > 0


async def test_streamed_completion_carries_text_and_usage() -> None:
    """A streamed planner answer reassembles into a generic plan, with a final usage chunk."""
    async with running_demo_model() as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        stream = await client.chat.completions.create(
            model=DEMO_MODEL, messages=chat(PLANNER, "Task:\nBuild a URL shortener service"),
            stream=True, stream_options={"include_usage": True})
        text: list[str] = []
        usage = None
        async with stream:
            async for chunk in stream:
                text.extend(c.delta.content or "" for c in chunk.choices)
                usage = chunk.usage or usage
    plan = json.loads("".join(text))
    assert [step["name"] for step in plan] == ["Design notes", "Implementation", "Tests"]
    assert plan[1]["description"].startswith("Write url_shortener_service.py:")
    assert usage is not None
    assert usage.completion_tokens > 0


async def test_tool_call_is_parsed_by_the_sdk() -> None:
    """A coder request gets a write_file call whose arguments hold working Python."""
    async with running_demo_model() as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        answer = await client.chat.completions.create(
            model=DEMO_MODEL, messages=chat(CODER, "Write todo.py: a TodoList class."))
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].type == "function"
    assert calls[0].function.name == "write_file"
    arguments = json.loads(calls[0].function.arguments)
    assert arguments["path"] == "todo.py"
    compile(arguments["content"], "todo.py", "exec")


async def test_streamed_tool_call_arrives_in_pieces() -> None:
    """Streamed tool-call arguments come in several deltas that add up to the whole call."""
    async with running_demo_model() as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        stream = await client.chat.completions.create(
            model=DEMO_MODEL, messages=chat(CODER, "Write cli.py: argparse for the todo app."),
            stream=True)
        names, pieces = [], []
        async with stream:
            async for chunk in stream:
                deltas = [d for c in chunk.choices for d in c.delta.tool_calls or []]
                for delta in deltas:
                    assert delta.index == 0
                    if delta.function and delta.function.name:
                        names.append(delta.function.name)
                    if delta.function and delta.function.arguments:
                        pieces.append(delta.function.arguments)
    assert names == ["write_file"]
    assert len(pieces) > 3
    assert json.loads("".join(pieces)) == {"path": "cli.py", "content": TODO_FILES["cli.py"]}


async def test_models_lists_the_demo_model() -> None:
    """GET /v1/models names the demo model."""
    async with running_demo_model() as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        models = await client.models.list()
    assert [model.id for model in models.data] == [DEMO_MODEL]


async def test_fail_marker_answers_500_once() -> None:
    """[demo:fail] gives an OpenAI-style HTTP 500 that the SDK does not retry."""
    app = create_demo_model_app()
    async with running_demo_model(app) as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        with pytest.raises(openai.InternalServerError, match=r"\[demo:fail\]"):
            await client.chat.completions.create(
                model=DEMO_MODEL, messages=chat(CODER, "Write x.py [demo:fail]"))
    assert len(recorded_requests(app)) == 1


async def test_slow_marker_delays_the_answer() -> None:
    """[demo:slow=<seconds>] holds the answer back for that long."""
    async with running_demo_model() as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        started = time.monotonic()
        await client.chat.completions.create(
            model=DEMO_MODEL, messages=chat(CODER, "Write x.md [demo:slow=0.3]"))
    assert time.monotonic() - started >= 0.3


async def test_requests_are_recorded() -> None:
    """Every chat request body is kept on the app, in order."""
    app = create_demo_model_app()
    async with running_demo_model(app) as base_url, openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test"
    ) as client:
        for text in ("Write a.md", "Write b.md"):
            await client.chat.completions.create(model=DEMO_MODEL, messages=chat(CODER, text))
    assert [r["messages"][-1]["content"] for r in recorded_requests(app)] == [
        "Write a.md", "Write b.md"]


def test_invalid_plan_marker_answers_prose() -> None:
    """[demo:invalid-plan] makes the planner answer text that is not JSON."""
    reply = decide_reply(
        decode({"messages": chat(PLANNER, "Task: a todo app [demo:invalid-plan]")}))
    assert reply.text.startswith("[demo model]")
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.text)


def test_cyclic_plan_marker_answers_a_cycle() -> None:
    """[demo:cyclic-plan] makes the planner answer two steps that depend on each other."""
    reply = decide_reply(decode({"messages": chat(PLANNER, "Task: anything [demo:cyclic-plan]")}))
    assert [step["dependencies"] for step in json.loads(reply.text)] == [[1], [0]]


def test_worker_script_ends_with_a_labelled_summary() -> None:
    """After its tool call and the tool's answer, the coder finishes with a demo summary."""
    messages: list[Mapping[str, Any]] = [
        *chat(CODER, "Write notes.md: a short note."),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "write_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Wrote notes.md (10 bytes)."},
    ]
    reply = decide_reply(decode({"messages": messages}))
    assert reply.tool_calls == ()
    assert reply.text.startswith("[demo model] Wrote notes.md (")


def test_task_description_is_read_after_the_task_line() -> None:
    """The task is the paragraph after "Task:", on the same line or the next."""
    assert task_description("Plan well.\nTask: Build it\nnow\n\nRules: none") == "Build it now"
    assert task_description("Plan well.\nTask:\nBuild it\n") == "Build it"
    assert task_description("Build it") == "Build it"


async def test_todo_files_pass_their_own_tests(tmp_path: Path) -> None:
    """The todo app the demo model writes is real: its tests pass."""
    for name, content in TODO_FILES.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    result = await run_command([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                               cwd=tmp_path, timeout=60)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "7 passed" in result.stdout


# ---- the judge and the reviewer -----------------------------------------------------------


def judge_prompt(markers: str = "", *, repair: bool = False) -> str:
    return ("Role: judge\nSubtask: Write todo.py: a TodoList class. " + markers + "\n"
            "Output: Wrote todo.py.\nFiles:\n--- todo.py\nclass TodoList: ...\n"
            + ("Your previous answer was not valid JSON.\n" if repair else "")
            + "Answer with exactly {\"completeness\": {...}, \"architecture\": {...}}.")


def review_prompt(markers: str = "", cycle: int = 1) -> str:
    return (f"Role: reviewer\nReview cycle: {cycle}\nSubtask: Write todo.py: a TodoList class. "
            f"{markers}\nFiles:\n--- todo.py\nclass TodoList: ...\nOutput: Wrote todo.py.")


def ask(system: str, user: str) -> str:
    reply = decide_reply(decode({"messages": chat(system, user)}))
    assert reply.tool_calls == ()
    assert reply.fault is None
    return reply.text


def test_judge_answers_default_scores() -> None:
    """A judge gets completeness 9.0 and architecture 8.5, one labelled suggestion each."""
    text = ask(JUDGE, judge_prompt())
    result = parse_judge(text)
    assert json.loads(text)["completeness"]["score"] == 9.0
    assert (result.completeness.score, result.architecture.score) == (9.0, 8.5)
    assert len(result.completeness.suggestions) == len(result.architecture.suggestions) == 1
    assert result.completeness.suggestions[0].startswith("[demo model]")
    assert result.completeness.issues == result.architecture.issues == ()


def test_judge_role_is_read_from_the_system_prompt() -> None:
    """"Role: judge" in the system prompt makes any user message a judge's request."""
    assert parse_judge(ask(f"{JUDGE} Role: judge", "Score this.")).architecture.score == 8.5


def test_score_marker_sets_both_scores() -> None:
    """[demo:score=N] scores both dimensions N, with an issue saying it was scripted."""
    result = parse_judge(ask(JUDGE, judge_prompt("[demo:score=4.5]")))
    assert (result.completeness.score, result.architecture.score) == (4.5, 4.5)
    assert "[demo:score=4.5]" in result.completeness.issues[0]
    assert result.architecture.issues[0].startswith("[demo model]")


def test_score_marker_out_of_range_is_clamped_by_the_parser() -> None:
    """A scripted score above 10 is sent as is and clamped when parsed."""
    text = ask(JUDGE, judge_prompt("[demo:score=12]"))
    assert json.loads(text)["architecture"]["score"] == 12.0
    assert parse_judge(text).architecture.score == 10.0


def test_chatty_judge_wraps_json_in_prose_and_a_fence() -> None:
    """[demo:judge=chatty] answers prose around a ```json block that still parses."""
    text = ask(JUDGE, judge_prompt("[demo:judge=chatty]"))
    assert "```json" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert parse_judge(text).completeness.score == 9.0


def test_broken_judge_answers_text_that_is_not_json() -> None:
    """[demo:judge=broken] answers labelled prose that the parser refuses."""
    text = ask(JUDGE, judge_prompt("[demo:judge=broken]"))
    assert text.startswith("[demo model]")
    with pytest.raises(AnswerError, match="no valid JSON"):
        parse_judge(text)


def test_broken_judge_answers_json_on_the_repair_retry() -> None:
    """With the repair line in the prompt, [demo:judge=broken] answers valid JSON."""
    text = ask(JUDGE, judge_prompt("[demo:judge=broken]", repair=True))
    assert parse_judge(text).architecture.score == 8.5


def test_repair_line_may_come_in_a_later_message() -> None:
    """The repair line counts in a follow-up message after the broken answer too."""
    messages: list[Mapping[str, Any]] = [
        *chat(JUDGE, judge_prompt("[demo:judge=broken]")),
        {"role": "assistant", "content": "Looks fine."},
        {"role": "user", "content": "Your previous answer was not valid JSON. Try again."},
    ]
    text = decide_reply(decode({"messages": messages})).text
    assert parse_judge(text).completeness.score == 9.0


def test_reviewer_approves_by_default() -> None:
    """A reviewer gets the seed's review JSON: approved, 9.0, no issues, labelled summary."""
    text = ask(REVIEWER, review_prompt())
    result = parse_review(text)
    assert set(json.loads(text)) == {"review_score", "issues", "summary", "decision",
                                     "auto_fix_possible", "auto_fix_instructions"}
    assert (result.decision, result.score, result.issues) == ("approved", 9.0, ())
    assert result.auto_fix_possible is False
    assert result.summary.startswith("[demo model]")


def test_review_fix_marker_asks_for_a_fix_then_approves() -> None:
    """[demo:review=fix] needs a revision at cycle 1 and approves from cycle 2."""
    first = parse_review(ask(REVIEWER, review_prompt("[demo:review=fix]", cycle=1)))
    assert (first.decision, first.score, first.auto_fix_possible) == ("needs_revision", 6.5,
                                                                      True)
    assert first.severity_counts() == {"critical": 0, "high": 1, "medium": 0, "low": 0}
    assert first.issues[0].file == "todo.py"
    assert first.issues[0].description.startswith("[demo model]")
    assert first.auto_fix_instructions
    second = parse_review(ask(REVIEWER, review_prompt("[demo:review=fix]", cycle=2)))
    assert (second.decision, second.score, second.issues) == ("approved", 9.0, ())


def test_review_fail_marker_never_approves() -> None:
    """[demo:review=fail] needs a revision, auto-fixable, at every cycle."""
    for cycle in (1, 2, 5):
        result = parse_review(ask(REVIEWER, review_prompt("[demo:review=fail]", cycle=cycle)))
        assert (result.decision, result.score, result.auto_fix_possible) == (
            "needs_revision", 6.5, True)


def test_review_reject_marker_finds_a_critical_issue() -> None:
    """[demo:review=reject] scores 3.0 with a critical issue that cannot be auto-fixed."""
    result = parse_review(ask(REVIEWER, review_prompt("[demo:review=reject]")))
    assert (result.decision, result.score, result.auto_fix_possible) == (
        "needs_revision", 3.0, False)
    assert result.severity_counts()["critical"] == 1


def test_judge_and_reviewer_ignore_the_long_marker() -> None:
    """[demo:long] pads worker answers only; the judge's and reviewer's JSON stay whole."""
    assert json.loads(ask(JUDGE, judge_prompt("[demo:long=5000]")))["completeness"]
    assert json.loads(ask(REVIEWER, review_prompt("[demo:long=5000]")))["decision"]
