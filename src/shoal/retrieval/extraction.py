"""Entities and relations out of passages: what `shoal.retrieval.graph` is built from.

Two extractors stand behind `Extractor`, each answering one `Extraction` (or `Skipped`) per
passage:

- `ChatExtractor`, when a chat model is configured (`extractor_from_settings`): the
  OpenAI-compatible chat completions endpoint, asked one passage per request (so every relation
  is traced to its passage and a bad answer costs one passage), a few requests in flight, for
  strict JSON `{"entities": [...], "relations": [{"subject", "relation", "object"}]}`
  (`parse_answer`). An answer that is not that is `Skipped`, with the reason; an endpoint that
  cannot answer, after retries for what retrying fixes, is a `ToolError`;
- `HEURISTIC`, with no model (`extract_heuristic`, pure): capitalised multi-word names and
  acronyms are the entities, and two entities in one sentence are related by `co_occurs`.

Entities are matched by `entity_key`: case, white space and quotes around a name do not count.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shoal.config import Settings
from shoal.errors import ToolError

CO_OCCURS = "co_occurs"
EXTRACTOR_ROLE = "Role: extractor"
"""The line that opens the extraction prompt (the demo model answers by it)."""

NO_CHAT_MODEL = ("No chat model is configured, so the graph was extracted without one "
                 "(heuristic): capitalised names and acronyms are its entities, related by "
                 "co_occurs when they share a sentence. To extract it with a model, set "
                 "SHOAL_OPENAI_COMPAT_BASE_URL (and SHOAL_OPENAI_COMPAT_MODEL).")
"""Why the graph is heuristic when the worker has no chat model."""

PROMPT = f"""{EXTRACTOR_ROLE}
You extract a knowledge graph from one passage of a document. Name the entities the passage
mentions (people, organisations, places, works, events, products, named concepts) as the
passage writes them, and the relations it states between them, each as a short verb phrase in
lower case ("built", "located in", "part of"). Use only what the passage says.
Answer with one JSON object and nothing else:
{{"entities": ["..."], "relations": [{{"subject": "...", "relation": "...", "object": "..."}}]}}
"""


class ExtractionMode(StrEnum):
    """What extracts entities and relations: a chat model, or the heuristic without one."""

    model = "model"
    heuristic = "heuristic"


@dataclass(frozen=True, slots=True)
class Triple:
    """A relation a passage states: subject, relation, object."""

    subject: str
    relation: str
    object: str


@dataclass(frozen=True, slots=True)
class Extraction:
    """What one passage names: its entities and the relations between them."""

    entities: tuple[str, ...]
    relations: tuple[Triple, ...]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A passage left out of the graph, and why (the model's answer was unusable)."""

    reason: str


class Extractor(Protocol):
    """What builds a graph from passages."""

    @property
    def key(self) -> str:
        """Names the graphs it makes: a graph file is reused only by the same extractor."""
        ...

    @property
    def mode(self) -> ExtractionMode:
        """Which kind of extractor it is: what a result says ran."""
        ...

    async def extract(self, texts: Sequence[str]) -> list[Extraction | Skipped]:
        """One result per passage, in order; `ToolError` when it cannot run at all."""
        ...


# ---- names ---------------------------------------------------------------------------------

_AROUND = "\"'\u201c\u201d\u2018\u2019.,;:()[]"  # quotes and punctuation around a name


def entity_key(name: str) -> str:
    """How an entity is matched: case and white space do not count, nor quotes around it."""
    return display_name(name).casefold()


def display_name(name: str) -> str:
    """`name` as a graph shows it: white space collapsed, quotes around it dropped."""
    return " ".join(name.split()).strip(_AROUND)


# ---- the heuristic extractor (pure) ------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\s*\n\s*")
_TOKEN = re.compile(r"[^\W_](?:[\w'\u2019-]*\w)?")
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]{1,7}")
_ROMAN = re.compile(r"[IVXLCDM]+")
_POSSESSIVE = re.compile(r"['\u2019]s$")
_NOT_ACRONYMS = frozenset({"OK", "AM", "PM", "TODO", "NB", "PS", "FAQ", "ID"})
# Lower-case words that may sit inside a name ("Ministry of Transport", "Ludwig van Beethoven").
_CONNECTORS = frozenset({"of", "de", "van", "von", "der", "du", "da", "del", "di", "la", "le"})
# Words capitalised because they begin a sentence, not a name: dropped from a name's front.
_LEADING = frozenset({
    "a", "about", "after", "all", "also", "although", "an", "and", "as", "at", "because",
    "before", "between", "both", "but", "by", "during", "each", "every", "for", "from", "he",
    "her", "here", "his", "however", "if", "in", "into", "it", "its", "many", "most", "my", "no",
    "not", "of", "on", "one", "or", "our", "over", "she", "since", "so", "some", "that", "the",
    "their", "then", "there", "these", "they", "this", "those", "through", "to", "today", "two",
    "under", "until", "we", "when", "where", "while", "with", "without", "yesterday", "your"})
MAX_ENTITIES_PER_SENTENCE = 12


def extract_heuristic(text: str) -> Extraction:
    """The entities of `text` (capitalised multi-word names and acronyms, in order of first
    mention) and a `co_occurs` relation between every two that share a sentence."""
    entities: dict[str, str] = {}
    relations: dict[tuple[str, str], Triple] = {}
    for sentence in _SENTENCE.split(text):
        named: dict[str, str] = {}
        for name in _names(sentence):
            named.setdefault(entity_key(name), name)
            entities.setdefault(entity_key(name), name)
        keys = sorted(named)[:MAX_ENTITIES_PER_SENTENCE]
        for i, first in enumerate(keys):
            for second in keys[i + 1:]:
                relations.setdefault((first, second),
                                     Triple(named[first], CO_OCCURS, named[second]))
    return Extraction(tuple(entities.values()), tuple(relations.values()))


def _names(sentence: str) -> list[str]:
    """The names in one sentence: runs of capitalised words (lower-case connectors inside, a
    number or a possessive at the end) with two words or more once leading sentence words are
    dropped, and acronyms standing alone."""
    names: list[str] = []
    run: list[str] = []
    end = -1
    for match in _TOKEN.finditer(sentence):
        word = match.group()
        if run and not sentence[end:match.start()].isspace():
            names.extend(_name_of(run))
            run = []
        end = match.end()
        if word[0].isupper() or (run and word in _CONNECTORS):
            run.append(word)
            if not _POSSESSIVE.search(word):
                continue  # the name may go on ("Old Market's": it ends there)
        elif run and word.isdigit() and run[-1][0].isupper():
            run.append(word)  # "Pier 3": a number ends a name
        names.extend(_name_of(run))
        run = []
    names.extend(_name_of(run))
    return names


def _name_of(run: list[str]) -> list[str]:
    while run and run[0].lower() in _LEADING:
        run = run[1:]
    while run and run[-1] in _CONNECTORS:
        run = run[:-1]
    if run:
        run = [*run[:-1], _POSSESSIVE.sub("", run[-1])]
    if len(run) >= 2:
        return [" ".join(run)]
    if len(run) == 1 and _is_acronym(run[0]):
        return run
    return []


def _is_acronym(word: str) -> bool:
    return (_ACRONYM.fullmatch(word) is not None and word not in _NOT_ACRONYMS
            and _ROMAN.fullmatch(word) is None and sum(c.isalpha() for c in word) >= 2)


class HeuristicExtractor:
    """The extractor without a model (`extract_heuristic` on every passage)."""

    key = "heuristic"
    mode = ExtractionMode.heuristic

    async def extract(self, texts: Sequence[str]) -> list[Extraction | Skipped]:
        """`extract_heuristic` of each passage."""
        return await asyncio.to_thread(lambda: [extract_heuristic(t) for t in texts])


HEURISTIC = HeuristicExtractor()


# ---- the model extractor -------------------------------------------------------------------

_Text = Annotated[str, Field(min_length=1, max_length=200)]


class _Relation(BaseModel):
    model_config = ConfigDict(strict=True, str_strip_whitespace=True)

    subject: _Text
    relation: Annotated[str, Field(min_length=1, max_length=80)]
    object: _Text


class _Answer(BaseModel):
    """The model's answer for one passage, as the prompt asks for it."""

    model_config = ConfigDict(strict=True, str_strip_whitespace=True)

    entities: list[_Text] = Field(max_length=200)
    relations: list[_Relation] = Field(max_length=400)


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_answer(content: str) -> Extraction | Skipped:
    """The model's answer for one passage, or why it is skipped. A ```json fence around the
    object is tolerated; anything else that is not the asked-for JSON is not."""
    fenced = _FENCE.match(content.strip())
    try:
        answer = _Answer.model_validate_json(fenced.group(1) if fenced else content)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the answer"
        return Skipped(f"{where}: {first['msg']}")
    return Extraction(tuple(answer.entities), tuple(
        Triple(r.subject, r.relation, r.object) for r in answer.relations))


@dataclass(frozen=True, slots=True)
class ChatExtractor:
    """An OpenAI-compatible chat completions endpoint asked for each passage's entities and
    relations: its base URL (`…/v1`), model and key, with timeouts and retries."""

    base_url: str
    model: str
    api_key: str | None = None
    concurrency: int = 4
    timeout: float = 120.0
    connect_timeout: float = 10.0
    max_retries: int = 4
    retry_base: float = 1.0
    retry_cap: float = 60.0

    @property
    def key(self) -> str:
        """`chat:<model>`: graphs of one model."""
        return f"chat:{self.model}"

    @property
    def mode(self) -> ExtractionMode:
        """Always `model`."""
        return ExtractionMode.model

    @property
    def url(self) -> str:
        """Where the requests go."""
        return self.base_url.rstrip("/") + "/chat/completions"

    async def extract(self, texts: Sequence[str]) -> list[Extraction | Skipped]:
        """Each passage's answer, parsed (unusable ones `Skipped`); `ToolError` saying what
        went wrong when the endpoint cannot answer (after retries, for what retrying fixes)."""
        results: list[Extraction | Skipped] = [Skipped("not asked")] * len(texts)
        gate = asyncio.Semaphore(self.concurrency)
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:

            async def run(index: int) -> None:
                async with gate:
                    results[index] = parse_answer(await self._ask(client, texts[index]))

            try:
                async with asyncio.TaskGroup() as group:
                    for index in range(len(texts)):
                        group.create_task(run(index))
            except ExceptionGroup as failed:  # the first failure says it for all
                raise failed.exceptions[0] from None
        return results

    async def _ask(self, client: httpx.AsyncClient, text: str) -> str:
        return await self.complete(client, PROMPT, f"Passage:\n{text}")

    def client(self) -> httpx.AsyncClient:
        """An HTTP client for `complete`, with this endpoint's key and timeouts."""
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout,
                                                       connect=self.connect_timeout),
                                 headers=headers)

    async def complete(self, client: httpx.AsyncClient, system: str, user: str) -> str:
        """The model's answer to `system` and `user` (temperature 0), retried for what
        retrying fixes; `ToolError` saying what went wrong when it cannot answer."""
        body = {"model": self.model, "temperature": 0, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": user}]}
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await client.post(self.url, json=body)
            except httpx.TransportError as exc:
                if last:
                    raise ToolError(f"The chat endpoint {self.url} could not be reached "
                                    f"({type(exc).__name__}: {exc}). Check that the server "
                                    "runs and SHOAL_OPENAI_COMPAT_BASE_URL is right.") from exc
            else:
                if response.status_code < 400:
                    return _content(response)
                if last or not (response.status_code in (408, 429)
                                or response.status_code >= 500):
                    raise ToolError(f"The chat endpoint {self.url} answered "
                                    f"{response.status_code}: {response.text.strip()[:300]}. "
                                    "Check SHOAL_OPENAI_COMPAT_MODEL and the key.")
            await asyncio.sleep(min(self.retry_base * 2.0 ** attempt, self.retry_cap)
                                * random.uniform(0.5, 1.0))  # jitter spreads retries
        raise AssertionError("unreachable: the last attempt returns or raises")


def _content(response: httpx.Response) -> str:
    """The answer's text; an empty one (a body of another shape) is skipped as bad JSON."""
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def extractor_from_settings(settings: Settings) -> ChatExtractor | None:
    """The chat model the settings name (the openai_compat provider's base URL, model and
    key), or None when no base URL is set: the graph is then heuristic (`NO_CHAT_MODEL`)."""
    if not settings.openai_compat_base_url:
        return None
    return ChatExtractor(base_url=settings.openai_compat_base_url,
                         model=settings.openai_compat_model,
                         api_key=settings.openai_compat_api_key,
                         max_retries=settings.model_max_retries,
                         retry_base=settings.model_retry_base, retry_cap=settings.model_retry_cap)
