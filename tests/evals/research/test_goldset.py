"""The bundled evaluation set: its files are there with their licences, every gold snippet is
in its file, every gold SQL returns its rows in DuckDB, and every gold answer states its facts."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from pydantic import ValidationError

from shoal.evals.research.goldset import (
    CORPUS_DIR,
    GoldSet,
    fact_found,
    load_set,
    normalised,
    plain_text,
)

SET = load_set()


def test_the_set_names_its_files_their_licences_and_stays_small() -> None:
    """Every file is in corpus/, the README names each with its licence, and the whole folder
    is under 300 kB."""
    readme = (CORPUS_DIR / "README.md").read_text()
    licences = (CORPUS_DIR / "LICENSES.md").read_text()
    for path in SET.files:
        assert path.is_file(), path
        assert f"`{path.name}`" in readme, path.name
    for name in SET.sources[:-1]:  # the CSV holds facts, not licensed text
        assert f"`{name}`" in licences, name
    assert sum(p.stat().st_size for p in CORPUS_DIR.iterdir()) < 300_000
    assert 12 <= len(SET.questions) <= 20
    assert sum(not p.answerable for q in SET.questions for p in q.parts) >= 5


def test_every_gold_snippet_is_in_its_file() -> None:
    """A gold passage's snippet occurs in its file's text (normalised)."""
    texts = {name: normalised(plain_text(CORPUS_DIR / name)) for name in SET.sources}
    missing = [(q.id, p.id, g.snippet) for q in SET.questions for p in q.parts
               for g in p.passages if normalised(g.snippet) not in texts[g.source]]
    assert missing == []


def test_every_gold_sql_returns_its_rows_in_duckdb() -> None:
    """Each data part's SQL, run over the CSV as the table query_data names it, returns the
    gold rows in order."""
    db = duckdb.connect()
    checked = 0
    for question in SET.questions:
        for part in question.parts:
            if part.data is None:
                continue
            path = CORPUS_DIR / part.data.source
            db.execute(f"CREATE OR REPLACE VIEW {Path(part.data.source).stem} AS "
                       f"SELECT * FROM read_csv_auto('{path}')")
            rows = [list(row) for row in db.execute(part.data.sql).fetchall()]
            assert rows == part.data.rows, (question.id, part.id)
            checked += 1
    assert checked >= 5


def test_every_gold_answer_states_its_facts() -> None:
    """The facts a report is checked for are in the gold answer itself."""
    unstated = [(q.id, p.id, fact) for q in SET.questions for p in q.parts for fact in p.facts
                if not fact_found(fact, p.answer or "")]
    assert unstated == []


def test_a_question_is_asked_as_its_parts_in_order() -> None:
    """The submitted text is the parts' questions joined, each ending in a question mark."""
    question = SET.questions[0]
    assert question.text == " ".join(p.question for p in question.parts)
    assert question.text.count("?") == len(question.parts)


def test_a_part_naming_a_file_outside_the_set_is_refused() -> None:
    """A gold passage in a file the set does not list fails to load, naming the part."""
    raw = SET.model_dump()
    raw["questions"][0]["parts"][0]["passages"][0]["source"] = "elsewhere.md"
    with pytest.raises(ValidationError, match="sorting-stability/a names files not in sources"):
        GoldSet.model_validate(raw)


def test_an_unanswerable_part_with_a_gold_answer_is_refused() -> None:
    """`answerable: false` and an answer contradict each other."""
    raw = SET.model_dump()
    raw["questions"][0]["parts"][2]["answer"] = "O(n log n)"
    with pytest.raises(ValidationError, match="is not answerable"):
        GoldSet.model_validate(raw)


def test_facts_match_whole_words_and_figures_without_separators() -> None:
    """'6' is not found in '16', '1724208' is found as '1,724,208', and either alternative
    of 'a|b' will do."""
    assert not fact_found("6", "level 16")
    assert fact_found("6", "equivalent to level 6.")
    assert fact_found("1724208", "misc takes 1,724,208 KiB")
    assert fact_found("utf8|utf-8", "It decodes UTF-8 by default")
    assert fact_found("ffi_prep_cif", "`ffi_prep_cif` may modify")


def test_choosing_questions_keeps_the_sets_order_and_names_unknown_ids() -> None:
    """`chosen` picks by id in the set's order, then limits; an unknown id is a KeyError."""
    ids = [SET.questions[3].id, SET.questions[1].id]
    assert [q.id for q in SET.chosen(ids).questions] == [ids[1], ids[0]]
    assert len(SET.chosen(limit=2).questions) == 2
    with pytest.raises(KeyError, match="no-such-question"):
        SET.chosen(["no-such-question"])
