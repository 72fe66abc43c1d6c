"""The demo model's script for the `proposal` workflow (`workflows/builtin/proposal.yaml`):
every role, with the tools of `shoal mcp literature` where the client offers them.

- the interviewer (`interview_script`) finds in the request and each answer the facts its
  step learns (program, field, timeline, constraints, resources), reports them with the answer
  each came from, and asks one question at a time for what is still missing and was not asked:
  first the program and field (`PROGRAM_QUESTION` when both are missing), then the timeline,
  constraints and resources (`TIMELINE_QUESTION`); with nothing left to ask it answers the
  profile ("not stated" for what it does not know);
- the problem formulator first delegates (`{"ask": "papers on <topic>"}`, the topic after "on"
  in the request up to a punctuation mark, else the profile's field); once the literature
  reviewer answered, it answers the problem citing the reviewer's papers and only those (none
  found: an empty list and `worked_without_sources`). On a refinement round (quality
  control's feedback in its prompt) the statement starts with `REVISED` and the question is
  narrowed as QC's first recommendation says;
- the literature reviewer calls `search_papers` (the request's first three informative words,
  limit 5) when offered, then answers the papers it returned; without the tool, or when it
  reports an error, no papers, `searched: false`, and a note saying why — never an invented
  paper;
- the objectives writer, methodologist and data planner build their answers from `{context}`:
  four SMART objectives due at the ends of the data plan's phases, a methodology (quantitative
  when the constraints say public data or no travel, qualitative when they speak of interviews
  only, else mixed), and phases whose weeks add up to the timeline (26 weeks when not stated);
- quality control asks for refinement (`NARROW`) until the problem statement starts with
  `REVISED`: the demo makes exactly one refinement;
- the writer puts the proposal together in Markdown: a title, then Profile, Problem,
  Objectives, Methodology, Data Collection, Timeline, References (`[key] Title (year). url`,
  cited in the text as `[key]`) and Quality Assessment (the scores and every recommendation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from shoal.demo.fake.exchange import LABEL, NOTICE
from shoal.demo.fake.wire import Reply, ToolCall, ToolSpec
from shoal.demo.interview_script import DURATION, NOT_STATED, NUMBERS, interview
from shoal.demo.research_script import line_after, offered_tool

ROLE = re.compile(r"Proposal role:[ \t]*(interviewer|problem_formulator|literature_reviewer|"
                  r"objectives_writer|methodologist|data_planner|quality_controller|writer)\b")
PROGRAM_QUESTION = "Which academic program are you in, and what is your field of study?"
TIMELINE_QUESTION = ("How long do you have in total, what constraints (permits, ethics, access, "
                     "travel) do you have, and what resources (budget, equipment, data) can you "
                     "use?")
REVISED = "Revised after quality control:"
NARROW = "Narrow the research question to two districts and one measurable outcome."
MINOR = "Minor: name the public datasets (source and year) the data plan relies on."
NO_SOURCES = "the literature services could not be reached; proceeding without sources"
DEFAULT_WEEKS = 26  # when the timeline is not stated: about six months
REVIEWER_ANSWERED = "The literature_reviewer agent answered:"

_STOP = frozenset({"a", "an", "the", "of", "in", "on", "and", "or", "for", "to", "how", "do",
                   "does", "what", "why", "which", "whether", "papers", "paper", "is", "are",
                   "with", "about", "into", "their", "its"})
_PHASES = (("Literature review and data access", 0.15), ("Data collection", 0.35),
           ("Analysis", 0.3), ("Writing and revision", 0.2))


def reply(role: str, text: str, done_steps: int, results: Sequence[str],
          offered: Sequence[ToolSpec]) -> Reply:
    """The answer of the proposal role `role` to its prompt `text`, after `done_steps` tool
    calls that returned `results`."""
    if role == "interviewer":
        return Reply(text=json.dumps(interview(text), ensure_ascii=False))
    if role == "literature_reviewer":
        tool = offered_tool(offered, "search_papers")
        if tool is not None and done_steps == 0:
            return Reply(tool_calls=(ToolCall(tool, {"query": _query(line_after(text, "Request:")),
                                                     "limit": 5}),))
        return Reply(text=json.dumps(_review(tool is not None, results), ensure_ascii=False))
    if role == "writer":
        return Reply(text=_proposal(text))
    parts = _parts(text)
    answer = {"problem_formulator": _problem, "objectives_writer": _objectives,
              "methodologist": _methodology, "data_planner": _data_plan,
              "quality_controller": _quality}[role](text, parts)
    return Reply(text=json.dumps(answer, ensure_ascii=False))


# ---- the problem formulator and the literature reviewer ---------------------------------------


def _problem(text: str, parts: dict[str, Any]) -> dict[str, Any]:
    request = line_after(text, "Request:")
    profile = _dict(parts.get("interview"))
    field = str(profile.get("field_of_study") or NOT_STATED)
    topic = _topic(request) or (field if field != NOT_STATED else request.rstrip(".?!"))
    found = _reviewer_answer(text)
    if found is None:
        return {"ask": f"papers on {topic}"}
    papers = [p for p in found.get("papers", []) if isinstance(p, dict)
              and p.get("citation_key") and p.get("title")]
    literature = [{"citation_key": str(p["citation_key"]), "title": str(p["title"]),
                   "year": p["year"] if isinstance(p.get("year"), int) else None,
                   "url": str(p["url"]) if p.get("url") else None,
                   "finding": str(p.get("relevance") or f"Bears on {topic}.")} for p in papers]
    keys = ", ".join(f"[{p['citation_key']}]" for p in literature)
    evidence = (f"Earlier work ({keys}) shows parts of the answer, but not for the student's "
                "setting." if literature else
                "No published sources could be retrieved, so this statement rests on the "
                "request alone.")
    statement = (f"Planners need to know {topic}, yet the evidence is scattered and rarely "
                 f"local to the cases a study in {field} could examine. {evidence}")
    question = f"What does the evidence show about {topic}, and which measurable outcome " \
               "captures it?"
    feedback = _feedback(text)
    if feedback:
        recommendation = next(iter(feedback), "Narrow the research question.")
        scope = re.match(r"narrow (?:the (?:research )?question )?to (.+?)\.?$",
                         recommendation, flags=re.I)
        statement = f"{REVISED} {recommendation} {statement}"
        question = (f"Limited to {scope.group(1)}, what does the evidence show about {topic}?"
                    if scope else f"{question} ({recommendation.rstrip('.')})")
    answer: dict[str, Any] = {"problem_statement": statement, "main_research_question": question,
                              "preliminary_literature": literature}
    if not literature:
        answer["worked_without_sources"] = True
    return answer


def _reviewer_answer(text: str) -> dict[str, Any] | None:
    """The literature reviewer's last answer in the conversation, or None before it answered."""
    at = text.rfind(REVIEWER_ANSWERED)
    if at < 0:
        return None
    return _dict(_json(text[at + len(REVIEWER_ANSWERED):])) or {"papers": []}


def _feedback(text: str) -> list[str]:
    """Quality control's recommendations on a refinement round; [] on a first round."""
    marker = "(empty on a first round):"
    if marker not in text:
        return []
    rest = text.split(marker, 1)[1].lstrip()
    if not rest.startswith("{"):
        return []
    said = _dict(_json(rest))
    return [str(r) for r in said.get("recommendations", []) if str(r).strip()] or (
        ["Narrow the research question."] if said else [])


def _review(offered: bool, results: Sequence[str]) -> dict[str, Any]:
    said = _dict(_json(results[-1])) if results else {}
    failed = not results or results[-1].startswith("Error") or "error" in said or \
        not isinstance(said.get("papers"), list)
    if not offered or failed:
        why = str(said.get("error") or "") or (results[-1][:200] if offered and results else "")
        return {"papers": [], "searched": False,
                "note": NO_SOURCES[0].upper() + NO_SOURCES[1:] + (f" ({why})" if why else "")
                + "."}
    papers = []
    for paper in said["papers"]:
        if not isinstance(paper, dict) or not paper.get("citation_key") or not paper.get("title"):
            continue
        abstract = " ".join(str(paper.get("abstract") or "").split())
        papers.append({
            "citation_key": str(paper["citation_key"]), "title": str(paper["title"]),
            "authors": [str(a) for a in paper.get("authors", [])],
            "year": paper["year"] if isinstance(paper.get("year"), int) else None,
            "url": str(paper["url"]) if paper.get("url") else None,
            "relevance": abstract.split(". ")[0].rstrip(".") + "." if abstract else
            f"Its title matches the search for '{said.get('query', '')}'."})
    answer: dict[str, Any] = {"papers": papers, "searched": True}
    unavailable = _dict(said.get("unavailable"))
    if not papers:
        answer["note"] = f"The search for '{said.get('query', '')}' found no papers."
    elif unavailable:
        answer["note"] = "Not reached: " + "; ".join(f"{k} ({v})" for k, v in unavailable.items())
    return answer


# ---- objectives, methodology, data plan, quality control ---------------------------------------


def _objectives(text: str, parts: dict[str, Any]) -> dict[str, Any]:
    profile, problem = _dict(parts.get("interview")), _dict(parts.get("problem"))
    question = str(problem.get("main_research_question") or "the research question")
    total = _weeks(str(profile.get("total_timeline", "")))
    ends = _phase_ends(total)
    papers = len(problem.get("preliminary_literature") or [])
    specific = [
        {"objective": "Review the literature and secure access to the data",
         "what": "a literature matrix and a data inventory",
         "measure": f"{papers} paper(s) summarised; every dataset named with its source "
                    "and years", "by_when": f"week {ends[0]} of {total}"},
        {"objective": "Collect the data the question needs",
         "what": "a cleaned dataset for the study area",
         "measure": "the planned sample size reached, with under 10 % missing values",
         "by_when": f"week {ends[1]} of {total}"},
        {"objective": "Analyse the data to answer the question",
         "what": "the comparison the methodology prescribes",
         "measure": "an effect size with its confidence interval",
         "by_when": f"week {ends[2]} of {total}"},
        {"objective": "Write up the findings and their implications",
         "what": "the thesis chapters and a planning brief",
         "measure": "a complete draft approved by the supervisor",
         "by_when": f"week {ends[3]} of {total}"},
    ]
    return {"general_objective": f"To answer: {question}",
            "specific_objectives": specific,
            "alignment_check": f"Objectives 1 to 4 lead from sources to data, analysis and "
                               f"write-up, together answering '{question}' within "
                               f"{profile.get('total_timeline', NOT_STATED)}."}


def _methodology(text: str, parts: dict[str, Any]) -> dict[str, Any]:
    profile = _dict(parts.get("interview"))
    kind = _kind(profile)
    timeline = str(profile.get("total_timeline") or NOT_STATED)
    how = {"quantitative": "A quantitative secondary analysis of public data: compare the "
                           "outcome across the study areas and relate it to the explanatory "
                           "variable with a regression",
           "qualitative": "A qualitative study: semi-structured interviews, coded thematically",
           "mixed": "A mixed-methods design: a quantitative analysis of public data, then "
                    "interviews that explain its patterns"}[kind]
    return {"recommended_methodology": f"{how}.", "methodology_type": kind,
            "timeline_fit": f"Fits {timeline} ({_weeks(timeline)} weeks): no new instruments "
                            "to build, and the phases of the data plan add up to it."}


def _data_plan(text: str, parts: dict[str, Any]) -> dict[str, Any]:
    profile = _dict(parts.get("interview"))
    method = _dict(parts.get("methodology"))
    kind = str(method.get("methodology_type") or _kind(profile))
    techniques = {"quantitative": ["Download of public datasets", "GIS measurement per study "
                                   "unit", "Secondary statistical analysis"],
                  "qualitative": ["Semi-structured interviews", "Thematic coding"],
                  "mixed": ["Download of public datasets", "Semi-structured interviews"]}
    size = {"quantitative": 120, "qualitative": 12, "mixed": 60}
    total = _weeks(str(profile.get("total_timeline", "")))
    return {"collection_techniques": techniques.get(kind, techniques["mixed"]),
            "estimated_sample_size": size.get(kind, 60),
            "timeline_breakdown": [{"phase": phase, "weeks": weeks}
                                   for (phase, _), weeks in zip(_PHASES, _split(total),
                                                                strict=True)]}


def _quality(text: str, parts: dict[str, Any]) -> dict[str, Any]:
    problem = _dict(parts.get("problem"))
    if str(problem.get("problem_statement", "")).startswith(REVISED):
        return {"coherence_score": 8.5, "feasibility_score": 8, "requires_refinement": False,
                "recommendations": [MINOR]}
    return {"coherence_score": 6.5, "feasibility_score": 7, "requires_refinement": True,
            "recommendations": [NARROW]}


# ---- the writer --------------------------------------------------------------------------------


def _proposal(text: str) -> str:
    parts = _parts(text)
    profile, problem = _dict(parts.get("interview")), _dict(parts.get("problem"))
    objectives, method = _dict(parts.get("objectives")), _dict(parts.get("methodology"))
    data, quality = _dict(parts.get("data_plan")), _dict(parts.get("quality"))
    request = line_after(text, "Request:")
    topic = _topic(request) or request.rstrip(".?!") or "the research idea"
    papers = [p for p in problem.get("preliminary_literature") or [] if isinstance(p, dict)]
    constraints = profile.get("constraints") or []
    resources = profile.get("resources") or []
    missing = _dict(profile.get("facts")).get("missing") or []
    lines = [f"# Research proposal: {topic}", "", NOTICE, "",
             "## Profile", "",
             f"- Academic program: {profile.get('academic_program', NOT_STATED)}",
             f"- Field of study: {profile.get('field_of_study', NOT_STATED)}",
             f"- Total timeline: {profile.get('total_timeline', NOT_STATED)}",
             f"- Constraints: {'; '.join(map(str, constraints)) or 'none stated'}",
             f"- Resources: {'; '.join(map(str, resources)) or 'none stated'}"]
    if missing:
        lines.append(f"- Still missing: {', '.join(map(str, missing))}")
    lines += ["", "## Problem", "", str(problem.get("problem_statement", "")), "",
              f"**Main research question:** {problem.get('main_research_question', '')}", ""]
    lines += [f"- [{p.get('citation_key')}] {p.get('finding', '')}" for p in papers] or [
        "This proposal worked without sources: the literature search found none."]
    lines += ["", "## Objectives", "",
              f"General objective: {objectives.get('general_objective', '')}", ""]
    lines += [f"{n}. {o.get('objective')}: {o.get('what')}; measured by {o.get('measure')}; "
              f"by {o.get('by_when')}."
              for n, o in enumerate(objectives.get("specific_objectives") or [], start=1)
              if isinstance(o, dict)]
    lines += ["", str(objectives.get("alignment_check", "")), "",
              "## Methodology", "",
              f"{method.get('recommended_methodology', '')} Type: "
              f"{method.get('methodology_type', 'mixed')}.", "",
              str(method.get("timeline_fit", "")), "",
              "## Data Collection", "",
              *[f"- {t}" for t in data.get("collection_techniques") or []],
              f"- Estimated sample size: {data.get('estimated_sample_size', NOT_STATED)}", "",
              "## Timeline", ""]
    lines += [f"- {phase.get('phase')}: {phase.get('weeks')} weeks"
              for phase in data.get("timeline_breakdown") or [] if isinstance(phase, dict)]
    lines += ["", "## References", ""]
    lines += [f"- [{p.get('citation_key')}] {p.get('title')} ({p.get('year') or 'n.d.'}). "
              f"{p.get('url') or ''}".rstrip() for p in papers] or [
        "None: no published sources could be retrieved."]
    scores = (f"Coherence: {_score(quality.get('coherence_score'))}/10; feasibility: "
              f"{_score(quality.get('feasibility_score'))}/10.")
    lines += ["", "## Quality Assessment", "", scores, "",
              *[f"- {r}" for r in quality.get("recommendations") or []], "",
              f"_{LABEL} Put together from the parts of the workflow._", ""]
    return "\n".join(lines)


# ---- small helpers -------------------------------------------------------------------------------


def _parts(text: str) -> dict[str, Any]:
    """`{context}`'s entries: `## <name>` then the entry's JSON (one line or laid out)."""
    found: dict[str, Any] = {}
    for heading in re.finditer(r"^## (\w+)\n", text, flags=re.MULTILINE):
        try:
            found[heading.group(1)] = json.JSONDecoder().raw_decode(text, heading.end())[0]
        except ValueError:
            continue
    return found


def _topic(request: str) -> str:
    """What a request is about: the words after its first "on", "about" or "into", up to a
    punctuation mark."""
    found = re.search(r"\b(?:on|about|into)\s+([^:;,.?!\n]+)", request, flags=re.I)
    return found.group(1).strip() if found else ""


def _query(request: str) -> str:
    """Search words for a request: its first three informative words (both services want
    every word of a query, so fewer words find more)."""
    words = [w for w in re.findall(r"[\w-]+", request.lower()) if w not in _STOP]
    return " ".join(words[:3]) or request


def _kind(profile: dict[str, Any]) -> str:
    said = " ".join(map(str, profile.get("constraints") or [])).lower()
    if "public data" in said or "travel" in said or "secondary" in said:
        return "quantitative"
    if "interview" in said:
        return "qualitative"
    return "mixed"


def _weeks(timeline: str) -> int:
    """The timeline in weeks (a month is 52/12 weeks); `DEFAULT_WEEKS` when not stated."""
    found = DURATION.search(timeline)
    if found is None:
        return DEFAULT_WEEKS
    number = found.group(1).lower()
    amount = {"a": 1.0, "an": 1.0, "half a": 0.5}.get(number) or float(
        NUMBERS.get(number, 0) or number)
    unit = found.group(2).lower()
    per = {"week": 1.0, "mont": 52 / 12, "seme": 26.0}.get(unit[:4], 52.0)
    return max(1, round(amount * per))


def _split(total: int) -> list[int]:
    """`total` weeks over the phases, in proportion, adding up exactly."""
    weeks = [round(total * share) for _, share in _PHASES[:-1]]
    while sum(weeks) > total:
        weeks[weeks.index(max(weeks))] -= 1
    return [*weeks, total - sum(weeks)]


def _phase_ends(total: int) -> list[int]:
    ends, at = [], 0
    for weeks in _split(total):
        at += weeks
        ends.append(at)
    return ends


def _score(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "?"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json(text: str) -> Any:
    """The JSON value `text` starts with, else the first JSON object in it, else None."""
    text = text.strip()
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except ValueError:
        start = text.find("{")
        try:
            return json.JSONDecoder().raw_decode(text, start)[0] if start >= 0 else None
        except ValueError:
            return None
