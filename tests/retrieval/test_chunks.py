"""Passages and their citations: ranges that slice the text exactly, pages from a real PDF's
`[page N]` markers, headings from Markdown (not from code), sizes and overlaps within bounds."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.artifacts.sources import SourceKind, extract_text
from shoal.retrieval.chunks import (
    LONGEST_CHARS,
    MAX_CHARS,
    MIN_CHARS,
    OVERLAP_CHARS,
    Chunk,
    sections,
    split_passages,
)
from tests.retrieval.real_texts import real_texts
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


def test_passages_of_prose_end_at_sentences() -> None:
    """A passage of prose ends at the end of a sentence."""
    text = "\n\n".join(filler(n, 5) for n in range(30))
    assert all(c.text.endswith(".") for c in split_passages(text, document="notes.txt"))


def test_a_sentence_longer_than_a_passage_is_kept_whole() -> None:
    """A sentence of 2,000 characters is one passage of its own, not cut at 1,200; the
    sentences around it are passages of their own."""
    long = "The closure " + ", and ".join(f"argument {n} is read" for n in range(120)) + "."
    assert MAX_CHARS < len(long) < LONGEST_CHARS
    text = f"{filler(1, 3)} {long} {filler(2, 6)}"
    chunks = split_passages(text, document="long.txt")
    assert long in [c.text for c in chunks]


def test_only_a_piece_without_any_sentence_end_past_the_longest_is_cut() -> None:
    """10,000 characters without a space are cut at `LONGEST_CHARS` (they hold no word);
    lines of a table without punctuation are cut at a line break, never inside a word."""
    blob = split_passages("x" * 10_000, document="blob.txt")
    assert [len(c.text) for c in blob] == [LONGEST_CHARS, LONGEST_CHARS, 400]
    table = "\n".join(f"row {n} value {n * 7} unit kg" for n in range(400))
    for chunk in split_passages(table, document="table.txt"):
        assert len(chunk.text) <= LONGEST_CHARS
        assert chunk.text.startswith("row ")
        assert chunk.text.split()[-1] == "kg"


def test_a_short_end_of_a_section_joins_the_passage_before_it() -> None:
    """A section's last sentence, after a full passage, is no passage of its own."""
    text = f"{filler(3, 12)} The end."
    chunks = split_passages(text, document="notes.txt", min_chars=400, max_chars=600,
                            overlap=100)
    assert chunks[-1].text.endswith(" The end.")
    assert all(len(c.text) > 100 for c in chunks)


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
    """For any text: ranges slice exactly, stay within `LONGEST_CHARS`, and every non-space
    character of the body of every section is in some passage."""
    chunks = split_passages(text, document="any")
    covered = set()
    for chunk in chunks:
        assert text[chunk.citation.start:chunk.citation.end] == chunk.text
        assert 0 < len(chunk.text) <= LONGEST_CHARS
        covered.update(range(chunk.citation.start, chunk.citation.end))
    for section in sections(text):
        for at in range(section.body, section.end):
            assert text[at].isspace() or at in covered


_ITEM_LINE = re.compile(r"[ \t]*(?:[-*+•][ \t]|\d{1,3}[.)][ \t]|\||>|#{1,6}[ \t]|```|\[page \d+\])")
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")


def _in_code(text: str, at: int) -> bool:
    return text.count("```", 0, at) % 2 == 1


def _ends_at_a_boundary(text: str, end: int) -> bool:
    """`end` closes a sentence, paragraph, list item, table row, heading or line of code."""
    rest = text[end:]
    if not rest.strip():
        return True
    gap = rest[:len(rest) - len(rest.lstrip())]
    line = text[text.rfind("\n", 0, end) + 1:end]
    return bool(_SENTENCE_END.search(text[:end]) or "\n\n" in gap or ("\n" in gap and (
        _ITEM_LINE.match(rest.lstrip(" \t\n")) or _ITEM_LINE.match(line) or _in_code(text, end))))


def _starts_at_a_boundary(text: str, start: int) -> bool:
    """`start` opens a sentence, paragraph, list item, table row, heading or line of code."""
    before = text[:start]
    if not before.strip():
        return True
    gap = before[len(before.rstrip()):]
    previous = before.rstrip()
    previous_line = previous[previous.rfind("\n") + 1:]
    return bool(_SENTENCE_END.search(previous) or "\n\n" in gap or ("\n" in gap and (
        _ITEM_LINE.match(text, start) or _ITEM_LINE.match(previous_line)
        or _in_code(text, start))))


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(real_texts())), min_chars=st.integers(100, 1000),
       extra=st.integers(0, 1000), overlap_share=st.floats(0, 0.9))
def test_passages_of_real_texts_start_and_end_at_boundaries(
        name: str, min_chars: int, extra: int, overlap_share: float) -> None:
    """Over real licences, manual pages, a Word document and a PDF, at any passage size, every
    passage starts and ends at a sentence, paragraph, item, row or section boundary, and none
    ends inside a word."""
    text = real_texts()[name]
    chunks = split_passages(text, document=name, min_chars=min_chars,
                            max_chars=min_chars + extra, overlap=int(min_chars * overlap_share))
    assert chunks
    for chunk in chunks:
        start, end = chunk.citation.start, chunk.citation.end
        assert end == len(text) or not (text[end - 1].isalnum() and text[end].isalnum())
        assert _ends_at_a_boundary(text, end), (name, chunk.text[-80:], text[end:end + 40])
        assert _starts_at_a_boundary(text, start), (name, text[start - 40:start],
                                                    chunk.text[:80])
