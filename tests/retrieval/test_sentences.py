"""Where sentences end, and shortening that never cuts a word: on sentences of real texts and
the traps of prose (abbreviations, initials, wrapped lines, lists, full-width punctuation)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.retrieval.sentences import ELLIPSIS, sentence_spans, shorten
from tests.retrieval.real_texts import real_texts

MEMORY = ("Note that memory allocated by ffi_closure_alloc and freed by ffi_closure_free does "
          "not come from the same general pool of memory that malloc and free use.")


def _pieces(text: str) -> list[str]:
    return [text[a:b] for a, b, _ in sentence_spans(text, 0, len(text))]


def test_sentences_end_at_their_punctuation_not_at_abbreviations_or_initials() -> None:
    """`e.g.`, `Dr.`, `No. 5` and `J. Smith` end no sentence; a full stop before a capital,
    a digit or a quotation does, and so do `!` and `?`."""
    text = ("Use a mapping, e.g. a file. Dr. Quill built it in 1874. See Fig. 2 and No. 5 for "
            "both. J. Smith agreed! Why? \"Because\" it works. 42 is the answer.")
    assert _pieces(text) == ["Use a mapping, e.g. a file.", "Dr. Quill built it in 1874.",
                             "See Fig. 2 and No. 5 for both.", "J. Smith agreed!", "Why?",
                             "\"Because\" it works.", "42 is the answer."]


def test_a_wrapped_line_is_inside_its_sentence_and_items_are_pieces() -> None:
    """Prose wrapped at a line break stays one sentence; list items and table rows are pieces
    of their own even without a full stop."""
    text = ("The search follows\nthis list, using the first that works:\n- A anonymous "
            "mapping\n- memfd_create(), if the kernel\n  supports it\n| a | b |\n| 1 | 2 |")
    assert _pieces(text) == ["The search follows\nthis list, using the first that works:",
                             "- A anonymous mapping",
                             "- memfd_create(), if the kernel\n  supports it",
                             "| a | b |", "| 1 | 2 |"]


def test_full_width_punctuation_ends_a_sentence_without_a_space() -> None:
    """The ideographic full stop and full-width `?` end sentences written without spaces."""
    assert _pieces("\u4eca\u65e5\u306f\u6674\u308c\u3002\u660e\u65e5\u306f\uff1f\u96e8") == [
        "\u4eca\u65e5\u306f\u6674\u308c\u3002", "\u660e\u65e5\u306f\uff1f", "\u96e8"]


def test_a_piece_without_a_sentence_end_past_the_longest_is_cut_at_a_line_then_a_space() -> None:
    """Lines without punctuation are cut at a line break; one long line at a space; each part
    is marked as not whole."""
    lines = "\n".join(f"row {n} value {n}" for n in range(20))
    spans = sentence_spans(lines, 0, len(lines), longest=60)
    assert all(b - a <= 60 and lines[a:b].startswith("row") for a, b, _ in spans)
    assert not any(whole for *_, whole in spans)
    words = "word " * 40
    spans = sentence_spans(words, 0, len(words), longest=50)
    assert all(words[a:b].split() == ["word"] * len(words[a:b].split()) for a, b, _ in spans)


def test_shorten_cuts_at_a_sentence_else_a_word_with_an_ellipsis() -> None:
    """A text shortened ends with its last whole sentence when that keeps half, else with its
    last whole word, then ` …`; a text that fits is unchanged."""
    two = f"{MEMORY} To accomodate security settings, libffi may aquire memory."
    assert shorten(two, 200) == f"{MEMORY} {ELLIPSIS}"
    assert shorten(MEMORY, 60) == "Note that memory allocated by ffi_closure_alloc and freed " \
                                  f"{ELLIPSIS}"
    assert shorten(MEMORY, 1000) == MEMORY
    assert shorten(MEMORY, 125).endswith(f" general pool of {ELLIPSIS}")  # not "pool of memor"


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(real_texts())), start=st.integers(0, 5000),
       most=st.integers(10, 600))
def test_shortened_real_text_never_ends_inside_a_word(name: str, start: int, most: int) -> None:
    """Shortened anywhere in a real text, the result fits, is the text's start, and its last
    word is a whole word of the text."""
    text = real_texts()[name][start:]
    text = text[len(text) - len(text.lstrip()):]
    short = shorten(text, most)
    if short == text:
        return
    kept = short.removesuffix(f" {ELLIPSIS}")
    assert len(short) <= most
    assert text.startswith(kept)
    words = text[:len(kept) + 1].split()
    assert not kept or len(words[0]) >= most - 2 or text[len(kept)].isspace()


def test_the_number_of_a_numbered_line_ends_no_sentence() -> None:
    """"4. Funding and Delivery" is one piece with what follows it, not "4." on its own."""
    text = "the care homes.\n4. Funding and Delivery\nThe strategy is budgeted."
    assert _pieces(text) == ["the care homes.",
                             "4. Funding and Delivery\nThe strategy is budgeted."]
