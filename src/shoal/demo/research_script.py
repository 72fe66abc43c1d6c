"""The demo model's script for the `research` workflow (`workflows/builtin/research.yaml`):
every role, with the tools of `shoal mcp sources` where the client offers them.

- the planner names the question's parts and writes a typed plan of three waves. For the
  sample question (it names "heat days"): figures (SQL), passages on what the city does, the
  relations of who does it, one part the sources cannot answer ("Tram rails"), a synthesis of
  the four and the report. For any other question: its parts are its sentences that ask and
  the clauses of one joined by "and", each searched on its own (passages, and figures for a
  part that asks for numbers), so that a part is answered only by what its own search found;
- the searcher calls `search_passages` (an expanded query on a retry) and answers, from each
  passage found, the sentence or table row that holds enough of the question's terms
  (`shoal.demo.reading`: terms as the search index stems them, weighted by their rarity among
  the passages found), with its citation and, as its quote, the sentence or row copied exactly
  — none, and `answered: false`, when no passage holds enough, never an invented finding;
- the analyst calls `data_schema`, then `query_data` with a SELECT over the table whose
  columns the task names, and answers the rows with the SQL (nothing when no column fits);
- the grapher calls `graph_neighbors` with the task's capitalised names;
- the synthesist and the writer build their texts from the findings in their prompts only; the
  writer numbers the citations and lists each with its quote. On the sample question alone it
  adds one sentence its cited passage does not support (`UNSUPPORTED`), which Shoal's citation
  check catches: told so, the writer removes the sentences the check names (`repaired`);
- the judge scores 0.9, or 0.3 for a retrieval that answered nothing.

Every report it writes begins by saying that the built-in demo model wrote it, and how to
connect a real one (`NOTICE`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from shoal.demo.fake.exchange import LABEL, NOTICE
from shoal.demo.fake.wire import Reply, ToolCall, ToolSpec
from shoal.demo.reading import Reading, sentences

ROLE = re.compile(r"Research role:[ \t]*(planner|retrieval_rag|retrieval_nlq|retrieval_graph|"
                  r"synthesis|write_report|judge)\b")
UNSUPPORTED = "Norhaven planted 50,000 street trees in 2024 alone"  # no source says so
REPAIR = "Shoal's citation check (code, not a model) found cited sentences"
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
        return Reply(text=_repaired(text) if REPAIR in text else _report(text))
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
        tasks = []  # each part searched on its own: it is answered only by what its search finds
        for q, part in zip(ids, parts, strict=True):
            tasks.append(task(f"Passages for {q}", "retrieval_rag", part, serves=(q,)))
            if _FIGURES.search(part):
                tasks.append(task(f"Figures for {q}", "retrieval_nlq", part, serves=(q,)))
        asked = tuple(t["name"] for t in tasks)
        return {"questions": [{"id": q, "question": p} for q, p in zip(ids, parts, strict=True)],
                "subtasks": [
            *tasks, task("Synthesis", "synthesis", f"Combine the findings on: {topic}", *asked),
            task("Report", "write_report", f"The cited report on: {topic}", "Synthesis")]}
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
            query += " OR " + " OR ".join(_other_number(w) for w in _words(query)
                                          if not w.endswith(("ed", "ing")))  # a verb's form
        return {"query": query, "k": 5}
    if role == "retrieval_graph":
        names = [n for n in re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*", task.split(":", 1)[-1])
                 if n.lower() not in _STOP]
        return {"entities": names[:5], "depth": 1}
    if not results:
        return {}
    return {"sql": _sql(results[-1], task)}


def _other_number(word: str) -> str:
    """A word's plural for its singular and its singular for its plural, as an expanded query
    tries them ("dictionary" / "dictionaries", "sorts" / "sort", "class" / "classes")."""
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("is"):
        return word[:-2] + "es"  # analysis / analyses
    if word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


_FIGURES = re.compile(r"\b(how (many|much|big|large|long)|number|count|total|average|percent|"
                      r"largest|biggest|smallest|most|least|top|size|sizes)\b", re.IGNORECASE)
_MOST = ("largest", "biggest", "most", "highest", "top", "greatest", "heaviest", "longest")
_LEAST = ("smallest", "least", "fewest", "lowest", "lightest", "shortest")
_NUMERIC = ("INT", "DOUBLE", "FLOAT", "DECIMAL", "REAL", "NUMERIC", "BIGINT", "HUGEINT")


def _sql(schema_text: str, task: str) -> str:
    """A simple SELECT written from the schema alone: the sample's "most heat days in the
    latest year"; a count for "how many"; the rows ordered by a number column for a
    superlative (the column the task names, else the first number column); the columns the
    task names besides the rows' label; else a query that finds nothing (`WHERE false`): no
    column answers it."""
    schema = _json(schema_text)
    tables = schema.get("tables", []) if isinstance(schema, dict) else []
    asked = set(_words(task.replace("_", " ")))
    lowered = task.lower()
    for table in tables:
        columns = [c for c in table.get("columns", []) if isinstance(c, dict)]
        names = [str(c.get("name")) for c in columns]
        name = _quoted(str(table.get("table")))
        if {"district", "year", "heat_days"} <= set(names) and "heat" in asked:
            extra = ", canopy_cover_pct" if "canopy_cover_pct" in names else ""
            return (f"SELECT district, year, heat_days{extra} FROM {name} WHERE year = "
                    f"(SELECT max(year) FROM {name}) ORDER BY heat_days DESC LIMIT 3")
        plural = asked | {w.removesuffix("s") for w in asked}
        named = [n for n in names if set(_words(n.replace("_", " "))) & plural]
        called = set(_words(str(table.get("table")).replace("_", " ")))
        numbers = [str(c.get("name")) for c in columns
                   if any(t in str(c.get("type", "")).upper() for t in _NUMERIC)]
        if re.search(r"\bhow many\b", lowered) and (named or plural & (called | {"rows"})):
            per = next((n for n in named if n not in numbers and re.search(
                rf"\b(?:each|per|by)\s+{re.escape(n.replace('_', ' '))}", lowered)), None)
            if per is not None:
                return (f"SELECT {_quoted(per)}, count(*) AS count FROM {name} GROUP BY "
                        f"{_quoted(per)} ORDER BY count DESC")
            return f"SELECT count(*) AS count FROM {name}"
        most = any(w in lowered for w in _MOST)
        if (most or any(w in lowered for w in _LEAST)) and numbers:
            by = next((n for n in named if n in numbers), numbers[0])
            shown = ", ".join(_quoted(n) for n in dict.fromkeys([*named, names[0], by]))
            return (f"SELECT {shown} FROM {name} ORDER BY {_quoted(by)} "
                    f"{'DESC' if most else 'ASC'} LIMIT 5")
        measures = [n for n in named if n != names[0]]  # a row's label alone answers nothing
        if measures:
            shown = ", ".join(_quoted(n) for n in dict.fromkeys([names[0], *measures]))
            return f"SELECT {shown} FROM {name} LIMIT 5"
    first = _quoted(str(tables[0].get("table"))) if tables else "data"
    return f"SELECT * FROM {first} WHERE false"


def _findings(role: str, text: str, task: str, results: Sequence[str]) -> dict[str, Any]:
    said = _json(results[-1]) if results else None
    said = said if isinstance(said, dict) else {}
    findings: list[dict[str, str]] = []
    query = task.split(":", 1)[-1].strip()
    if role == "retrieval_rag":
        query = str(said.get("query") or query)
        passages = [p for p in said.get("passages", []) if isinstance(p, dict)]
        reading = Reading.of(task.split(":", 1)[-1], [str(p.get("text", "")) for p in passages])
        for passage in passages:
            if unit := reading.answer_in(str(passage.get("text", ""))):
                findings.append({"text": unit.said, "citation": str(passage.get("citation", "")),
                                 "quote": unit.quote})
    elif role == "retrieval_nlq" and said.get("rows"):
        sql = str(said.get("sql", ""))
        query = sql or query
        for row in said.get("rows", [])[:3]:
            findings.append({"text": ", ".join(f"{k} {v}" for k, v in _row(row, said).items()),
                             "citation": f"SQL: {sql}"})
    elif role == "retrieval_graph":
        findings = _relations(task, said)
    return {"query": query, "answered": bool(findings), "findings": findings[:3]}


def _relations(task: str, said: dict[str, Any]) -> list[dict[str, str]]:
    """Each relation the graph found between the task's names, as the sentence of its
    passage that states it (its quote): never the graph's own `subject relation object`."""
    passages = {p.get("id"): p for p in said.get("passages", [])}
    asked = task.split(":", 1)[-1]
    # Names listed: every relation of theirs. A question: those that touch its words.
    named = " ".join(said.get("entities", [])).lower()
    topic = [] if "," in asked else [w for w in _words(asked) if w not in named]
    found: list[dict[str, str]] = []
    for edge in said.get("edges", [])[:8]:
        ends = [str(edge.get("subject", "")), str(edge.get("object", ""))]
        if topic and not any(w in " ".join(ends).lower() for w in topic):
            continue
        cited = passages.get(next(iter(edge.get("passages", [])), None), {})
        quote = _best_sentence(str(cited.get("text", "")), [e.lower() for e in ends])
        if quote and all(q["quote"] != quote for q in found):
            found.append({"text": quote, "citation": str(cited.get("citation", "")),
                          "quote": quote})
    return found


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
                quote = finding.get("quote")
                source = f"{finding.get('citation')}" + (f" \u2014 \"{quote}\"" if quote else "")
                lines.append(f"- {finding.get('text')} [{source}]")
            if not answer.get("findings"):
                lines.append(f"- {name}: the sources do not answer it.")
    return "\n".join(lines)


_SYNTHESISED = re.compile(r"- (.+) \[([^\[\]]+?(?: \u2014 \".*\")?)\]$")
"""A synthesis line: `- <finding> [<citation> — "<quote>"]`. The citation holds no brackets,
while a finding and its quote may ("[BSD](LICENSE)", "[zlib] 1.2.11"): the finding ends at the
last " [" after which a bracket-free citation follows."""


def _claims(text: str) -> list[tuple[str, str]]:
    """The findings in a writer's prompt, as (sentence, its Sources entry): from the synthesis
    above it or, where it depends on retrievals directly, from theirs."""
    claims: list[tuple[str, str]] = []
    for _, kind, answer in _inputs(text):
        if kind == "gap":
            continue
        if isinstance(answer, dict):
            for f in answer.get("findings", []):
                quote = f.get("quote")
                claims.append((str(f.get("text")), str(f.get("citation")) + (
                    f" \u2014 \"{quote}\"" if quote else "")))
            continue
        for line in str(answer).splitlines():
            if found := _SYNTHESISED.match(line.strip()):
                claims.append((found.group(1), found.group(2)))
    return claims


def _distinct(claims: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`claims` without one that says what an earlier one says (the same sentence in two
    pages, a word apart): a report states a finding once."""
    kept: list[tuple[str, str]] = []
    seen: list[set[str]] = []
    for claim in claims:
        words = set(re.findall(r"\w+", claim[0].lower()))
        if not any(len(words & w) >= 0.9 * len(words | w) for w in seen):
            kept.append(claim)
            seen.append(words)
    return kept


def _report(text: str) -> str:
    """A report with every claim cited and each citation listed with its quote; Shoal's code
    writes its Gaps and its Citation check. Its findings come from its prompt alone."""
    claims = _distinct(_claims(text))
    question = line_after(text, "Question:") or "the question"
    documents = [c for _, c in claims if not c.startswith("SQL:")]
    if documents and "heat days" in question.lower():  # the sample alone: for the check
        claims.append((f"{UNSUPPORTED}.", documents[0]))
    numbers: dict[str, int] = {}
    for _, source in claims:
        numbers.setdefault(source, len(numbers) + 1)
    cited = [f"- {_sentence(claim)} [{numbers[c]}]" for claim, c in claims]
    summary = (f"The sources answer {len(claims)} point(s) of the question." if claims
               else "The sources do not answer this question: nothing in them supports an "
                    "answer.")
    detail = cited[5:] or [f"The findings above rest on {len(numbers)} source(s): "
                           f"{len(documents)} passage(s) of the documents and "
                           f"{len(claims) - len(documents)} row(s) of the data."]
    return "\n".join([
        f"# {question}", "", NOTICE, "", "## Executive Summary", "", f"{summary} ({LABEL})", "",
        "## Key Findings", "", *(cited[:5] or ["- None: the sources hold no answer."]), "",
        "## Detailed Analysis", "", *detail, "",
        "## Methodology Notes", "", "Typed retrieval tasks in waves, each checked by its "
        "type's gate; findings synthesised, then written up.", "",
        "## Sources", "", *([f"[{n}] {c}" for c, n in numbers.items()] or ["None cited."]), ""])


def _repaired(text: str) -> str:
    """The previous report without the sentences Shoal's check named (the demo model cannot
    find better support for them: it only removes)."""
    asked, _, previous = text.partition("Your previous answer:\n")
    named = re.findall(r'^- "(.+)": ', asked, flags=re.MULTILINE)
    kept = [line for line in previous.splitlines()
            if not any(n.rstrip(".") in line for n in named)]
    return "\n".join(kept).strip() + "\n"


def _sentence(claim: str) -> str:
    """A claim as a sentence: its end mark kept before the citation marker goes after it."""
    return claim.rstrip(" .") if claim.rstrip().endswith(".") else claim


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


def _best_sentence(text: str, words: Sequence[str]) -> str:
    """The sentence of `text` that holds all of `words`, the first if several do (never cut
    within a sentence, never a heading)."""
    return next((s for s in sentences(text) if all(w in s.lower() for w in words)), "")


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
