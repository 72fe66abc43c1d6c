"""The `citations` tool: Shoal's citation check of a report, in code, on the worker that holds
the task's sources (a `check` subtask: `workflows/checks.py` asks for it, `retrieval/citecheck.py`
does it).

Its instructions are JSON: the report's file name (handed in from the run that wrote it), the
question's parts as the engine counted them, and the line a partial report begins with. It
resolves each citation of the report's Sources against the task's `sources/` (passages, by id or
label, through the worker's search indexes; SQL, run again read-only over its data files),
checks every cited sentence, writes the checked report back under the same name (so it is the
task's newest version of the result) and answers JSON: the figures, the sentences that failed,
and what each source cites (for the dashboard to show). No model is asked anything.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shoal.artifacts.paths import resolve_inside
from shoal.config import Settings
from shoal.errors import ShoalError, UnsafePath
from shoal.retrieval import answers, citecheck
from shoal.retrieval.passages import SourcePassages, quote_in
from shoal.tools.base import Probe, ToolOutcome, ToolRun


class CitationsTool:
    """Checks a report's citations against the task's sources: code, not a model."""

    name = "citations"
    local = True
    version = "1"

    def __init__(self, settings: Settings) -> None:
        # the worker's search indexes, where `shoal mcp sources` keeps them (mcp_config.launch)
        self._index_dir = settings.data_dir / "index"

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Check the report the instructions name; write it back checked; answer the figures."""
        try:
            # the JSON first: the dispatcher may add a note on the task's files after it
            told, _ = json.JSONDecoder().raw_decode(run.instructions.lstrip())
            target = resolve_inside(run.workspace, str(told["file"]))
            markdown = await asyncio.to_thread(target.read_text, encoding="utf-8")
        except (ValueError, KeyError, TypeError, OSError, UnsafePath) as exc:
            return ToolOutcome(status="failed", error=f"The citation check could not read the "
                                                      f"report it was given: {exc}")
        sources = run.workspace / "sources"
        cited = await _cited(citecheck.sources_of(markdown), sources, self._index_dir)
        checked = await asyncio.to_thread(
            citecheck.check_report, markdown, resolve=cited.passage, rerun=cited.rows,
            quote_in=lambda quote, text, fuzzy: quote_in(quote, text, fuzzy=fuzzy),
            parts=told.get("questions"), first=told.get("partial"))
        await asyncio.to_thread(target.write_text, checked.report, encoding="utf-8")
        figures = checked.figures()
        run.log(f"citations: {figures['supported']} of {figures['cited']} cited sentence(s) "
                f"supported, {figures['resolved']} of {figures['citations']} citation(s) "
                "resolve")
        removed = [v.wire() for v in checked.failed]
        return ToolOutcome(status="succeeded", output=json.dumps({
            "check": "citations", **figures, "failed": removed, "removed": removed,
            "passages": {str(n): p for n, p in checked.passages.items()}},
            ensure_ascii=False, default=str))


class _Cited:
    """What each source of a report resolved to, looked up once before the check runs."""

    def __init__(self) -> None:
        self.passages: dict[str, citecheck.Passage] = {}
        self.queries: dict[str, list[dict[str, Any]]] = {}

    def passage(self, ref: str) -> citecheck.Passage | None:
        return self.passages.get(ref)

    def rows(self, sql: str) -> Sequence[Mapping[str, Any]] | None:
        return self.queries.get(sql)


async def _cited(sources: Sequence[citecheck.Source], folder: Path, index_dir: Path) -> _Cited:
    found = _Cited()
    refs = [s.ref for s in sources if s.sql is None]
    present: bool = await asyncio.to_thread(folder.is_dir)
    if refs and present:
        opened = await SourcePassages.open(folder, index_dir)
        try:
            for ref in dict.fromkeys(refs):
                passage = await opened.resolve(ref)
                if passage is not None:
                    found.passages[ref] = citecheck.Passage(passage.label, passage.text,
                                                            fuzzy=passage.fuzzy)
        finally:
            opened.close()
    for sql in dict.fromkeys(s.sql for s in sources if s.sql is not None):
        try:
            result = await answers.rerun(folder, sql)
        except ShoalError:
            continue  # does not run over the data files: the citation does not resolve
        found.queries[sql] = [dict(zip(result.columns, row, strict=False))
                              for row in result.rows]
    return found


async def probe(settings: Settings) -> Probe:
    """Always there: Shoal's own code."""
    return Probe("citations", True, version=CitationsTool.version, local=True,
                 detail="built in (checks a report's citations against the task's sources)")


def create(settings: Settings, probe: Probe) -> CitationsTool:
    return CitationsTool(settings)
