"""The files of a task's `sources/` folder: what each is, and the name it is cited by.

A task's files arrive in the attempt's workspace under `sources/`, a file too large to send as
its extracted text, `<name>.txt` (the dispatcher's rule): such a `.txt` beside no `<name>`
stands for `<name>` and is cited by that name. `source_files(folder)` sniffs each file
(`shoal.artifacts.sources.sniff_file`); one that cannot be read, or a zip, has no kind and
says why. It blocks: call it in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePath

from shoal.artifacts.sources import Archive, SourceKind, sniff_file
from shoal.errors import ShoalError

DOCUMENT_KINDS = frozenset({SourceKind.markdown, SourceKind.text, SourceKind.html,
                            SourceKind.pdf, SourceKind.docx})
"""The kinds of source searched as passages (the others are data, or unreadable)."""

_SOURCE_SUFFIXES = frozenset({".md", ".markdown", ".mdown", ".mkd", ".text", ".html", ".htm",
                              ".xhtml", ".pdf", ".csv", ".tsv", ".parquet", ".pq", ".sqlite",
                              ".sqlite3", ".db", ".docx", ".xlsx"})


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file under `sources/`: the name it is cited by, its path, kind, size and
    modification time; a file that cannot be read has no kind and says why."""

    name: str
    path: Path
    kind: SourceKind | None
    size: int
    modified: int
    problem: str = ""

    @property
    def key(self) -> tuple[str, int, int]:
        """Names this version of the file."""
        return str(self.path), self.size, self.modified


def source_files(folder: Path) -> list[SourceFile]:
    """The files in `folder` (a task's `sources/`), sniffed, by name; none if it is missing."""
    if not folder.is_dir():
        return []
    names = {p.name for p in folder.iterdir()}
    found: list[SourceFile] = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.name.startswith("."):
            continue
        name = path.name
        stem = PurePath(name[:-4]) if name.endswith(".txt") else None
        if stem is not None and stem.suffix.lower() in _SOURCE_SUFFIXES and stem.name not in names:
            name = stem.name
        stat = path.stat()
        try:
            kind = sniff_file(path, path.name)
        except (ShoalError, OSError) as exc:
            found.append(SourceFile(name, path, None, stat.st_size, stat.st_mtime_ns, str(exc)))
            continue
        if isinstance(kind, Archive):
            found.append(SourceFile(name, path, None, stat.st_size, stat.st_mtime_ns,
                                    "a zip archive, not a source"))
            continue
        found.append(SourceFile(name, path, kind, stat.st_size, stat.st_mtime_ns))
    return found
