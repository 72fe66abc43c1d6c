"""A model's judgement of each answer against the gold one, shown apart from the code's figures.

`Judge` asks an OpenAI-compatible chat endpoint (the one `SHOAL_OPENAI_COMPAT_BASE_URL` names,
or any other) one question per answerable part: the part, its gold answer and the report; it
answers `{"verdict": "correct" | "partial" | "wrong" | "missing"}`, scored 1, 0.5, 0 and 0. An
answer without a verdict, or a refused request, is no judgement (None), never a score.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from shoal.engine.answers import extract_json
from shoal.evals.research.goldset import Part

VERDICTS = {"correct": 1.0, "partial": 0.5, "wrong": 0.0, "missing": 0.0}
REPORT_CHARS = 24_000  # of the report shown to the judge

SYSTEM = ("You grade one part of a research report against a gold answer written by someone "
          "who read the sources. Judge only whether the report answers that part as the gold "
          "answer does: correct (the same facts), partial (some of them, or vaguer), wrong "
          "(contradicts them) or missing (the report does not answer this part). Reply with "
          'JSON only: {"verdict": "correct" | "partial" | "wrong" | "missing", "why": "<one '
          'sentence>"}')


@dataclass(frozen=True, slots=True)
class Judge:
    """A chat model that judges answers (`base_url` ends in `/v1`)."""

    base_url: str
    model: str
    api_key: str = "sk-local"
    timeout: float = 120.0

    async def verdicts(self, parts: list[Part], report: str) -> list[float | None]:
        """Each answerable part's score by the judge (None when it gave no verdict)."""
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            return [await self._verdict(client, part, report) for part in parts]

    async def _verdict(self, client: httpx.AsyncClient, part: Part,
                       report: str) -> float | None:
        prompt = (f"Part of the question: {part.question}\nGold answer: {part.answer}\n\n"
                  f"The report:\n<report>\n{report[:REPORT_CHARS]}\n</report>")
        try:
            resp = await client.post(
                f"{self.base_url.rstrip('/')}/chat/completions",
                headers={"Authorization": f"Bearer {self.api_key}"},
                json={"model": self.model, "temperature": 0, "messages": [
                    {"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]})
            resp.raise_for_status()
            content = resp.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None
        found = extract_json(str(content), prefer=lambda v: isinstance(v, dict))
        verdict = found.get("verdict") if isinstance(found, dict) else None
        return VERDICTS.get(str(verdict).strip().lower()) if verdict is not None else None


def described(judge: Judge | None) -> str:
    """The judge as the results name it."""
    return f"{judge.model} at {judge.base_url}" if judge else "none"

