"""Files built from real text and data on this machine, which nobody on this project wrote: the
Apache License 2.0 as Debian ships it (`/usr/share/common-licenses/`, from `base-files`), and
the installed packages as `dpkg-query` lists them. The Word document and Excel workbook are
written by python-docx and openpyxl, as a user's Office would write them."""

from __future__ import annotations

import csv
import datetime as dt
import re
import subprocess
from pathlib import Path

import docx
import openpyxl

APACHE = Path("/usr/share/common-licenses/Apache-2.0")


def apache_sections() -> list[tuple[str, list[str]]]:
    """The Apache License's numbered sections, each a title ("1. Definitions.") and its
    paragraphs (the file's lines joined)."""
    text = APACHE.read_text(encoding="utf-8").split("END OF TERMS AND CONDITIONS")[0]
    sections: list[tuple[str, list[str]]] = []
    for block in re.split(r"\n\s*\n", text):
        words = " ".join(block.split())
        numbered = re.match(r"^(\d+\. [A-Z][^.]*\.)\s*(.*)$", words)
        if numbered:
            sections.append((numbered.group(1), [numbered.group(2)] if numbered.group(2) else []))
        elif sections and words:
            sections[-1][1].append(words)
    return sections


def packages() -> list[tuple[str, int, str]]:
    """Every installed package: its name, installed size (KiB) and section."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Installed-Size}\t${Section}\n"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    return [(name, int(size or 0), section or "unknown") for name, size, section in rows]


def write_packages_csv(path: Path) -> list[tuple[str, int, str]]:
    """`path` as a CSV of the installed packages (`package,installed_kib,section`)."""
    rows = packages()
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["package", "installed_kib", "section"])
        writer.writerows(rows)
    return rows


def write_docx(path: Path) -> list[tuple[str, list[str]]]:
    """`path` as a Word document of the Apache License: a title, a heading per section, its
    paragraphs, a bulleted list, and a table of the five largest installed packages."""
    sections = apache_sections()
    document = docx.Document()
    document.add_heading("Apache License, Version 2.0", level=0)
    for title, paragraphs in sections:
        document.add_heading(title, level=1)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
    document.add_heading("Largest packages", level=1)
    for name, size, _ in sorted(packages(), key=lambda p: -p[1])[:3]:
        document.add_paragraph(f"{name} takes {size:,} KiB.", style="List Bullet")
    table = document.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ["Package", "KiB", "Section"], strict=True):
        cell.text = text
    for name, size, section in sorted(packages(), key=lambda p: -p[1])[:5]:
        for cell, text in zip(table.add_row().cells, [name, str(size), section], strict=True):
            cell.text = text
    document.save(str(path))
    return sections


def write_xlsx(path: Path) -> list[tuple[str, int, str]]:
    """`path` as an Excel workbook: sheet "packages" (a title row, an empty row, then a header
    and every installed package), sheet "2024" (dates and counts, no header) and sheet
    "sections" (text only, with a header)."""
    rows = packages()
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "packages"
    sheet.append(["Installed packages"])
    sheet.append([])
    sheet.append(["package", "installed_kib", "section"])
    for row in rows:
        sheet.append(list(row))
    dated = book.create_sheet("2024")
    for month in range(1, 4):
        dated.append([dt.datetime(2024, month, 1), month * 10])
    named = book.create_sheet("sections")
    named.append(["section", "example"])
    for section in sorted({s for _, _, s in rows})[:5]:
        named.append([section, next(n for n, _, s in rows if s == section)])
    book.save(path)
    return rows
