"""The literature parsers and merging, over the payloads the fake arXiv and Crossref serve."""

from __future__ import annotations

import httpx
import pytest

from shoal.demo.fake.literature import CATALOGUE, arxiv_feed, crossref_work
from shoal.demo.model import create_demo_model_app
from shoal.errors import InvalidInput
from shoal.retrieval.literature import (
    Service,
    merge,
    paper_id,
    parse_arxiv,
    parse_crossref,
    parse_crossref_work,
    retry_after,
)

TIDAL = CATALOGUE[0]  # on both services, one DOI
WEAR_ARXIV, WEAR_CROSSREF = CATALOGUE[1], CATALOGUE[2]  # one title, no shared id


def test_an_arxiv_feed_gives_each_entry_as_a_paper() -> None:
    """Title, authors, year, abstract, arXiv id (without version), DOI and page URL."""
    papers = parse_arxiv(arxiv_feed([TIDAL, WEAR_ARXIV]))
    first = papers[0]
    assert (first.title, first.authors, first.year) == (
        "Tidal Energy Harvesting in Shallow Estuaries", ("Mara Okafor", "Lin Chen"), 2021)
    assert first.abstract.startswith("We model tidal energy")
    assert (first.arxiv_id, first.doi, first.source) == ("2103.01234", "10.5555/tidal.2021.7",
                                                          Service.arxiv)
    assert first.url == "http://arxiv.org/abs/2103.01234v1"
    assert first.citation_key == "okafor2021tidal"
    assert papers[1].doi is None


def test_a_feed_with_a_document_type_declaration_is_refused() -> None:
    """No entity is ever expanded: a DTD (entities, external or not) is refused outright."""
    evil = ('<?xml version="1.0"?><!DOCTYPE feed [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            '<feed xmlns="http://www.w3.org/2005/Atom"><entry><title>&x;</title></entry></feed>')
    with pytest.raises(InvalidInput, match="document type declaration"):
        parse_arxiv(evil)


def test_crossref_items_and_a_single_work_parse_alike() -> None:
    """Crossref's `title` list, `author` given/family, `issued.date-parts` and venue."""
    body = {"status": "ok", "message": {"items": [crossref_work(TIDAL)]}}
    (listed,) = parse_crossref(body)
    single = parse_crossref_work(crossref_work(TIDAL))
    assert listed == single
    assert (single.title, single.authors, single.year, single.venue) == (
        TIDAL.title, ("Mara Okafor", "Lin Chen"), 2021, "Journal of Ocean Energy")
    assert (single.doi, single.url) == ("10.5555/tidal.2021.7",
                                        "https://doi.org/10.5555/tidal.2021.7")


def test_merge_keeps_one_paper_per_doi_or_title_and_fills_in_what_it_lacks() -> None:
    """The same DOI on both services, and the same title with no shared id, each merge."""
    arxiv = parse_arxiv(arxiv_feed([TIDAL, WEAR_ARXIV]))
    crossref = [parse_crossref_work(crossref_work(p)) for p in (TIDAL, WEAR_CROSSREF)]
    merged = merge(arxiv, crossref)
    assert [p.title for p in merged] == [TIDAL.title, WEAR_ARXIV.title]
    assert merged[0].venue == "Journal of Ocean Energy"
    assert (merged[1].arxiv_id, merged[1].doi) == ("1907.04567", "10.5555/wear.2020.3")


@pytest.mark.parametrize(("text", "expected"), [
    ("10.5555/tidal.2021.7", (Service.crossref, "10.5555/tidal.2021.7")),
    ("https://doi.org/10.5555/x.1", (Service.crossref, "10.5555/x.1")),
    ("arXiv:2103.01234v2", (Service.arxiv, "2103.01234v2")),
    ("https://arxiv.org/abs/hep-th/9901001", (Service.arxiv, "hep-th/9901001")),
])
def test_paper_ids_name_their_service(text: str, expected: tuple[Service, str]) -> None:
    """DOIs go to Crossref, arXiv ids (new or old style, bare or as URLs) to arXiv."""
    assert paper_id(text) == expected


def test_an_id_that_is_neither_says_what_to_pass() -> None:
    """A title is not an id: the error says what is."""
    with pytest.raises(InvalidInput, match="neither a DOI"):
        paper_id("Attention is all you need")


def test_retry_after_reads_seconds_and_http_dates() -> None:
    """Seconds as given; a date in the past waits nothing; garbage is None."""
    assert retry_after("2") == 2.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after("soon") is None


async def test_the_demo_model_server_serves_the_fake_under_literature() -> None:
    """The demo's base URLs: `/literature/arxiv/api/query` and `/literature/crossref`."""
    transport = httpx.ASGITransport(app=create_demo_model_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
        feed = await client.get("/literature/arxiv/api/query",
                                params={"search_query": "all:tidal", "max_results": 5})
        work = await client.get("/literature/crossref/works/10.5555/tidal.2021.7")
    assert parse_arxiv(feed.text)[0].arxiv_id == "2103.01234"
    assert work.json()["message"]["DOI"] == "10.5555/tidal.2021.7"
