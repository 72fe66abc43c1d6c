"""The demo model's script for the `research` workflow (`workflows/builtin/research.yaml`):
every role, with the tools of `shoal mcp sources` where the client offers them.

- the planner writes a typed plan of four waves. For the sample question (it names "heat
  days"): figures (SQL), passages on what the city does, the relations of who does it, one
  question the sources cannot answer ("Tram rails"), a synthesis of the four, the report, and
  its review. For any other question: passages, figures and relations on the question itself;
- the searcher calls `search_passages` (an expanded query on a retry) and answers the passages
  that hold at least half of the query's words (and two of them), each with its citation —
  none, and `answered: false`, when nothing holds them, never an invented finding;
- the analyst calls `data_schema`, then `query_data` with a SELECT over the table whose
  columns the task names, and answers the rows with the SQL (nothing when no column fits);
- the grapher calls `graph_neighbors` with the task's capitalised names;
- the synthesist and the writer build their texts from the findings in their prompts; the
  writer numbers the citations, lists the gaps — and adds one sentence its cited passage does
  not support (`UNSUPPORTED`), for the review to catch;
- the reviewer checks each cited sentence against the findings its citation names (every
  figure of the sentence in the passage), drops what is unsupported or cites nothing, and adds
  a "Citation check" section with the figures;
- the judge scores 0.9, or 0.3 for a retrieval that answered nothing.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from shoal.demo.fake.exchange import LABEL
from shoal.demo.fake.wire import Reply, ToolCall, ToolSpec

ROLE = re.compile(r"Research role:[ \t]*(planner|retrieval_rag|retrieval_nlq|retrieval_graph|"
                  r"synthesis|write_report|review|judge)\b")
UNSUPPORTED = "Norhaven planted 50,000 street trees in 2024 alone"  # no source says so
SQL_WRITER = "Role: sql_writer"  # `shoal.retrieval.sql_writer`'s prompt
RETRY = "# Another try"
_STOP = frozenset({"what", "which", "when", "where", "does", "with", "from", "that", "this",
                   "their", "about", "find", "passages", "documents", "sources", "answer",
                   "question", "often", "have", "were", "many", "much", "city", "doing"})


def reply(role: str, text: str, done_steps: int, results: Sequence[str],
          offered: Sequence[ToolSpec]) -> Reply:
    """The answer of the research role `role` to its prompt `text`, after `done_steps` tool
    calls that returned `results`."""
    task = line_after(text, "Task:")
    if role == "planner":
        return Reply(text=json.dumps(_plan(line_after(text, "Question:"))))
    if role == "judge":
        return Reply(text=json.dumps(_judgement(text)))
    if role == "synthesis":
        return Reply(text=_synthesis(text))
    if role == "write_report":
        return Reply(text=_report(text))
    if role == "review":
        return Reply(text=_reviewed(text))
    wanted = {"retrieval_rag": ("search_passages",),
              "retrieval_nlq": ("data_schema", "query_data"),
              "retrieval_graph": ("graph_neighbors",)}[role]
    if done_steps < len(wanted):
        tool = offered_tool(offered, wanted[done_steps])
        if tool is not None:
            return Reply(tool_calls=(ToolCall(tool, _arguments(role, text, task, results)),))
    return Reply(text=json.dumps(_findings(role, text, task, results)))


# ---- the planner and the judge ---------------------------------------------------------------


def _plan(question: str) -> dict[str, Any]:
    topic = question.rstrip("?.! ") or "the question"

    def task(name: str, kind: str, description: str, *deps: str,
             serves: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"name": name, "type": kind, "description": description,
                "dependencies": list(deps)} | ({"serves": list(serves)} if serves else {})
    if "heat days" not in question.lower():
        parts = _parts(question)
        ids = tuple(f"q{i}" for i in range(1, len(parts) + 1))
        asked = ("Passages", "Figures", "Relations")
        return {"questions": [{"id": q, "question": p} for q, p in zip(ids, parts, strict=True)],
                "subtasks": [
            task("Passages", "retrieval_rag", topic, serves=ids),
            task("Figures", "retrieval_nlq", topic, serves=ids),
            task("Relations", "retrieval_graph", topic, serves=ids),
            task("Synthesis", "synthesis", f"Combine the findings on: {topic}", *asked),
            task("Report", "write_report", f"The cited report on: {topic}", "Synthesis"),
            task("Review", "review", "Check every citation of the report", "Report", *asked)]}
    found = ("Heat days by district", "What the city does", "Who does what", "Tram rails")
    return {"questions": [
        {"id": "q1", "question": "Which district had the most heat days in the latest year?"},
        {"id": "q2", "question": "What is the city doing about heat: its trees and programmes?"},
        {"id": "q3", "question": "Who is responsible for what?"},
        {"id": "q4", "question": "Has the heat damaged the tram rails?"}], "subtasks": [
        task("Heat days by district", "retrieval_nlq",
             "Which district had the most heat days in the latest year, with its canopy cover?",
             serves=("q1",)),
        task("What the city does", "retrieval_rag",
             "Street trees planting programme canopy strategy targets budget", serves=("q2",)),
        task("Who does what", "retrieval_graph",
             "Urban Forestry Office, Cooler Streets Programme, Eastfield", serves=("q3",)),
        task("Tram rails", "retrieval_rag", "Tram rail buckling incidents", serves=("q4",)),
        task("Synthesis", "synthesis", f"Combine the findings on: {topic}",
             "Heat days by district", "What the city does", "Who does what", "Tram rails"),
        task("Report", "write_report", f"The cited report on: {topic}", "Synthesis"),
        task("Review", "review", "Check every citation of the report", "Report", *found),
    ]}


def _parts(question: str) -> list[str]:
    """The parts of a question a complete answer must cover: its sentences that ask, and the
    clauses of one joined by "and" (at most six), each as a question of its own."""
    asked = [s.strip() for s in re.split(r"(?<=[?])\s+", question.strip()) if s.strip()]
    parts: list[str] = []
    for sentence in asked:
        clauses = [c.strip(" ,;") for c in re.split(r",?\s+and\s+(?=(?:how|what|which|who|"
                                                      r"when|where|why|is|are|does|do|can)\b)",
                                                      sentence, flags=re.IGNORECASE)]
        parts += [c[0].upper() + (c[1:] if c.endswith("?") else c[1:].rstrip(".!") + "?")
                  for c in clauses if c]
    return parts[:6] or [question]


def _judgement(text: str) -> dict[str, Any]:
    answer = text.split("Its answer:", 1)[-1]
    found = _json(answer)
    if isinstance(found, dict) and "answered" in found and (
            not found.get("answered") or not found.get("findings")):
        return {"score": 0.3, "feedback": f"{LABEL} Nothing found answers the task."}
    return {"score": 0.9, "feedback": f"{LABEL} Relevant and cited."}


# ---- the retrieval roles -----------------------------------------------------------------------


def _arguments(role: str, text: str, task: str, results: Sequence[str]) -> dict[str, Any]:
    if role == "retrieval_rag":
        query = task.split(":", 1)[-1].strip()
        if RETRY in text:  # the gate asked for an expanded query: another one, recorded
            query += " OR " + " OR ".join(f"{w}s" for w in _words(query))
        return {"query": query, "k": 5}
    if role == "retrieval_graph":
        names = [n for n in re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*", task.split(":", 1)[-1])
                 if n.lower() not in _STOP]
        return {"entities": names[:5], "depth": 1}
    if not results:
        return {}
    return {"sql": _sql(results[-1], task)}


def _sql(schema_text: str, task: str) -> str:
    """A SELECT for "the most heat days in the latest year" over the table that has the
    columns; else the first rows of a table one of whose columns the task names; else a query
    that finds nothing (`WHERE false`): no column of the data answers the task."""
    schema = _json(schema_text)
    tables = schema.get("tables", []) if isinstance(schema, dict) else []
    asked = set(_words(task.replace("_", " ")))
    for table in tables:
        columns = {str(c.get("name")) for c in table.get("columns", []) if isinstance(c, dict)}
        name = _quoted(str(table.get("table")))
        if {"district", "year", "heat_days"} <= columns and "heat" in asked:
            extra = ", canopy_cover_pct" if "canopy_cover_pct" in columns else ""
            return (f"SELECT district, year, heat_days{extra} FROM {name} WHERE year = "
                    f"(SELECT max(year) FROM {name}) ORDER BY heat_days DESC LIMIT 3")
        if any(set(_words(c.replace("_", " "))) & asked for c in columns):
            return f"SELECT * FROM {name} LIMIT 5"
    first = _quoted(str(tables[0].get("table"))) if tables else "data"
    return f"SELECT * FROM {first} WHERE false"


def _findings(role: str, text: str, task: str, results: Sequence[str]) -> dict[str, Any]:
    said = _json(results[-1]) if results else None
    said = said if isinstance(said, dict) else {}
    findings: list[dict[str, str]] = []
    query = task.split(":", 1)[-1].strip()
    if role == "retrieval_rag":
        query = str(said.get("query") or query)
        words = _informative(_words(task.split(":", 1)[-1]), said.get("passages", []))
        for passage in said.get("passages", []):
            body = str(passage.get("text", ""))
            hits = sum(w in body.lower() for w in words)
            if hits * 2 >= len(words) and hits >= min(2, len(words)):
                findings.append({"text": _first_sentences(body),
                                 "citation": str(passage.get("citation", ""))})
    elif role == "retrieval_nlq" and said.get("rows"):
        sql = str(said.get("sql", ""))
        query = sql or query
        for row in said.get("rows", [])[:3]:
            findings.append({"text": ", ".join(f"{k} {v}" for k, v in _row(row, said).items()),
                             "citation": f"SQL: {sql}"})
    elif role == "retrieval_graph":
        passages = {p.get("id"): p for p in said.get("passages", [])}
        asked = task.split(":", 1)[-1]
        # Names listed: every relation of theirs. A question: those that touch its words.
        named = " ".join(said.get("entities", [])).lower()
        topic = [] if "," in asked else [w for w in _words(asked) if w not in named]
        for edge in said.get("edges", [])[:5]:
            ends = f"{edge.get('subject')} {edge.get('object')}".lower()
            if topic and not any(w in ends for w in topic):
                continue
            cited = passages.get(next(iter(edge.get("passages", [])), None), {})
            findings.append({"text": f"{edge.get('subject')} {edge.get('relation')} "
                                     f"{edge.get('object')}",
                             "citation": str(cited.get("citation", ""))})
    return {"query": query, "answered": bool(findings), "findings": findings[:3]}


def sql_answer(prompt: str) -> str | None:
    """The SQL for a `query_data(question=…)` prompt (`shoal.retrieval.sql_writer`: "Role:
    sql_writer", its tables and question), as the analyst would write it; None for any other
    prompt."""
    if SQL_WRITER not in prompt or "Tables:" not in prompt or "Question:" not in prompt:
        return None
    tables = prompt.split("Tables:", 1)[1].rsplit("Question:", 1)[0].strip()
    question = prompt.rsplit("Question:", 1)[1].strip()
    return _sql(json.dumps({"tables": _json(tables) or []}), question)


def _quoted(name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _informative(words: list[str], passages: list[dict[str, Any]]) -> list[str]:
    """`words` without those in most of the passages found (a city's name says nothing of
    whether a passage answers), unless that leaves none."""
    texts = [str(p.get("text", "")).lower() for p in passages]
    if len(texts) < 3:
        return words
    rare = [w for w in words if sum(w in t for t in texts) * 3 <= len(texts) * 2]
    return rare or words


def _row(row: Any, said: dict[str, Any]) -> dict[str, Any]:
    if isinstance(row, dict):
        return row
    columns = said.get("columns", [])
    return dict(zip(columns, row, strict=False)) if isinstance(row, list) else {"row": row}


# ---- synthesis and the report ----------------------------------------------------------------


_ELEMENT = re.compile(r'<result task="([^"]*)" type="([^"]*)">\n(.*?)\n</result>'
                      r'|<gap task="([^"]*)">(.*?)</gap>', flags=re.DOTALL)


def _inputs(text: str) -> list[tuple[str, str, Any]]:
    """The findings in a prompt's "What the tasks this one depends on found": (name, type or
    "gap", the answer: its JSON, else its text)."""
    found: list[tuple[str, str, Any]] = []
    for match in _ELEMENT.finditer(text):
        if match.group(4) is not None:
            found.append((html.unescape(match.group(4)), "gap", match.group(5).strip()))
            continue
        body = match.group(3)
        value = _json(body) if body.lstrip().startswith("{") else None
        found.append((html.unescape(match.group(1)), match.group(2), value or body.strip()))
    return found


def _synthesis(text: str) -> str:
    lines = [f"{LABEL} What the findings establish together:"]
    for name, kind, answer in _inputs(text):
        if kind == "gap":
            lines.append(f"- {name}: a gap ({answer})")
        elif isinstance(answer, dict):
            for finding in answer.get("findings", []):
                lines.append(f"- {finding.get('text')} [{finding.get('citation')}]")
            if not answer.get("findings"):
                lines.append(f"- {name}: the sources do not answer it.")
    return "\n".join(lines)


def _report(text: str) -> str:
    """A report with every citation numbered and listed, the gaps named. Its findings come from
    the synthesis above it, or, where it depends on retrievals directly, from theirs."""
    claims: list[tuple[str, str]] = []
    gaps: list[str] = []
    for name, kind, answer in _inputs(text):
        if kind == "gap":
            gaps.append(f"{name}: {answer}")
        elif isinstance(answer, dict):
            claims += [(str(f.get("text")), str(f.get("citation")))
                       for f in answer.get("findings", [])]
        else:
            for line in str(answer).splitlines():
                if found := re.match(r"- (.+) \[(.+)\]$", line.strip()):
                    claims.append((found.group(1), found.group(2)))
                elif found := re.match(r"- (.+): a gap \((.+)\)$", line.strip()):
                    gaps.append(f"{found.group(1)}: {found.group(2)}")
    question = line_after(text, "Question:") or "the question"
    documents = [c for _, c in claims if not c.startswith("SQL:")]
    if documents:  # one sentence its source does not support, for the review to catch
        claims.append((UNSUPPORTED, documents[0]))
    numbers: dict[str, int] = {}
    for _, citation in claims:
        numbers.setdefault(citation, len(numbers) + 1)
    cited = [f"- {claim} [{numbers[c]}]" for claim, c in claims]
    skipped = [g.split(":", 1)[0] for g in gaps if "budget" in g]
    partial = (f"Partial report: the budget could not cover {', '.join(skipped)}. "
               if skipped else "")
    summary = partial + (f"The sources answer {len(claims)} point(s) of the question; "
               f"{len(gaps)} part(s) could not be answered." if claims else
               "The sources do not answer this question: nothing in them supports an answer.")
    return "\n".join([
        f"# {question}", "", "## Executive Summary", "", f"{summary} ({LABEL})", "",
        "## Key Findings", "", *(cited[:5] or ["- None: the sources hold no answer."]), "",
        "## Detailed Analysis", "", *(cited or ["The sources were searched; none answers it."]),
        "", "## Gaps", "", *([f"- {g}" for g in gaps] or ["- None."]), "",
        "## Methodology Notes", "", "Typed retrieval tasks in waves, each checked by its "
        "type's gate; findings synthesised, then written up.", "",
        "## Sources", "", *([f"[{n}] {c}" for c, n in numbers.items()] or ["None cited."]), ""])


def _reviewed(text: str) -> str:
    """The report with every cited sentence checked against the findings its citation names:
    kept when each of its figures is in one of them, else dropped; a citation that names no
    source dropped too; then the figures of the check."""
    inputs = _inputs(text)
    report = next((a for _, kind, a in inputs if kind == "write_report"), "")
    passages: dict[str, list[str]] = {}
    for _, _, answer in inputs:
        if isinstance(answer, dict):
            for finding in answer.get("findings", []):
                passages.setdefault(str(finding.get("citation")), []).append(
                    str(finding.get("text")))
    head, _, sources = str(report).partition("## Sources")
    listed = dict(re.findall(r"^\[(\d+)\] (.+)$", sources, flags=re.MULTILINE))
    kept: list[str] = []
    verdicts: dict[str, bool] = {}
    for line in head.splitlines():
        cited = re.findall(r"\[(\d+)\]", line)
        if not cited:
            kept.append(line)
            continue
        claim = re.sub(r"\s*\[\d+\]", "", line).removeprefix("- ").strip()
        ok = all(n in listed and _supports(claim, passages.get(listed[n], [])) for n in cited)
        verdicts[claim] = ok
        if ok:
            kept.append(line)
    cited_count, supported = len(verdicts), sum(verdicts.values())
    dropped = [c for c, ok in verdicts.items() if not ok]
    check = ["## Citation check", "",
             f"- Cited sentences: {cited_count}; supported by their passages: {supported}; "
             f"citation precision: {supported / cited_count if cited_count else 1:.0%}.",
             "- Citations that resolve to a passage of the sources: 100 % (those that did not "
             "were removed).",
             *[f"- Removed, its source does not support it: \"{c}\"" for c in dropped], ""]
    return "\n".join([*kept, *check, "## Sources", sources.lstrip("\n")])


def _supports(claim: str, passages: list[str]) -> bool:
    figures = re.findall(r"\d[\d,.]*\d|\d", claim)
    if figures:
        return any(all(f in p for f in figures) for p in passages)
    return any(claim[:40] in p for p in passages)


# ---- small helpers -----------------------------------------------------------------------------


def offered_tool(offered: Sequence[ToolSpec], wanted: str) -> str | None:
    """The name under which the client offers the tool `wanted` (`<server>__wanted`)."""
    return next((t.name for t in offered if t.name == wanted or t.name.endswith("_" + wanted)),
                None)


def line_after(text: str, label: str) -> str:
    """What follows `label` on its line of `text` (empty when no line starts with it)."""
    found = re.search(rf"^{re.escape(label)}[ \t]*(.+)$", text, flags=re.MULTILINE)
    return found.group(1).strip() if found else ""


def _words(text: str) -> list[str]:
    return [w for w in dict.fromkeys(re.findall(r"[a-z]{4,}", text.lower())) if w not in _STOP]


def _first_sentences(text: str, most: int = 280) -> str:
    flat = " ".join(text.split())
    cut = flat[:most]
    end = cut.rfind(". ")
    return cut[:end + 1] if end > 80 else cut


def _json(text: str) -> Any:
    """The JSON value `text` is, else the first JSON object in it, else None."""
    try:
        return json.loads(text.strip())
    except ValueError:
        start = text.find("{")
        try:
            return json.JSONDecoder().raw_decode(text, start)[0] if start >= 0 else None
        except ValueError:
            return None
