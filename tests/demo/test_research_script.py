"""The demo model's research script on text it has no script for: it quotes whole sentences as
a reader sees them and states a finding once."""

from __future__ import annotations

from shoal.demo.research_script import _best_sentence, _claims, _distinct, _other_number


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


def test_a_synthesised_finding_keeps_the_brackets_of_its_text_and_quote() -> None:
    """A finding or its quote may hold brackets (a Markdown link, a table's "[zlib]"): the
    writer still reads each synthesis line as the finding, its citation and its quote (it
    used to cut at the last " [", and the check then found no such passage)."""
    licence = "Zstandard is dual-licensed under [BSD](LICENSE) and [GPLv2](COPYING)."
    row = "| [zlib] 1.2.11 -1 | 2.743 | 95 MB/s | 400 MB/s |"
    synthesis = "\n".join([
        f'- {licence} [zstd-readme.md, "License", lines 205\u2013207 \u2014 "{licence}"]',
        f'- Compressor name: zlib 1.2.11 -1; Ratio: 2.743 [zstd-readme.md, "Benchmarks", '
        f'lines 32\u201355 \u2014 "{row}"]',
        '- district Eastfield, heat_days 43 [SQL: SELECT district FROM "t" LIMIT 3]'])
    prompt = f'<result task="Synthesis" type="synthesis">\n{synthesis}\n</result>'
    assert _claims(prompt) == [
        (licence, f'zstd-readme.md, "License", lines 205\u2013207 \u2014 "{licence}"'),
        ("Compressor name: zlib 1.2.11 -1; Ratio: 2.743",
         f'zstd-readme.md, "Benchmarks", lines 32\u201355 \u2014 "{row}"'),
        ("district Eastfield, heat_days 43", 'SQL: SELECT district FROM "t" LIMIT 3')]
