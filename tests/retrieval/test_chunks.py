"""Passages and their citations: ranges that slice the text exactly, pages from a real PDF's
`[page N]` markers, headings from Markdown (not from code), sizes and overlaps within bounds."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.artifacts.sources import SourceKind, extract_text
from shoal.retrieval.chunks import (
    MAX_CHARS,
    MIN_CHARS,
    OVERLAP_CHARS,
    Chunk,
    sections,
    split_passages,
)
from tests.retrieval.samples import (
    AUTOMATED_FACT,
    BUILT_FACT,
    FARE_FACT,
    FERRY_FACT,
    RAMP_FACT,
    filler,
    guide_markdown,
    render_history_pdf,
)


def containing(chunks: list[Chunk], fact: str) -> list[Chunk]:
    return [c for c in chunks if fact in c.text]


def test_pdf_passages_are_cited_by_the_page_they_are_on(tmp_path: Path) -> None:
    """Each fact of a real three-page PDF is in a passage cited with its page."""
    pdf = tmp_path / "history.pdf"
    pdf.write_bytes(render_history_pdf())
    text = extract_text(pdf, SourceKind.pdf, max_chars=1_000_000)
    chunks = split_passages(text, document="history.pdf")
    built, automated = containing(chunks, BUILT_FACT), containing(chunks, AUTOMATED_FACT)
    assert [c.citation.page for c in built] == [2]
    assert [c.citation.page for c in automated] == [3]
    assert {c.citation.document for c in chunks} == {"history.pdf"}
    assert all("[page" not in c.text for c in chunks)  # no passage crosses a page


def test_markdown_passages_are_cited_by_their_nearest_heading() -> None:
    """A fact is cited under the heading above it; `#` in fenced code starts no section."""
    text = guide_markdown()
    chunks = split_passages(text, document="guide.md")
    assert [c.citation.heading for c in containing(chunks, FERRY_FACT)] == ["Timetable"]
    assert {c.citation.heading for c in containing(chunks, FARE_FACT)} == {"Fares"}
    assert [c.citation.heading for c in containing(chunks, RAMP_FACT)] == ["Accessibility"]
    assert "not a heading: a comment in code" not in {c.citation.heading for c in chunks}
    assert all(c.citation.page is None for c in chunks)


def test_every_range_slices_the_text_exactly() -> None:
    """`text[start:end]` is the passage, for every passage of a real document."""
    text = guide_markdown()
    for chunk in split_passages(text, document="guide.md"):
        assert text[chunk.citation.start:chunk.citation.end] == chunk.text
        assert chunk.text == chunk.text.strip()


def test_a_long_section_is_cut_within_bounds_with_overlap() -> None:
    """Passages of one long section are 800 to 1200 characters (the last may be shorter),
    and each after the first repeats the end of the one before, by at most 200."""
    text = "\n\n".join(filler(n, 5) for n in range(30))
    chunks = split_passages(text, document="notes.txt")
    assert len(chunks) > 5
    assert all(MIN_CHARS <= len(c.text) <= MAX_CHARS for c in chunks[:-1])
    for before, after in itertools.pairwise(chunks):
        overlap = before.citation.end - after.citation.start
        assert 0 < overlap <= OVERLAP_CHARS
        assert text[after.citation.start:before.citation.end] in before.text


def test_passages_end_at_sentences_not_inside_words() -> None:
    """A passage of prose ends at the end of a sentence."""
    text = "\n\n".join(filler(n, 5) for n in range(30))
    assert all(c.text.endswith(".") for c in split_passages(text, document="notes.txt"))


def test_a_text_without_any_break_is_still_cut_to_size() -> None:
    """A line of 3000 characters with no space is cut into passages of at most 1200."""
    text = "x" * 3000
    chunks = split_passages(text, document="blob.txt")
    assert [len(c.text) for c in chunks] == [1200, 1200, 600]
    assert "".join(c.text for c in chunks) == text


def test_headings_with_nothing_under_them_make_no_passage() -> None:
    """A title directly followed by a subheading yields only the subheading's passage."""
    text = "# Title\n\n## Part one\n\nThe only sentence.\n"
    chunks = split_passages(text, document="a.md")
    assert [(c.citation.heading, c.text) for c in chunks] == [
        ("Part one", "## Part one\n\nThe only sentence.")]
    assert len(sections(text)) == 1


_TEXT = st.lists(st.sampled_from(["word", "Longer words here.", " ", "\n", "\n\n", "# Head\n",
                                  "[page 2]\n", "```\n", "Wow! ", "x" * 300, "é", "\t"]),
                 max_size=120).map("".join)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_any_text_gives_exact_bounded_passages_covering_it(text: str) -> None:
    """For any text: ranges slice exactly, stay within `MAX_CHARS`, and every non-space
    character of the body of every section is in some passage."""
    chunks = split_passages(text, document="any")
    covered = set()
    for chunk in chunks:
        assert text[chunk.citation.start:chunk.citation.end] == chunk.text
        assert 0 < len(chunk.text) <= MAX_CHARS
        covered.update(range(chunk.citation.start, chunk.citation.end))
    for section in sections(text):
        for at in range(section.body, section.end):
            assert text[at].isspace() or at in covered
