"""Whether an answer states the facts a conversation learned (`requires_facts`). Pure.

Both texts are normalised first: Unicode NFKC, case folded, thousands separators between
digits dropped ("€5,000" and "€5.000" read "€5000"), currency signs apart from their numbers,
every other punctuation mark a space, whitespace collapsed. A fact's value (each item of a list
fact) is stated when its normalised text occurs in the answer's as whole words, or else when
every number and every word of three letters or more of it (beside a short list of function
words) occurs in the answer: "a permit from the water authority" is stated by "…the water
authority's permit…"; "€5,000" is not stated by "€500".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

from shoal.workflows.learning import Told

SENT_BACK = "It leaves out what was told: "  # starts the problem of an answer sent back for it
_THOUSANDS = re.compile(r"(?<=\d)[,.'\u00a0\u202f](?=\d{3}(?!\d))")
_CURRENCY = re.compile(r"([€$£¥₹])")
_PUNCTUATION = re.compile(r"[^\w€$£¥₹%]+")
_FUNCTION_WORDS = frozenset({
    "the", "and", "for", "with", "from", "that", "this", "have", "has", "had", "are", "was",
    "were", "will", "can", "not", "but", "our", "your", "their", "its", "into", "onto", "about",
    "than", "then", "them", "they", "you", "she", "him", "her", "his", "any", "all", "per",
    "via", "need", "needs"})


def normalised(text: str) -> str:
    """`text` as the check compares it (the rules above)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _THOUSANDS.sub("", text)
    text = _CURRENCY.sub(r" \1 ", text)
    return " ".join(_PUNCTUATION.sub(" ", text).split())


def states(text: str, value: str) -> bool:
    """Whether `text` (normalised) states `value` (the rules above)."""
    wanted = normalised(value)
    if not wanted or f" {wanted} " in f" {text} ":
        return True
    words = set(text.split())
    needed = [w for w in wanted.split() if w[0].isdigit() or w in "€$£¥₹"
              or (len(w) >= 3 and w not in _FUNCTION_WORDS)]
    return bool(needed) and all(w in words for w in needed)


def left_out(text: str, known: Mapping[str, Told]) -> dict[str, list[str]]:
    """The facts of `known` whose value (or an item of it) `text` does not state: fact →
    the texts it leaves out."""
    said = normalised(text)
    found: dict[str, list[str]] = {}
    for name, told in known.items():
        values = [told.value] if isinstance(told.value, str) else list(told.value or ())
        missing = [v for v in values if not states(said, v)]
        if missing:
            found[name] = missing
    return found


def described(missing: Mapping[str, list[str]]) -> str:
    """`missing` as a line a role (or a person) reads."""
    return "; ".join(f"{name}: " + ", ".join(f'"{v}"' for v in values)
                     for name, values in missing.items())


def sent_back(problem: str) -> str:
    """What a run sent back is told, after its prompt: facts it left out, or (any other
    problem) the JSON its answer did not match."""
    if problem.startswith(SENT_BACK):
        return ("\n\nYour previous answer left out facts the user told, which it must state as "
                f"told: {problem.removeprefix(SENT_BACK)}\nAnswer again, whole, stating each.")
    return (f"\n\nYour previous answer did not match the required JSON: {problem}\n"
            "Answer again with only the JSON.")
