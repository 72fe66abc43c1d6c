"""Literature search: arXiv's API (Atom XML) and Crossref's REST API (JSON), for
`shoal mcp literature`.

`Literature.search` asks one or both services and merges their papers (one per DOI, arXiv id or
normalised title); `Literature.paper` fetches one by DOI or arXiv id. Every answer is kept on
disk under `cache_dir`, named by the request, so an attempt that asks again reads it instead of
asking the service. Requests to one service are spaced `interval` seconds apart (arXiv asks for
3 s); a 429, a 5xx or a network error is retried with backoff, honouring `Retry-After`. A
service that cannot be reached is an `Unavailable` naming it; the parsers are pure functions
over the payloads.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import re
import time
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from shoal.config import Settings
from shoal.errors import InvalidInput, NotFound, Unavailable

_ATOM = {"atom": "http://www.w3.org/2005/Atom", "arxiv": "http://arxiv.org/schemas/atom"}
_ARXIV_ID = re.compile(r"^(?:arxiv:|https?://arxiv\.org/(?:abs|pdf)/)?"
                       r"(\d{4}\.\d{4,5}|[a-z-]+(?:\.[A-Z]{2})?/\d{7})(v\d+)?$", re.I)
_DOI = re.compile(r"^(?:doi:|https?://(?:dx\.)?doi\.org/)?(10\.\d{4,9}/\S+)$", re.I)
_STOP = frozenset({"a", "an", "the", "on", "of", "in", "for", "and", "to", "with", "is", "are"})


class Service(StrEnum):
    """A literature API this module asks."""

    arxiv = "arxiv"
    crossref = "crossref"

    @property
    def label(self) -> str:
        """The service's own spelling of its name."""
        return "arXiv" if self is Service.arxiv else "Crossref"


@dataclass(frozen=True, slots=True)
class Paper:
    """One paper as found: what a citation needs, and the abstract when the service has one."""

    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    abstract: str = ""
    doi: str | None = None
    arxiv_id: str | None = None
    url: str = ""
    venue: str = ""
    source: Service = Service.arxiv

    @property
    def citation_key(self) -> str:
        """A BibTeX-style key that stays the same for the same paper (`vaswani2017attention`)."""
        family = self.authors[0].split()[-1] if self.authors else "anon"
        words = [w for w in _ascii_words(self.title) if w not in _STOP]
        return f"{''.join(_ascii_words(family)) or 'anon'}{self.year or 'nd'}" \
               f"{words[0] if words else 'untitled'}"

    def keys(self) -> set[str]:
        """What names this paper across services: its DOI, arXiv id and normalised title."""
        out = {f"title:{' '.join(_ascii_words(self.title))}"}
        if self.doi:
            out.add(f"doi:{self.doi.lower()}")
        if self.arxiv_id:
            out.add(f"arxiv:{self.arxiv_id.lower()}")
        return out

    def as_json(self) -> dict[str, Any]:
        """The paper as a tool answers it."""
        return {**asdict(self), "authors": list(self.authors), "source": str(self.source),
                "citation_key": self.citation_key}


def _ascii_words(text: str) -> list[str]:
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return re.findall(r"[a-z0-9]+", plain)


def _clean(text: str | None) -> str:
    return " ".join((text or "").split())


# ---- parsers -----------------------------------------------------------------------------


def parse_arxiv(feed: str) -> list[Paper]:
    """The papers of an arXiv Atom feed. A document type declaration is refused (a feed has
    none), so no entity, external or nested, is ever expanded."""
    if "<!DOCTYPE" in feed.upper() or "<!ENTITY" in feed.upper():
        raise InvalidInput("arXiv answered XML with a document type declaration; refused.")
    root = ET.fromstring(feed)
    return [paper for entry in root.findall("atom:entry", _ATOM)
            if (paper := _arxiv_entry(entry)) is not None]


def _arxiv_entry(entry: ET.Element) -> Paper | None:
    url = _clean(entry.findtext("atom:id", "", _ATOM))
    found = _ARXIV_ID.match(url)
    if found is None:  # arXiv reports a bad query as an entry whose id is an error page
        return None
    published = _clean(entry.findtext("atom:published", "", _ATOM))
    pages = [link.get("href", "") for link in entry.findall("atom:link", _ATOM)
             if link.get("rel") == "alternate"]
    return Paper(
        title=_clean(entry.findtext("atom:title", "", _ATOM)),
        authors=tuple(_clean(a.findtext("atom:name", "", _ATOM))
                      for a in entry.findall("atom:author", _ATOM)),
        year=int(published[:4]) if published[:4].isdigit() else None,
        abstract=_clean(entry.findtext("atom:summary", "", _ATOM)),
        doi=_clean(entry.findtext("arxiv:doi", "", _ATOM)) or None,
        arxiv_id=found.group(1), url=pages[0] if pages else url,
        venue=_clean(entry.findtext("arxiv:journal_ref", "", _ATOM)) or "arXiv",
        source=Service.arxiv)


def parse_crossref_work(work: dict[str, Any]) -> Paper:
    """A paper from one Crossref work (`message` of `/works/{doi}`, or an item of a search)."""
    authors = tuple(_clean(f"{a.get('given', '')} {a.get('family', '')}") or a.get("name", "")
                    for a in work.get("author", []))
    parts = (work.get("issued") or work.get("published") or {}).get("date-parts") or [[None]]
    year = parts[0][0] if parts and parts[0] and isinstance(parts[0][0], int) else None
    doi = work.get("DOI") or None
    abstract = re.sub(r"<[^>]+>", " ", work.get("abstract", ""))  # Crossref's is JATS XML
    return Paper(title=_clean(" ".join(work.get("title") or [])), authors=authors, year=year,
                 abstract=_clean(abstract), doi=doi,
                 url=work.get("URL") or (f"https://doi.org/{doi}" if doi else ""),
                 venue=_clean(" ".join(work.get("container-title") or [])),
                 source=Service.crossref)


def parse_crossref(body: dict[str, Any]) -> list[Paper]:
    """The papers of a Crossref `/works?query=` answer."""
    return [parse_crossref_work(item) for item in body.get("message", {}).get("items", [])]


def merge(*found: Iterable[Paper]) -> list[Paper]:
    """The papers once each, in order: one sharing a DOI, arXiv id or normalised title with an
    earlier one fills in what that one lacks (an abstract, a DOI, a venue) instead."""
    out: list[Paper] = []
    for paper in (p for papers in found for p in papers):
        same = next((i for i, seen in enumerate(out) if seen.keys() & paper.keys()), None)
        if same is None:
            out.append(paper)
            continue
        seen = out[same]
        out[same] = replace(seen, abstract=seen.abstract or paper.abstract,
                            doi=seen.doi or paper.doi, arxiv_id=seen.arxiv_id or paper.arxiv_id,
                            venue=seen.venue if seen.venue not in ("", "arXiv") else
                            paper.venue or seen.venue, year=seen.year or paper.year)
    return out


def paper_id(text: str) -> tuple[Service, str]:
    """Which service holds the paper `text` names (a DOI or an arXiv id, bare, prefixed or as
    a URL), and its bare id; `InvalidInput` when it is neither."""
    text = text.strip()
    if found := _DOI.match(text):
        return Service.crossref, found.group(1)
    if found := _ARXIV_ID.match(text):
        return Service.arxiv, found.group(1) + (found.group(2) or "")
    raise InvalidInput(f"'{text}' is neither a DOI (10.xxxx/…) nor an arXiv id (2101.00001); "
                       "pass one of those, as search_papers returns them.")


# ---- the client --------------------------------------------------------------------------


@dataclass
class Literature:
    """A client of arXiv and Crossref that caches, spaces and retries its requests."""

    arxiv_url: str
    crossref_url: str
    cache_dir: Path
    user_agent: str = "Shoal/1 (literature search)"
    interval: float = 3.0
    timeout: float = 20.0
    max_retries: int = 3
    retry_base: float = 1.0
    retry_cap: float = 30.0

    def __post_init__(self) -> None:
        self._last: dict[Service, float] = {}
        self._locks = {service: asyncio.Lock() for service in Service}

    async def search(self, query: str, limit: int, services: Iterable[Service]
                     ) -> tuple[list[Paper], dict[Service, str]]:
        """Papers for `query` from `services`, merged (arXiv's first), at most `limit`, and
        what went wrong with each service that could not answer."""
        asked = list(services)
        results: dict[Service, list[Paper]] = {}
        failed: dict[Service, str] = {}

        async def ask(service: Service) -> None:
            try:
                results[service] = await self._search(service, query, limit)
            except Unavailable as exc:
                failed[service] = exc.message

        async with asyncio.TaskGroup() as group:
            for service in asked:
                group.create_task(ask(service))
        return merge(*(results.get(s, []) for s in Service))[:limit], failed

    async def paper(self, text: str) -> Paper:
        """The paper a DOI or arXiv id names; `NotFound` when the service has none."""
        service, bare = paper_id(text)
        if service is Service.crossref:
            body = await self._get(service, f"{self.crossref_url.rstrip('/')}/works/"
                                            f"{quote(bare, safe='/')}", missing_ok=True)
            if body is not None:
                return parse_crossref_work(json.loads(body).get("message", {}))
        else:
            body = await self._get(service, f"{self.arxiv_url}?{urlencode({'id_list': bare})}")
            if papers := parse_arxiv(body or ""):
                return papers[0]
        raise NotFound(f"{service.label} has no paper '{bare}'. Check the id, or find the paper "
                       "with search_papers.")

    async def _search(self, service: Service, query: str, limit: int) -> list[Paper]:
        if service is Service.arxiv:
            terms = " AND ".join(f"all:{word}" for word in query.split())
            url = f"{self.arxiv_url}?{urlencode({'search_query': terms, 'max_results': limit})}"
            return parse_arxiv(await self._get(service, url) or "")
        url = f"{self.crossref_url.rstrip('/')}/works?" \
              f"{urlencode({'query': query, 'rows': limit})}"
        return parse_crossref(json.loads(await self._get(service, url) or "{}"))

    async def _get(self, service: Service, url: str, *, missing_ok: bool = False) -> str | None:
        """The body at `url`, from the cache if it was asked before, else from the service
        (None for a 404 when `missing_ok`, which is not cached)."""
        cached = self.cache_dir / f"{hashlib.sha256(url.encode()).hexdigest()[:32]}.json"
        if cached.is_file():
            return str(json.loads(cached.read_text(encoding="utf-8"))["body"])
        response = await self._fetch(service, url)
        if response.status_code == 404 and missing_ok:
            return None
        if response.is_error:
            raise Unavailable(f"{service.label} answered {response.status_code} to {url}. "
                              "Proceed without sources, and say so.",
                              details={"service": str(service)})
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps({"url": url, "body": response.text}), encoding="utf-8")
        return response.text

    async def _fetch(self, service: Service, url: str) -> httpx.Response:
        """One request, spaced from the last to this service, retried on 429, 5xx or a network
        error; `Unavailable` naming the service when it never answers."""
        headers = {"User-Agent": self.user_agent}
        problem = ""
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers) as client:
            for attempt in range(self.max_retries + 1):
                wait = 0.0
                async with self._locks[service]:
                    await self._space(service)
                    try:
                        response = await client.get(url)
                    except httpx.TransportError as exc:
                        problem = f"{type(exc).__name__}: {exc or 'no answer'}"
                    else:
                        if response.status_code != 429 and response.status_code < 500:
                            return response
                        problem = f"HTTP {response.status_code}"
                        wait = retry_after(response.headers.get("retry-after")) or 0.0
                if attempt < self.max_retries:
                    delay = wait or self.retry_base * 2 ** attempt
                    if delay > self.retry_cap:
                        break
                    await asyncio.sleep(delay)
        raise Unavailable(f"{service.label} ({url.split('?')[0]}) could not be reached "
                          f"({problem}). Proceed without sources from it, and say so in your "
                          "answer.", details={"service": str(service)})

    async def _space(self, service: Service) -> None:
        """Wait until `interval` has passed since the last request to `service` (call with its
        lock held)."""
        due = self._last.get(service, -self.interval) + self.interval
        if (now := time.monotonic()) < due:
            await asyncio.sleep(due - now)
        self._last[service] = time.monotonic()


def retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds (a number of seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def literature_from_settings(settings: Settings, cache_dir: Path) -> Literature:
    """The client the settings describe, caching under `cache_dir`."""
    agent = "Shoal/1 (literature search"
    agent += f"; mailto:{settings.literature_mailto})" if settings.literature_mailto else ")"
    return Literature(arxiv_url=settings.literature_arxiv_url,
                      crossref_url=settings.literature_crossref_url, cache_dir=cache_dir,
                      user_agent=agent, interval=settings.literature_interval,
                      timeout=settings.literature_timeout,
                      max_retries=settings.literature_max_retries,
                      retry_base=settings.literature_retry_base,
                      retry_cap=settings.literature_retry_cap)
