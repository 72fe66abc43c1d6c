"""A question about the data sources, turned into SQL by the configured chat model: what
`query_data(question=…)` runs (read-only, as any SQL it is given: `shoal.retrieval.sql`)."""

from __future__ import annotations

import re

from shoal.retrieval.extraction import ChatExtractor

SQL_ROLE = "Role: sql_writer"
"""The line that opens the prompt (the demo model answers by it)."""

PROMPT = f"""{SQL_ROLE}
You write one read-only SQL query in DuckDB's dialect (one SELECT, or WITH … SELECT) that
answers a question from the tables described below. Use only those tables and columns, quoting
a table name as it is written there. Answer with the SQL alone: no prose, no code fence."""

_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)


async def write_sql(chat: ChatExtractor, question: str, tables: str) -> str:
    """The model's SQL for `question` over `tables` (the data schema, as `data_schema` says
    it), without a fence or a trailing semicolon."""
    async with chat.client() as client:
        answer = (await chat.complete(client, PROMPT,
                                      f"Tables:\n{tables}\n\nQuestion: {question}")).strip()
    if fenced := _FENCE.match(answer):
        answer = fenced.group(1).strip()
    return answer.rstrip(";").strip()
