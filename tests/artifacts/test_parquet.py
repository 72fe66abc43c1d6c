"""Parquet files: footers written with a tiny Thrift compact-protocol writer, validated and
summarised through `validate` and `extract_text`, and broken ones refused saying why."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from shoal.artifacts.sources import SourceKind, extract_text, validate
from shoal.errors import InvalidInput


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


# --- a tiny Thrift compact-protocol writer, for Parquet footers (pyarrow is not installed) ---


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _i32(value: int) -> tuple[int, bytes]:
    return 5, _varint((value << 1) ^ (value >> 63))


def _i64(value: int) -> tuple[int, bytes]:
    return 6, _varint((value << 1) ^ (value >> 63))


def _bin(value: bytes) -> tuple[int, bytes]:
    return 8, _varint(len(value)) + value


def _struct(fields: dict[int, tuple[int, bytes]]) -> tuple[int, bytes]:
    out, last = bytearray(), 0
    for field, (kind, data) in sorted(fields.items()):
        if 0 < field - last <= 15:
            out.append((field - last) << 4 | kind)
        else:
            out += bytes([kind]) + _varint(field << 1)
        out += data
        last = field
    return 12, bytes(out) + b"\x00"


def _list(kind: int, items: list[bytes]) -> tuple[int, bytes]:
    header = bytes([len(items) << 4 | kind]) if len(items) < 15 else bytes(
        [0xF0 | kind]) + _varint(len(items))
    return 9, header + b"".join(items)


def parquet_bytes(footer: bytes, data: bytes = b"\x15\x04fake column data") -> bytes:
    """A Parquet file's bytes: both magics around `data` and `footer`, with its length."""
    return b"PAR1" + data + footer + struct.pack("<I", len(footer)) + b"PAR1"


def sample_footer() -> bytes:
    """FileMetaData: 4 rows in 2 row groups; columns id, name and a group `address.city`."""
    schema = [_struct({4: _bin(b"schema"), 5: _i32(3)}),
              _struct({1: _i32(2), 3: _i32(0), 4: _bin(b"id")}),
              _struct({1: _i32(6), 3: _i32(1), 4: _bin(b"name"), 6: _i32(0)}),
              _struct({3: _i32(1), 4: _bin(b"address"), 5: _i32(1)}),
              _struct({1: _i32(6), 3: _i32(1), 4: _bin(b"city"),
                       10: _struct({1: _struct({})})})]
    group = _struct({1: _list(12, []), 2: _i64(100), 3: _i64(2),
                     99: (1, b""),  # a boolean (true) under a long-form field id
                     100: _list(1, [b"\x01", b"\x00"])})
    _, data = _struct({
        1: _i32(2), 2: _list(12, [s[1] for s in schema]), 3: _i64(4),
        4: _list(12, [group[1], group[1]]),
        5: _list(12, [_struct({1: _bin(b"pandas"), 2: _bin(b"{}")})[1]]),
        6: _bin(b"shoal-test 1.0")})
    return data


# --- validation ----------------------------------------------------------------------------


def test_a_sound_parquet_file_passes(tmp_path: Path) -> None:
    """Both magics, a sane footer length and a readable footer: accepted."""
    validate(_write(tmp_path, "ok.parquet", parquet_bytes(sample_footer())), SourceKind.parquet)


@pytest.mark.parametrize(("data", "why"), [
    (b"PAR1PAR1", "too short"),
    (b"PAR1" + bytes(20) + b"PAR0", "magic"),
    (b"PAR1" + bytes(20) + struct.pack("<I", 1000) + b"PAR1", "footer claims"),
    (b"PAR1" + bytes(20) + struct.pack("<I", 0) + b"PAR1", "footer claims"),
    (parquet_bytes(b"\x15\x02\x19\x1c\x48\x05x"), "ends in the middle"),
    (parquet_bytes(b"\x1d\x00"), "unknown Thrift type"),
    (parquet_bytes(b"\x15\x02\x00"), "lacks the row count"),
    (parquet_bytes(b"\x19\xfc\xff\xff\xff\x0f\x00"), "longer than the footer"),
    (parquet_bytes(b"\x1c" * 60), "nests too deeply"),
])
def test_a_broken_parquet_file_is_refused(tmp_path: Path, data: bytes, why: str) -> None:
    """A bad magic, an impossible footer length or malformed metadata: refused, saying why."""
    with pytest.raises(InvalidInput, match=why):
        validate(_write(tmp_path, "bad.parquet", data), SourceKind.parquet)


# --- text ----------------------------------------------------------------------------------


def test_parquet_text_comes_from_the_footer(tmp_path: Path) -> None:
    """Rows, row groups, the writer and each column with its type, nested ones dotted."""
    path = _write(tmp_path, "r.parquet", parquet_bytes(sample_footer()))
    assert extract_text(path, SourceKind.parquet, max_chars=10_000) == (
        "Parquet file: 4 rows in 2 row groups, 3 columns, written by shoal-test 1.0.\n"
        "Columns:\n- id: INT64\n- name: STRING\n- address.city: STRING")


def test_a_hand_written_footer_reads_as_the_spec_says(tmp_path: Path) -> None:
    """Bytes written by hand from the compact protocol's spec: version 1, a root with no
    children, 5 rows, no row groups."""
    footer = bytes([0x15, 0x02,  # field 1 (delta 1), i32: zigzag(1) = 2
                    0x19, 0x1C,  # field 2, a list of 1 struct
                    0x48, 0x01, ord("x"), 0x00,  # its field 4, binary "x"; stop
                    0x16, 0x0A,  # field 3, i64: zigzag(5) = 10
                    0x19, 0x0C,  # field 4, a list of 0 structs
                    0x00])
    path = _write(tmp_path, "h.parquet", parquet_bytes(footer))
    validate(path, SourceKind.parquet)
    assert extract_text(path, SourceKind.parquet, max_chars=1000).startswith(
        "Parquet file: 5 rows in 0 row groups, 0 columns.")
