"""What the store can hold, checked once at every edge (REST bodies, both sockets).

Text: PostgreSQL refuses a NUL character in any text or JSON value, and no database can store
a lone UTF-16 surrogate (`"\\ud800"`, legal in a JSON string, not in UTF-8). Integers: both
databases hold signed 64-bit integers. Input that breaks these rules is the client's mistake,
answered 422 (or an `error` frame on a socket) naming the field, never a 5xx.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

MAX_INT64 = 2**63 - 1
"""The largest integer either database stores: the bound of offsets and sequence numbers."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored, or None if it can."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which cannot be stored"
    if not value.isascii() and (found := _SURROGATE.search(value)):
        return (f"contains a lone surrogate (\\u{ord(found.group()):04x}), which is not valid "
                "Unicode text")
    return None


def storable_text(value: str) -> str:
    """`value` with every NUL character and lone surrogate replaced by U+FFFD: for text Shoal
    only passes on (a tool's output and log), where losing one character beats losing all."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    if not value.isascii():
        value = _SURROGATE.sub("\ufffd", value)
    return value


def shown(text: str) -> str:
    """`text` safe to echo in an error: NUL characters and lone surrogates as `\\uXXXX`."""
    if text_problem(text) is None:
        return text
    return "".join(f"\\u{ord(c):04x}" if c == "\x00" or "\ud800" <= c <= "\udfff" else c
                   for c in text)


def value_problem(value: Any, where: str = "") -> tuple[str, str] | None:
    """The first string (or non-finite number) inside `value` (strings, lists, tuples,
    mapping keys and values) that cannot be stored, as `(where inside value, why)`, or None.
    Models are checked by their own validators, so they are not entered here."""
    # The common kinds first, told by their class without a call: every field of a request
    # (a submitted plan's every step) passes here.
    cls = value.__class__
    if cls is str and "\x00" not in value and value.isascii():
        return None
    if cls is int or cls is bool or value is None:
        return None
    if cls is dict or cls is list or cls is tuple:
        return _inner_problem(value, where, mapping=cls is dict) if value else None
    if isinstance(value, str):
        problem = text_problem(value)
        return (where, problem) if problem else None
    if isinstance(value, float):
        if math.isfinite(value):
            return None  # not checked against the Mapping ABC below: a Python call each
        return where, f"is {value}, not a finite number (JSON has no NaN or Infinity)"
    if isinstance(value, Mapping | list | tuple):
        return _inner_problem(value, where, mapping=isinstance(value, Mapping))
    return None


def _inner_problem(
    value: Any, where: str, *, mapping: bool
) -> tuple[str, str] | None:
    """`value_problem` of a mapping's keys and values, or of a list's or tuple's items."""
    # An item that is plain ASCII text, a whole or finite number or null passes without a
    # call, and without its path being spelt out (a submitted plan's every dependency passes
    # here).
    for key, item in value.items() if mapping else enumerate(value):
        name = key  # a list's index; a mapping's key as `shown` gives it (no call when plain)
        if mapping and not (key.__class__ is str and "\x00" not in key and key.isascii()):
            name = shown(str(key))
            if isinstance(key, str) and (problem := text_problem(key)):
                return (f"{where}.{name}" if where else name), "has a key that " + problem
        cls = item.__class__
        if ((cls is str and "\x00" not in item and item.isascii()) or cls is int or item is None
                or (cls is float and -math.inf < item < math.inf)):
            continue
        if found := value_problem(item, f"{where}.{name}" if where else str(name)):
            return found
    return None


def model_problem(model: BaseModel, where: str = "") -> tuple[str, str] | None:
    """The first field of `model`, nested models included, holding text that cannot be
    stored, as `(dotted field path, why)`, or None."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        path = f"{where}.{name}" if where else name
        found = _nested_problem(value, path)
        if found:
            return found
    return None


def _nested_problem(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, BaseModel):
        return model_problem(value, path)
    if isinstance(value, list | tuple) and value and isinstance(value[0], BaseModel):
        for i, item in enumerate(value):
            if found := model_problem(item, f"{path}.{i}"):
                return found
        return None
    return value_problem(value, path)
