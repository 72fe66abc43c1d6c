"""The demo model's research script on text it has no script for: it quotes whole sentences as
a reader sees them and states a finding once."""

from __future__ import annotations

from shoal.demo.research_script import _best_sentence, _distinct, _other_number


def test_a_quote_from_a_list_item_leaves_out_its_bullet() -> None:
    """A passage's list item is quoted from its first word, not from its `- ` or `2. `."""
    text = "- zlib.compress(data) Compresses the bytes in data.\n\n2. Then call flush()."
    assert _best_sentence(text, ["compresses", "bytes"]) == \
        "zlib.compress(data) Compresses the bytes in data."
    assert _best_sentence(text, ["flush"]) == "Then call flush()."


def test_the_same_sentence_from_two_pages_is_one_finding() -> None:
    """Two findings a word apart (the same sentence on two pages) are stated once, the first
    kept with its citation; a different finding stays."""
    first = ("The wbits parameter controls the size of the history buffer (or \u201cwindow "
             "size\u201d), and what header and trailer format is expected", "zlib.html")
    again = (first[0].replace("(or ", "(or the "), "zlib-module.html")
    other = ("Level 1 is fastest and produces the least compression", "zlib.html")
    assert _distinct([first, again, other]) == [first, other]


def test_an_expanded_query_tries_each_words_other_number() -> None:
    """A retry's query adds each word's plural or singular, spelt as English spells it."""
    pairs = {"dictionary": "dictionaries", "sorts": "sort", "class": "classes",
             "analysis": "analyses", "boxes": "box", "key": "keys", "status": "statuses"}
    assert {w: _other_number(w) for w in pairs} == pairs
