"""A fake of arXiv's API and Crossref's REST API, serving their real payload shapes over a small
fixed catalogue, deterministic.

`create_literature_app()` answers `GET /arxiv/api/query` (`search_query=all:word AND …` or
`id_list=`, an Atom feed) and `GET /crossref/works?query=…&rows=…` and `/crossref/works/{doi}`
(JSON). The fake model server mounts it at `/literature`, so the demo's base URLs are
`<root>/literature/arxiv/api/query` and `<root>/literature/crossref`. `app.state.log` keeps every
request with the time it came (`time.monotonic()`); `script_fault` (or `POST /_fake/fault` with
`{"service", "status", "retry_after", "times"}`) makes the next requests to a service fail.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from xml.sax.saxutils import escape

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(frozen=True, slots=True)
class FakePaper:
    """A paper of the fake catalogue: on arXiv when it has an `arxiv_id`, on Crossref when it
    has a `doi` (and `crossref` is true)."""

    title: str
    authors: tuple[tuple[str, str], ...]  # (given, family)
    year: int
    abstract: str
    arxiv_id: str | None = None
    doi: str | None = None
    venue: str = ""
    crossref: bool = True


CATALOGUE = (
    FakePaper("Tidal Energy Harvesting in Shallow Estuaries",
              (("Mara", "Okafor"), ("Lin", "Chen")), 2021,
              "We model tidal energy harvesting in shallow estuaries and measure turbine yield.",
              arxiv_id="2103.01234", doi="10.5555/tidal.2021.7", venue="Journal of Ocean Energy"),
    FakePaper("Estuary Sediment and Turbine Wear", (("Jonas", "Weber"),), 2019,
              "Sediment in estuaries wears tidal turbine blades; we quantify the loss.",
              arxiv_id="1907.04567"),
    FakePaper("Estuary Sediment and Turbine Wear", (("Jonas", "Weber"),), 2020,
              "", doi="10.5555/wear.2020.3", venue="Renewable Systems Letters"),
    FakePaper("A Survey of Tidal Turbine Control", (("Ana", "Souza"),), 2018,
              "We survey control strategies for tidal turbines.", arxiv_id="1802.09999"),
    FakePaper("Community Ownership of Tidal Energy Projects", (("Priya", "Nair"),), 2022,
              "Interviews with estuary communities on owning tidal energy projects.",
              doi="10.5555/community.2022.1", venue="Energy Policy Review"),
    FakePaper("Street Trees and Urban Heat Across City Districts",
              (("Elena", "Marsh"), ("Tomas", "Berg")), 2020,
              "We log air temperature under street trees in twelve districts: trees cool "
              "streets by up to 2.1 K on summer afternoons, most where canopy is densest.",
              arxiv_id="2004.05678", doi="10.5555/trees.2020.4", venue="Urban Climate Letters"),
    FakePaper("Canopy Cover and Neighbourhood Cooling", (("Aiko", "Tanaka"),), 2023,
              "Public canopy maps and satellite land-surface temperatures show street trees "
              "cool neighbourhoods unevenly; low-income districts gain least.",
              doi="10.5555/canopy.2023.2", venue="Journal of Urban Ecology"),
)

_SERVICES = ("arxiv", "crossref")


def create_literature_app(catalogue: tuple[FakePaper, ...] = CATALOGUE) -> Starlette:
    """The fake arXiv and Crossref as one ASGI app; `app.state.log` holds every request."""
    app = Starlette(routes=[
        Route("/arxiv/api/query", _arxiv_query, methods=["GET"]),
        Route("/crossref/works", _crossref_search, methods=["GET"]),
        Route("/crossref/works/{doi:path}", _crossref_work, methods=["GET"]),
        Route("/_fake/fault", _fault, methods=["POST"]),
    ])
    app.state.catalogue = catalogue
    app.state.log = []
    app.state.faults = {service: [] for service in _SERVICES}
    return app


@dataclass(frozen=True, slots=True)
class LiteratureRequest:
    """One request the fake received: which service, its path and query, and when."""

    service: str
    path: str
    query: str
    at: float


def script_fault(app: Starlette, service: str, status: int, *, retry_after: str | None = None,
                 times: int = 1) -> None:
    """Make the next `times` requests to `service` answer `status` (with `Retry-After`)."""
    app.state.faults[service].extend([(status, retry_after)] * times)


def requests_to(app: Starlette, service: str) -> list[LiteratureRequest]:
    """The requests `service` received, in order."""
    return [r for r in app.state.log if r.service == service]


def _received(request: Request, service: str) -> Response | None:
    """Log the request; the scripted fault it meets, if any."""
    request.app.state.log.append(LiteratureRequest(service, request.url.path,
                                                   request.url.query, time.monotonic()))
    if faults := request.app.state.faults[service]:
        status, after = faults.pop(0)
        headers = {"Retry-After": after} if after is not None else {}
        return Response("scripted fault", status_code=status, headers=headers)
    return None


async def _fault(request: Request) -> Response:
    body = await request.json()
    script_fault(request.app, body["service"], int(body["status"]),
                 retry_after=body.get("retry_after"), times=int(body.get("times", 1)))
    return JSONResponse({"ok": True})


def _matches(paper: FakePaper, words: list[str]) -> bool:
    text = f"{paper.title} {paper.abstract}".lower()
    return bool(words) and all(word.lower() in text for word in words)


# ---- arXiv -------------------------------------------------------------------------------


async def _arxiv_query(request: Request) -> Response:
    if (fault := _received(request, "arxiv")) is not None:
        return fault
    papers = [p for p in request.app.state.catalogue if p.arxiv_id]
    if ids := request.query_params.get("id_list"):
        wanted = {i.split("v")[0] for i in ids.split(",")}
        found = [p for p in papers if p.arxiv_id in wanted]
    else:
        terms = request.query_params.get("search_query", "").split(" AND ")
        words = [t.removeprefix("all:") for t in terms if t.strip()]
        found = [p for p in papers if _matches(p, words)]
    found = found[:int(request.query_params.get("max_results", 10))]
    return Response(arxiv_feed(found), media_type="application/atom+xml")


def arxiv_feed(papers: list[FakePaper]) -> str:
    """An Atom feed as arXiv's API writes it."""
    entries = "".join(_arxiv_entry(p) for p in papers)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<feed xmlns="http://www.w3.org/2005/Atom" '
            'xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" '
            'xmlns:arxiv="http://arxiv.org/schemas/atom">'
            '<title type="html">ArXiv Query</title>'
            '<id>http://arxiv.org/api/fake</id><updated>2024-01-01T00:00:00-05:00</updated>'
            f'<opensearch:totalResults>{len(papers)}</opensearch:totalResults>'
            f'<opensearch:startIndex>0</opensearch:startIndex>{entries}</feed>')


def _arxiv_entry(paper: FakePaper) -> str:
    url = f"http://arxiv.org/abs/{paper.arxiv_id}v1"
    authors = "".join(f"<author><name>{escape(f'{given} {family}')}</name></author>"
                      for given, family in paper.authors)
    doi = f"<arxiv:doi>{paper.doi}</arxiv:doi>" if paper.doi else ""
    return (f"<entry><id>{url}</id>"
            f"<updated>{paper.year}-03-01T00:00:00Z</updated>"
            f"<published>{paper.year}-03-01T00:00:00Z</published>"
            f"<title>{escape(paper.title)}</title>"
            f"<summary>  {escape(paper.abstract)}\n</summary>{authors}{doi}"
            f'<link href="{url}" rel="alternate" type="text/html"/>'
            f'<link title="pdf" href="http://arxiv.org/pdf/{paper.arxiv_id}v1" '
            'rel="related" type="application/pdf"/>'
            '<arxiv:primary_category term="physics.ao-ph" scheme="http://arxiv.org/schemas/atom"/>'
            "</entry>")


# ---- Crossref ----------------------------------------------------------------------------


def crossref_work(paper: FakePaper) -> dict[str, object]:
    """A work as Crossref's `/works` answers it."""
    return {"DOI": paper.doi, "URL": f"https://doi.org/{paper.doi}", "type": "journal-article",
            "title": [paper.title], "container-title": [paper.venue] if paper.venue else [],
            "author": [{"given": given, "family": family, "sequence": "first" if i == 0
                        else "additional"} for i, (given, family) in enumerate(paper.authors)],
            "issued": {"date-parts": [[paper.year, 3, 1]]}, "publisher": "Fake Press"}


def _crossref_papers(request: Request) -> list[FakePaper]:
    return [p for p in request.app.state.catalogue if p.doi and p.crossref]


async def _crossref_search(request: Request) -> Response:
    if (fault := _received(request, "crossref")) is not None:
        return fault
    words = request.query_params.get("query", "").split()
    found = [p for p in _crossref_papers(request) if _matches(p, words)]
    rows = found[:int(request.query_params.get("rows", 20))]
    return JSONResponse({"status": "ok", "message-type": "work-list", "message-version": "1.0.0",
                         "message": {"total-results": len(found), "items-per-page": len(rows),
                                     "items": [crossref_work(p) for p in rows]}})


async def _crossref_work(request: Request) -> Response:
    if (fault := _received(request, "crossref")) is not None:
        return fault
    doi = request.path_params["doi"].lower()
    for paper in _crossref_papers(request):
        if (paper.doi or "").lower() == doi:
            return JSONResponse({"status": "ok", "message-type": "work",
                                 "message-version": "1.0.0", "message": crossref_work(paper)})
    return Response("Resource not found.", status_code=404, media_type="text/plain")
