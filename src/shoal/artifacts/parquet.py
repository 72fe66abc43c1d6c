"""The metadata of a Parquet file, read from its footer without a Parquet library.

A Parquet file is `PAR1`, column data, a footer (a `FileMetaData` struct in Apache Thrift's
compact protocol), the footer's length as 4 little-endian bytes, and `PAR1` again.
`read_parquet_summary(path)` checks both magics and the footer's length, then decodes the
footer with a small Thrift reader to give the row count, the number of row groups, the leaf
columns with their types and the writer's name. The column data is never read.

Anything malformed raises `ValueError` saying what is wrong; `sources.validate` turns that
into `InvalidInput` (422). Every size read from the file is checked against the bytes left,
so a hostile footer cannot make the reader allocate wildly or recurse without end.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_MAX_FOOTER_BYTES = 64 << 20
_PHYSICAL = ("BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY",
             "FIXED_LEN_BYTE_ARRAY")
_LOGICAL = {1: "STRING", 4: "ENUM", 5: "DECIMAL", 6: "DATE", 7: "TIME", 8: "TIMESTAMP",
            10: "INTEGER", 12: "JSON", 13: "BSON", 14: "UUID", 15: "FLOAT16"}


@dataclass(frozen=True, slots=True)
class ParquetSummary:
    """What a Parquet file's footer says: its row count, its number of row groups, its leaf
    columns as `name: TYPE` (nested ones dotted) and the writer that made it ("" if unnamed)."""

    rows: int
    row_groups: int
    columns: list[str]
    created_by: str


def read_parquet_summary(path: Path) -> ParquetSummary:
    """Rows, row groups and `name: TYPE` columns (nested ones dotted) from the footer; raises
    `ValueError` saying what is wrong with a file that is not a sound Parquet file."""
    with path.open("rb") as file:
        size = file.seek(0, io.SEEK_END)
        if size < 12:
            raise ValueError(f"it is {size} bytes, too short for Parquet")
        file.seek(0)
        head = file.read(4)
        file.seek(size - 8)
        length, tail = struct.unpack("<I4s", file.read(8))
        if head != b"PAR1" or tail != b"PAR1":
            raise ValueError("it does not start and end with the Parquet magic PAR1")
        if not 0 < length <= min(size - 12, _MAX_FOOTER_BYTES):
            raise ValueError(f"its footer claims {length:,} bytes in a {size:,}-byte file")
        file.seek(size - 8 - length)
        footer = file.read(length)
    return _footer_summary(footer)


def _footer_summary(footer: bytes) -> ParquetSummary:
    reader = _Thrift(footer)
    schema: list[object] = []
    rows: int | None = None
    groups, created_by = 0, ""
    for field, kind in reader.fields(0):  # FileMetaData in parquet.thrift
        if field == 4 and kind == _Thrift.LIST:
            groups = reader.skip_list(1)  # row groups: only their number matters here
            continue
        value = reader.value(kind, 1)
        if field == 2 and isinstance(value, list):
            schema = value
        elif field == 3 and isinstance(value, int):
            rows = value
        elif field == 6 and isinstance(value, bytes):
            created_by = value.decode("utf-8", errors="replace")
    if rows is None or not schema:
        raise ValueError("its footer lacks the row count or the schema")
    elements = [element for element in schema if isinstance(element, dict)]
    if len(elements) != len(schema):
        raise ValueError("its schema is damaged")
    return ParquetSummary(rows, groups, _leaf_columns(elements), created_by)


def _leaf_columns(schema: list[dict[int, object]]) -> list[str]:
    """The schema's leaves as `a.b: TYPE`; the schema is a tree flattened depth-first, each
    group giving its number of children."""
    names: list[str] = []
    left: list[int] = []
    columns: list[str] = []
    for element in schema[1:]:
        while left and left[-1] == 0:
            names.pop()
            left.pop()
        if left:
            left[-1] -= 1
        raw = element.get(4)
        name = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else "?"
        children = element.get(5)
        if isinstance(children, int) and children > 0:
            names.append(name)
            left.append(children)
        else:
            columns.append(f"{'.'.join([*names, name])}: {_column_type(element)}")
    return columns


def _column_type(element: dict[int, object]) -> str:
    logical, physical = element.get(10), element.get(1)
    if isinstance(logical, dict) and (known := next(
            (_LOGICAL[k] for k in logical if k in _LOGICAL), None)):
        return known
    if element.get(6) == 0:  # the older converted type UTF8
        return "STRING"
    if isinstance(physical, int) and 0 <= physical < len(_PHYSICAL):
        return _PHYSICAL[physical]
    return "?"


class _Thrift:
    """A reader of Apache Thrift's compact protocol, enough for a Parquet footer: structs
    become `{field id: value}`, lists lists, binaries bytes. Malformed input raises
    `ValueError`; every size is checked against the bytes left, so none allocates wildly."""

    LIST = 9
    _MAX_DEPTH = 32

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def fields(self, depth: int) -> Iterator[tuple[int, int]]:
        """A struct's `(field id, type)` pairs; read each value before taking the next."""
        if depth > self._MAX_DEPTH:
            raise ValueError("its footer nests too deeply")
        field = 0
        while (header := self._take(1)[0]) != 0:
            field = field + (header >> 4) if header >> 4 else self._zigzag()
            yield field, header & 0x0F

    def value(self, kind: int, depth: int) -> object:
        """One value of Thrift type `kind`."""
        match kind:
            case 1 | 2:  # a boolean field carries its value in its type
                return kind == 1
            case 3:
                return int.from_bytes(self._take(1), "little", signed=True)
            case 4 | 5 | 6:
                return self._zigzag()
            case 7:
                return struct.unpack("<d", self._take(8))[0]
            case 8:
                return self._take(self._varint())
            case 9 | 10:
                size, element = self._list_header()
                return [self._element(element, depth) for _ in range(size)]
            case 11:
                return self._map(depth)
            case 12:
                return {field: self.value(k, depth + 1) for field, k in self.fields(depth + 1)}
        raise ValueError(f"its footer holds an unknown Thrift type {kind}")

    def skip_list(self, depth: int) -> int:
        """Read past a list, keeping nothing; its length."""
        size, element = self._list_header()
        for _ in range(size):
            self._element(element, depth)
        return size

    def _element(self, kind: int, depth: int) -> object:
        if kind in (1, 2):  # in a list, each boolean is a byte of its own
            return self._take(1)[0] == 1
        return self.value(kind, depth + 1)

    def _list_header(self) -> tuple[int, int]:
        header = self._take(1)[0]
        size = header >> 4 if header >> 4 != 15 else self._varint()
        if size > len(self._data) - self._pos:
            raise ValueError("its footer declares a list longer than the footer")
        return size, header & 0x0F

    def _map(self, depth: int) -> list[tuple[object, object]]:
        size = self._varint()
        if not size:
            return []
        if size > len(self._data) - self._pos:
            raise ValueError("its footer declares a map longer than the footer")
        kinds = self._take(1)[0]
        return [(self._element(kinds >> 4, depth), self._element(kinds & 0x0F, depth))
                for _ in range(size)]

    def _take(self, count: int) -> bytes:
        if self._pos + count > len(self._data):
            raise ValueError("its footer ends in the middle of a value")
        self._pos += count
        return self._data[self._pos - count: self._pos]

    def _varint(self) -> int:
        value = 0
        for shift in range(0, 70, 7):
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
        raise ValueError("its footer holds an overlong number")

    def _zigzag(self) -> int:
        value = self._varint()
        return (value >> 1) ^ -(value & 1)
