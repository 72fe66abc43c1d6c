"""The demo model: the script behind the fake model server, scripted and deterministic.

It is what Shoal runs against when no real model is configured, and what the tests use. The
server (`shoal.demo.fake`) speaks OpenAI Chat Completions and Responses, Anthropic
Messages, Gemini and Ollama; whichever protocol a request came in, this module decides the
answer from the conversation alone:

- "Role: planner" (in the system prompt or the prompt) gets a JSON array plan for the text
  after "Task:" (a todo app gets a four-step plan, anything else Design notes →
  Implementation → Tests);
- "Role: judge" gets the judge's JSON: completeness 9.0 and architecture 8.5, one suggestion
  each;
- "Role: reviewer" gets the review JSON (seed §3.5): approved, score 9.0, no issues;
- "Pipeline role: …" and "Supervisor role: …" get the scripts of the `pipeline` and
  `supervisor` workflows (a revision round; a router mistake the engine overrules),
  "Research role: …" the `research` workflow's (`research_script`), and "Proposal role: …"
  the `proposal` workflow's (`proposal_script`: an interviewer that asks only for the facts
  still missing, `interview_script`; a delegated literature search; one refinement);
- any other role gets one `write_file` call with real content chosen from the instructions
  ("Write todo.py: …"), then — for a test file — a `run_command` that compiles it, then a
  short summary starting with "[demo model]".

Markers in the last user message steer it:
- `[demo:fail]` (HTTP 500, not to be retried), `[demo:slow=<seconds>]` (before answering),
  `[demo:pace=<seconds>]` (between stream events);
- `[demo:status=429,retry-after=1,times=2]` (an HTTP error; `retry-after` sets the header,
  `times` limits it to the first requests of the conversation), `[demo:malformed]` (a body or
  stream event that is not JSON), `[demo:stall]` (a stream that stops after its first event),
  each with an optional `,times=N` (`,shared=1`: the first N requests carrying the marker in
  any conversation, so a retried attempt with a new prompt is counted too);
- `[demo:long=<characters>]` (a final answer that long; not for the judge or reviewer);
- `[demo:messy]` (Python files with real lint, security and test failures to find);
- `[demo:invalid-plan]`, `[demo:cyclic-plan]`, `[demo:empty-plan]` (the planner's answer: not
  JSON, a cycle, no step), `[demo:escape]` (tries to write outside the workspace and read
  /etc/passwd) and `[demo:explore]` (lists the workspace, then reads the
  file named by "Read <file>", else README.md).

The judge and the reviewer read their markers anywhere in the system and user messages (they
come with the subtask's description), and their answers are plain text, labelled as the demo
model's only inside the JSON's texts:
- `[demo:score=<N>]`: the judge scores both dimensions N (unclamped), with an issue saying so;
- `[demo:judge=chatty]`: the judge's JSON in a ```json fence among prose;
- `[demo:judge=broken]`: a judge's answer that is not JSON, unless the prompt holds the repair
  line "Your previous answer was not valid JSON.";
- `[demo:review=fix]`: at "Review cycle: 1" (or with no cycle line) needs_revision, 6.5, one
  high issue, auto-fixable; at cycle 2 and later approved, 9.0;
- `[demo:review=fail]`: always needs_revision, 6.5, auto-fixable;
- `[demo:review=reject]`: needs_revision, 3.0, one critical issue, not auto-fixable.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shlex
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from starlette.applications import Starlette

from shoal.demo import proposal_script, research_script
from shoal.demo.extraction import extraction_answer
from shoal.demo.fake.exchange import DEMO_MODEL, LABEL, NOTICE, recorded_requests
from shoal.demo.fake.server import create_fake_app, running_fake_server, serve_fake_server
from shoal.demo.fake.wire import Conversation, Fault, FaultKind, Reply, ToolCall, ToolSpec
from shoal.demo.files import (
    GENERIC_MODULE,
    GENERIC_TEST,
    GENERIC_TEST_ALONE,
    MESSY_MODULE,
    MESSY_TEST,
    SIGNATURE,
    TODO_FILES,
)

__all__ = ["DEMO_MODEL", "LABEL", "create_demo_model_app", "decide_reply", "recorded_requests",
           "running_demo_model", "serve_demo_model", "task_description"]

_MAX_DELAY = 600.0
REPAIR_LINE = "Your previous answer was not valid JSON."

_Role = Literal["planner", "judge", "reviewer", "worker"]


@dataclass(frozen=True, slots=True)
class _Turn:
    """The parts of a conversation the script looks at."""

    instructions: str
    role: _Role
    done_steps: int
    tool_results: list[str] = field(default_factory=list)
    prompt: str = ""  # every system and user text: where judge and reviewer markers are read


# ---- the script (pure) ------------------------------------------------------------------

_FAULT = re.compile(r"\[demo:(status=(?P<status>[0-9]{3})|malformed|stall)"
                    r"(?P<options>(?:,[a-z-]+=[0-9.]+)*)\]")


def decide_reply(conversation: Conversation) -> Reply:
    """Decide the demo model's answer to a conversation. Pure and deterministic.

    The reply's tool calls are the neutral ones (`write_file`, `read_file`, `list_files`,
    `run_command`); the server fits them to the tools the client offered.
    """
    turn = _read_turn(conversation)
    if (extracted := extraction_answer(turn.prompt)) is not None:  # "Role: extractor"
        return Reply(text=extracted)
    if (written := research_script.sql_answer(turn.prompt)) is not None:  # "Role: sql_writer"
        return Reply(text=written)
    text = turn.instructions
    delay = _number(text, "slow")
    pace = _number(text, "pace")
    if "[demo:fail]" in text:
        return Reply(fault=Fault("status", 500, f"{LABEL} Scripted failure: the instructions "
                                 "contain [demo:fail]. Remove that marker to get an answer."),
                     delay=delay)
    pipeline = _PIPELINE.search(text)
    supervisor = _SUPERVISOR.search(text)
    research = research_script.ROLE.search(text)
    proposal = proposal_script.ROLE.search(text)
    if research:
        reply = research_script.reply(research.group(1), text, turn.done_steps,
                                      turn.tool_results, conversation.tools)
    elif proposal:
        reply = proposal_script.reply(proposal.group(1), text, turn.done_steps,
                                      turn.tool_results, conversation.tools)
    elif pipeline:
        reply = _pipeline_reply(pipeline.group(1), text)
    elif supervisor:
        reply = _supervisor_reply(supervisor.group(1), text, turn, conversation.tools)
    else:
        reply = _role_reply(turn)
    delay = max(delay, reply.delay)
    long = re.search(r"\[demo:long=([0-9]+)\]", text)
    if long and not reply.tool_calls and turn.role in ("planner", "worker"):
        size = min(int(long.group(1)), 5_000_000)
        filler = " ".join(itertools.repeat("lorem", size // 6 + 1))
        reply = Reply(text=(reply.text + "\n" + filler)[:max(size, 1)])
    return Reply(reply.text, reply.tool_calls, fault=_fault(text), delay=delay, pace=pace)


# ---- the `pipeline` workflow's roles (src/shoal/workflows/builtin/pipeline.yaml) ------------

_PIPELINE = re.compile(r"Pipeline role:[ \t]*(planner|researcher|writer|reviewer)\b")
RESEARCH_DELAY = 0.3  # seconds a researcher "thinks": long enough for two to overlap
REVISED = "Revised after review:"


def _pipeline_reply(role: str, text: str) -> Reply:
    """The script for the pipeline: a plan of three sub-questions, findings for each, a
    draft the reviewer sends back once, and the revised draft it approves."""
    request = _line_after(text, "Request:") or "the request"
    if role == "planner":
        topic = request.rstrip(".?!")
        return Reply(text=json.dumps({"sub_questions": [
            f"What is {topic}?", f"Why does {topic} matter?",
            f"What is known about {topic} today?"]}))
    if role == "researcher":
        question = _line_after(text, "Sub-question:") or "the sub-question"
        return Reply(text=f"{LABEL} Findings on '{question}': three facts, one source, one "
                          "open question.", delay=RESEARCH_DELAY)
    if role == "writer":
        feedback = text.split("(empty on a first draft):", 1)[-1].strip()
        report = f"# {request}\n\n{NOTICE}\n\n{LABEL} A report drawn from the research."
        if feedback:
            said = _json_field(feedback, "feedback") or feedback[:200]
            report = f"{report}\n\n{REVISED} {said}"
        return Reply(text=report)
    if REVISED in text:
        return Reply(text=json.dumps({"verdict": "APPROVED", "feedback": "Clear and complete."}))
    return Reply(text=json.dumps({"verdict": "NEEDS_REVISION",
                                  "feedback": "Add a one-paragraph summary at the top."}))


# ---- the `supervisor` workflow's roles (src/shoal/workflows/builtin/supervisor.yaml) --------

_SUPERVISOR = re.compile(
    r"Supervisor role:[ \t]*(planner|router|googlemap|calendar|telephone|research|summarizer)\b")
PLACE = {"name": "Saffron 46", "address": "No. 7, Section 5, Xinyi Road, Taipei 101, 46F",
         "phone": "+886 2 8101 8846", "hours": "11:30-22:00"}


def _supervisor_reply(role: str, text: str, turn: _Turn, offered: Sequence[ToolSpec]) -> Reply:
    """The script for the supervisor: a reservation plans maps, calendar and telephone (any
    other request, research); the router's first answer is a mistake (telephone before the
    maps it needs, which the engine overrules), then it takes the first step allowed. The
    specialists call their MCP server's tool when the client offers it (`search_places`,
    `add_calendar_event`, `make_phone_call`), then report what it returned."""
    request = _line_after(text, "Request:") or "the request"
    if role == "planner":
        booking = re.search(r"reserv|book|table", request, re.IGNORECASE)
        agents = ["telephone", "googlemap", "calendar"] if booking else ["research"]
        return Reply(text=json.dumps({"agents": agents, "reason": f"{LABEL} planned."}))
    if role == "router":
        ran = _line_after(text, "Already ran:")
        allowed = [a.strip() for a in _line_after(text, "Allowed next:").split(",") if a.strip()]
        planned = _line_after(text, "Plan:")
        pick = "telephone" if ran.startswith("(nothing") and "telephone" in planned else (
            allowed[0] if allowed else "summarize")
        return Reply(text=json.dumps({"next": pick, "reason": f"{LABEL} routed."}))
    if role in _SPECIALIST_TOOLS:
        return _specialist_reply(role, request, text, turn, offered)
    if role == "research":
        return Reply(text=f"{LABEL} Findings on '{request}': two facts and their sources.")
    ran = _line_after(text, "Specialists, in the order they ran:")
    return Reply(text=f"# {request}\n\n{NOTICE}\n\n{LABEL} Done by: {ran}.")


_SPECIALIST_TOOLS = {"googlemap": "search_places", "calendar": "add_calendar_event",
                     "telephone": "make_phone_call"}
_FOUND = re.compile(r"Found (?P<name>[^,\n]+), (?P<address>[^;\n]+); phone (?P<phone>[+\d ]+);")


def _specialist_reply(role: str, request: str, text: str, turn: _Turn,
                      offered: Sequence[ToolSpec]) -> Reply:
    wanted = _SPECIALIST_TOOLS[role]
    tool = next((t.name for t in offered if t.name == wanted or t.name.endswith("_" + wanted)),
                None)
    found = _FOUND.search(text)
    place = found.groupdict() if found else dict(PLACE)
    tomorrow = (datetime.now().date() + timedelta(days=1)).isoformat()
    if tool is not None and turn.done_steps == 0:
        if role == "googlemap":
            cuisine = re.search(r"(\w+) restaurant", request, re.IGNORECASE)
            near = re.search(r"\bnear (.+?)(?: and |,|$)", request, re.IGNORECASE)
            args: dict[str, Any] = {
                "query": f"{cuisine.group(1) if cuisine else ''} restaurant".strip(),
                "near": near.group(1).strip() if near else ""}
        elif role == "calendar":
            args = {"title": f"Dinner at {place['name']}", "start": f"{tomorrow}T19:00",
                    "duration_minutes": 90, "location": place["address"]}
        else:
            args = {"phone": place["phone"].strip(), "callee": place["name"],
                    "message": "A table for two tomorrow at 19:00, please."}
        return Reply(tool_calls=(ToolCall(tool, args),))
    said = turn.tool_results[-1] if turn.tool_results else ""
    if role == "googlemap":
        places = _json_list(said)
        place = places[0] if places else place
        return Reply(text=f"{LABEL} Found {place['name']}, {place['address']}; phone "
                          f"{place['phone']}; open {place.get('hours', PLACE['hours'])}.")
    if role == "calendar":
        written = next(iter(re.findall(r"calendar/[\w.-]+\.ics", said)), "")
        return Reply(text=f"{LABEL} Added 'Dinner at {place['name']}' on {tomorrow} at 19:00"
                          + (f": {written}." if written else "."))
    recorded = next(iter(re.findall(r"calls/[\w.-]+\.md", said)), "")
    return Reply(text=f"{LABEL} Recorded a call to {place['phone'].strip()} asking for a table "
                      "tomorrow at 19:00 (nothing was dialled)"
                      + (f": {recorded}." if recorded else "."))


def _json_list(text: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _line_after(text: str, label: str) -> str:
    found = re.search(rf"^{re.escape(label)}[ \t]*(.+)$", text, flags=re.MULTILINE)
    return found.group(1).strip() if found else ""


def _json_field(text: str, name: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return ""
    return str(value.get(name, "")) if isinstance(value, dict) else ""


def _number(text: str, name: str) -> float:
    found = re.search(rf"\[demo:{name}=([0-9]+(?:\.[0-9]+)?)\]", text)
    return min(float(found.group(1)), _MAX_DELAY) if found else 0.0


def _fault(text: str) -> Fault | None:
    found = _FAULT.search(text)
    if found is None:
        return None
    options = dict(item.split("=", 1) for item in found.group("options").split(",") if item)
    times = int(float(options["times"])) if "times" in options else None
    retry_after = float(options["retry-after"]) if "retry-after" in options else None
    counted_by = found.group(0) if options.get("shared") == "1" else None
    if found.group("status"):
        status = int(found.group("status"))
        return Fault("status", status, f"{LABEL} Scripted HTTP {status} ({found.group(0)}).",
                     retry_after=retry_after, times=times, counted_by=counted_by)
    kind: FaultKind = "malformed" if found.group(1) == "malformed" else "stall"
    return Fault(kind, message=f"{LABEL} Scripted {kind} answer.", times=times,
                 counted_by=counted_by)


_ROLE = re.compile(r"Role:[ \t]*(planner|judge|reviewer)\b")


def _read_turn(conversation: Conversation) -> _Turn:
    users = conversation.texts("user")
    systems = conversation.texts("system")
    instructions = users[-1] if users else ""
    return _Turn(
        instructions=instructions,
        role=_role([*systems, *reversed(users)]),
        done_steps=sum(1 for m in conversation.messages
                       if m.role == "assistant" and m.tool_calls),
        tool_results=conversation.texts("tool"),
        prompt="\n".join([*systems, *users]),
    )


def _role(texts: list[str]) -> _Role:
    """The first "Role: …" the script answers for: system prompts, then the latest prompt."""
    for text in texts:
        if found := _ROLE.search(text):
            role: _Role = found.group(1)  # type: ignore[assignment]  # the pattern's choices
            return role
    return "worker"


def _role_reply(turn: _Turn) -> Reply:
    if turn.role == "planner":
        return _plan_reply(turn.instructions)
    if turn.role == "judge":
        return _judge_reply(turn.prompt)
    if turn.role == "reviewer":
        return _review_reply(turn.prompt)
    return _worker_reply(turn)


def _plan_reply(instructions: str) -> Reply:
    if "[demo:invalid-plan]" in instructions:
        return Reply(text=f"{LABEL} A plan, in prose on purpose ([demo:invalid-plan]): "
                         "first design it, then build it, then test it.")
    task = task_description(instructions)
    if "[demo:empty-plan]" in instructions:
        plan = []
    elif "[demo:cyclic-plan]" in instructions:
        plan = _cyclic_plan(task)
    elif "todo" in task.lower():
        plan = _TODO_PLAN
    else:
        plan = _generic_plan(task)
    return Reply(text=json.dumps(plan, indent=2))


def task_description(prompt: str) -> str:
    """The task in a planner prompt: the paragraph after the first "Task:" line."""
    found = re.search(r"^[ \t]*Task:[ \t]*", prompt, flags=re.MULTILINE)
    rest = prompt[found.end():] if found else prompt
    paragraph = rest.lstrip("\n").split("\n\n", 1)[0]
    return " ".join(paragraph.split()) or "the task"


def _step(name: str, description: str, dependencies: list[int],
          complexity: int) -> dict[str, Any]:
    return {"name": name, "description": description, "dependencies": dependencies,
            "recommended_tool": "openai_compat", "complexity": complexity}


_TODO_PLAN = [
    _step("Todo storage module", "Write todo.py: a TodoList class with add/complete/remove/list "
          "and JSON load/save.", [], 2),
    _step("Command-line interface", "Write cli.py: argparse commands add/done/rm/ls using "
          "todo.py.", [0], 2),
    _step("Tests", "Write test_todo.py: pytest tests for todo.py.", [0], 2),
    _step("README", "Write README.md with usage of the todo CLI.", [], 1),
]


def _generic_plan(task: str) -> list[dict[str, Any]]:
    module = _slug(task)
    return [
        _step("Design notes", f"Write DESIGN.md: design notes for: {task}", [], 1),
        _step("Implementation", f"Write {module}.py: implement {task}", [0], 3),
        _step("Tests", f"Write test_{module}.py: pytest tests for {module}.py.", [1], 2),
    ]


def _cyclic_plan(task: str) -> list[dict[str, Any]]:
    return [
        _step("First half", f"Write part_a.py: half of {task}", [1], 2),
        _step("Second half", f"Write part_b.py: the other half of {task}", [0], 2),
    ]


_STOPWORDS = {"a", "an", "the", "build", "create", "make", "write", "implement", "simple",
              "small", "tiny", "with", "and", "for", "of", "to", "in", "that", "some", "my"}


def _slug(text: str) -> str:
    words = [w for w in re.findall(r"[a-z][a-z0-9]*", text.lower()) if w not in _STOPWORDS]
    return "_".join(words[:3]) or "project"


# ---- the judge and the reviewer -----------------------------------------------------------

_SCORE = re.compile(r"\[demo:score=(-?[0-9]{1,6}(?:\.[0-9]{1,6})?)\]")
_CYCLE = re.compile(r"Review cycle:[ \t]*([0-9]{1,6})")


def _judge_reply(prompt: str) -> Reply:
    answer = json.dumps(_judgement(prompt), indent=2)
    if "[demo:judge=broken]" in prompt and REPAIR_LINE not in prompt:
        return Reply(text=f"{LABEL} The work looks complete and well structured, about 9 out "
                          "of 10 (not JSON, on purpose: [demo:judge=broken]).")
    if "[demo:judge=chatty]" in prompt:
        return Reply(text=f"Here is my assessment {{as asked}}, scores [0 to 10] below:\n\n"
                          f"```json\n{answer}\n```\n\nTell me if you want more detail.")
    return Reply(text=answer)


def _judgement(prompt: str) -> dict[str, Any]:
    completeness: dict[str, Any] = {
        "score": 9.0, "issues": [],
        "suggestions": [f"{LABEL} Add a short usage example for what was built."]}
    architecture: dict[str, Any] = {
        "score": 8.5, "issues": [],
        "suggestions": [f"{LABEL} Keep each module to one concept as it grows."]}
    if scripted := _SCORE.search(prompt):
        score = float(scripted.group(1))
        for part in (completeness, architecture):
            part["score"] = score
            part["issues"] = [f"{LABEL} Scored {score:g} on purpose: the prompt carries "
                              f"{scripted.group(0)}."]
    return {"completeness": completeness, "architecture": architecture}


def _review_reply(prompt: str) -> Reply:
    cycles = _CYCLE.findall(prompt)
    cycle = int(cycles[-1]) if cycles else 1
    path = _named_file(prompt) or ""
    if "[demo:review=reject]" in prompt:
        review = _review(3.0, [_issue("critical", path, None, "The work does not do what the "
                                      "subtask asks ([demo:review=reject]).",
                                      "Redo the subtask from its description.")], fix="")
    elif "[demo:review=fail]" in prompt or ("[demo:review=fix]" in prompt and cycle < 2):
        marker = "fail" if "[demo:review=fail]" in prompt else "fix"
        review = _review(6.5, [_issue("high", path, 1, "Inputs are used without validation "
                                      f"([demo:review={marker}]).",
                                      "Validate the inputs and add a docstring.")],
                         fix="Add input validation and a docstring.")
    else:
        review = _review(9.0, [], fix="")
    return Reply(text=json.dumps(review, indent=2))


def _issue(severity: str, path: str, line: int | None, description: str,
           suggestion: str) -> dict[str, Any]:
    return {"severity": severity, "file": path, "line": line,
            "description": f"{LABEL} {description}", "suggestion": suggestion}


def _review(score: float, issues: list[dict[str, Any]], *, fix: str) -> dict[str, Any]:
    approved = not issues
    summary = ("Approved: the files do what the subtask asks." if approved else
               f"Needs revision: {len(issues)} scripted issue, see below.")
    return {"review_score": score, "issues": issues, "summary": f"{LABEL} {summary}",
            "decision": "approved" if approved else "needs_revision",
            "auto_fix_possible": bool(fix), "auto_fix_instructions": fix}


# ---- the worker ----------------------------------------------------------------------------


def _worker_reply(turn: _Turn) -> Reply:
    steps = _worker_steps(turn.instructions)
    if turn.done_steps < len(steps):
        return Reply(tool_calls=(steps[turn.done_steps],))
    return Reply(text=_summary(steps, turn.tool_results))


def _worker_steps(instructions: str) -> list[ToolCall]:
    if "[demo:escape]" in instructions:
        return [ToolCall("write_file", {"path": "../escape.txt", "content": "escaped\n"}),
                ToolCall("read_file", {"path": "/etc/passwd"})]
    if "[demo:explore]" in instructions:
        named = re.search(r"\bread\s+`?([\w./-]+\.[A-Za-z0-9]+)", instructions, re.IGNORECASE)
        return [ToolCall("list_files", {"path": "."}),
                ToolCall("read_file", {"path": named.group(1) if named else "README.md"})]
    path = _target_file(instructions)
    steps = [ToolCall("write_file", {"path": path, "content": _content(path, instructions)})]
    if path.endswith(".py") and path.rsplit("/", 1)[-1].startswith("test_"):
        code = f"compile(open({path!r}).read(), {path!r}, 'exec'); print({path!r}, 'compiles')"
        steps.append(ToolCall("run_command", {"command": f"python3 -c {shlex.quote(code)}"}))
    return steps


def _target_file(instructions: str) -> str:
    """The file the instructions ask for ("Write cli.py: …"), or one named after them."""
    if named := _named_file(instructions):
        return named
    first_line = instructions.strip().split("\n", 1)[0]
    lowered = instructions.lower()
    if "test" in lowered:
        return f"test_{_slug(first_line)}.py"
    if any(word in lowered for word in ("python", "code", "implement", "function", "script")):
        return f"{_slug(first_line)}.py"
    return f"{_slug(first_line)}.md"


def _named_file(text: str) -> str | None:
    """The file a "Write cli.py: …" line names, if it stays inside the workspace."""
    named = re.search(r"\bwrite\s+`?([A-Za-z0-9_][\w./-]*\.[A-Za-z0-9]+)\b", text,
                      flags=re.IGNORECASE)
    return named.group(1) if named and ".." not in named.group(1) else None


def _content(path: str, instructions: str) -> str:
    if path in TODO_FILES and "todo" in instructions.lower():
        return TODO_FILES[path]
    name = path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    if "[demo:messy]" in instructions and name.endswith(".py"):
        module = stem.removeprefix("test_")
        if name.startswith("test_") and module.isidentifier():
            return MESSY_TEST.format(module=module)
        return MESSY_MODULE
    if name.endswith(".py") and name.startswith("test_"):
        module = stem.removeprefix("test_")
        if module.isidentifier():
            return GENERIC_TEST.format(module=module)
        return GENERIC_TEST_ALONE
    if name.endswith(".py"):
        return GENERIC_MODULE.format(title=stem.replace("_", " "), text=instructions)
    if name.endswith(".json"):
        return json.dumps({"description": instructions, "written_by": LABEL}, indent=2) + "\n"
    return f"# {stem.replace('_', ' ').title()}\n\n{instructions.strip()}\n\n_{SIGNATURE}_\n"


def _summary(steps: list[ToolCall], results: list[str]) -> str:
    if steps[0].name != "write_file" or steps[0].arguments["path"] == "../escape.txt":
        return f"{LABEL} The tools answered: " + " | ".join(
            r.strip().split("\n", 1)[0] for r in results)
    written = steps[0].arguments
    size = len(str(written["content"]).encode("utf-8"))
    text = f"{LABEL} Wrote {written['path']} ({size} bytes)."
    if results and results[0].startswith("Error"):
        text = f"{LABEL} Could not write {written['path']}: {results[0].strip()}"
    if len(steps) > 1 and len(results) > 1:
        said = [line.strip() for line in results[-1].splitlines()
                if line.strip() and not line.startswith("---")]
        text += f" Checked that it compiles: {'; '.join(said[:2])}."
    return text


# ---- the HTTP server (it lives in shoal.demo.fake) ---------------------------------------


def create_demo_model_app() -> Starlette:
    """The demo model as an ASGI app: the fake model server with every protocol."""
    return create_fake_app(decide_reply)


@contextlib.asynccontextmanager
async def running_demo_model(
    app: Starlette | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run the demo model in this process (port 0: any free port); yield its OpenAI base URL.

    The URL ends in `/v1`, ready for `openai.AsyncOpenAI(base_url=…)`. Pass your own `app`
    (from `create_demo_model_app`) to read its recorded requests.
    """
    async with running_fake_server(app or create_demo_model_app(), host=host,
                                   port=port) as root:
        yield f"{root}/v1"


async def serve_demo_model(host: str, port: int) -> None:
    """Serve the demo model on `host:port` until cancelled or interrupted (Ctrl-C)."""
    await serve_fake_server(create_demo_model_app(), host, port)
