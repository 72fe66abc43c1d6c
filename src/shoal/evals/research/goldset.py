"""The evaluation set: its files (`corpus/`) and its questions with gold answers
(`questions.yaml`), read and checked once.

A question has parts. An answerable part names the facts a correct answer states and where the
answer is: passages of the documents (a file and a short snippet of its text, never a passage
id or label, which depend on how a file is cut) or, for the data file, the SQL that answers it
and the rows it returns. An unanswerable part is one no file answers: a report must list it as
a gap. A question is asked as its parts' questions joined by spaces.

Text is compared `normalised`: Unicode NFKC, case folded, typographic quotes made plain,
Markdown's marks (`` ` * _ [ ] ``) and Sphinx's pilcrow dropped, whitespace collapsed, so the
same words match whether a passage kept the file's markup or not.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Self

import yaml
from bs4 import BeautifulSoup
from pydantic import BaseModel, ConfigDict, Field, model_validator

SET_DIR = Path(__file__).parent
CORPUS_DIR = SET_DIR / "corpus"
QUESTIONS_FILE = SET_DIR / "questions.yaml"

_MARKS = str.maketrans({"`": None, "*": None, "_": None, "[": None, "]": None, "\u00b6": None,
                        "\u2018": "'", "\u2019": "'", "\u00b4": "'", "\u201c": '"',
                        "\u201d": '"'})
THOUSANDS = re.compile(r"(?<=\d)[,\u202f\u2009\u00a0](?=\d{3}(?!\d))")


def normalised(text: str) -> str:
    """`text` as gold snippets and facts are compared (see the module's docstring)."""
    folded = unicodedata.normalize("NFKC", text).translate(_MARKS).casefold()
    return " ".join(folded.split())


def plain_text(path: Path) -> str:
    """A file's text as a reader sees it: an HTML page's text without its tags, any other file
    as it is."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".html", ".htm"):
        return BeautifulSoup(raw, "html.parser").get_text()
    return raw


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GoldPassage(_Frozen):
    """A passage that answers a part: the file, and a short verbatim snippet of its text."""

    source: str
    snippet: str = Field(min_length=1)

    def found_in(self, text: str) -> bool:
        """True when `text` (a passage) holds the snippet."""
        return normalised(self.snippet) in normalised(text)


class GoldData(_Frozen):
    """How the data file answers a part: the SQL a correct answer runs and its rows."""

    source: str
    sql: str
    rows: list[list[str | int | float]]


class Part(_Frozen):
    """One sub-question of a question and its gold answer (or `answerable: false`)."""

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    question: str = Field(min_length=3, pattern=r"\?$")
    answerable: bool = True
    answer: str | None = None
    facts: list[str] = []
    passages: list[GoldPassage] = []
    data: GoldData | None = None

    @model_validator(mode="after")
    def _gold_matches_answerable(self) -> Self:
        gold = (self.answer, self.facts, self.passages, self.data)
        if not self.answerable and any(gold):
            raise ValueError(f"part {self.id!r} is not answerable, so it has no answer, facts, "
                             "passages or data")
        if self.answerable and not (self.answer and self.facts):
            raise ValueError(f"part {self.id!r} needs an answer and its facts")
        if self.answerable and bool(self.passages) == (self.data is not None):
            raise ValueError(f"part {self.id!r} needs passages or data (one of them)")
        return self


class Question(_Frozen):
    """A question of the set: its parts, asked together."""

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    parts: list[Part] = Field(min_length=1)

    @property
    def text(self) -> str:
        """The question as it is submitted: its parts' questions in order."""
        return " ".join(part.question for part in self.parts)


class GoldSet(_Frozen):
    """The set: its files (in `corpus/`) and its questions."""

    name: str
    version: int
    sources: list[str] = Field(min_length=1)
    questions: list[Question] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        ids = [q.id for q in self.questions]
        if len(set(ids)) != len(ids):
            raise ValueError("question ids repeat")
        for question in self.questions:
            for part in question.parts:
                named = [p.source for p in part.passages] + (
                    [part.data.source] if part.data else [])
                unknown = [n for n in named if n not in self.sources]
                if unknown:
                    raise ValueError(f"{question.id}/{part.id} names files not in sources: "
                                     f"{', '.join(unknown)}")
        return self

    @property
    def files(self) -> list[Path]:
        """The set's files, in `sources` order."""
        return [CORPUS_DIR / name for name in self.sources]

    def chosen(self, ids: list[str] | None = None, limit: int | None = None) -> GoldSet:
        """The set with only the questions `ids` (in the set's order), then the first `limit`;
        `KeyError` naming any id the set does not have."""
        questions = self.questions
        if ids:
            unknown = sorted(set(ids) - {q.id for q in questions})
            if unknown:
                raise KeyError(", ".join(unknown))
            questions = [q for q in questions if q.id in ids]
        if limit is not None:
            questions = questions[:limit]
        return self.model_copy(update={"questions": questions})


def load_set(path: Path = QUESTIONS_FILE) -> GoldSet:
    """The set described by `path` (the bundled one by default), checked."""
    return GoldSet.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def fact_found(fact: str, text: str) -> bool:
    """True when `text` states `fact` (one of its `|` alternatives, as whole words;
    thousands separators ignored in both)."""
    haystack = THOUSANDS.sub("", normalised(text))
    for alternative in fact.split("|"):
        wanted = THOUSANDS.sub("", normalised(alternative))
        if wanted and re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", haystack):
            return True
    return False
