"""Real texts nobody on this project wrote, as Shoal extracts them, for the passage tests: three
licences as Debian ships them (plain text wrapped at 72 columns), the seven pages of two
manuals in `tests/fixtures/manuals/` (HTML), the Apache licence as a Word document and as a PDF
(rendered by WeasyPrint, extracted by pypdf page by page)."""

from __future__ import annotations

import functools
import html
import tempfile
from pathlib import Path

import weasyprint  # type: ignore[import-untyped]

from shoal.artifacts.sources import SourceKind, extract_text
from tests.artifacts.real_files import apache_sections, write_docx

LICENCES = Path("/usr/share/common-licenses")
MANUALS = Path(__file__).parent.parent / "fixtures" / "manuals"


@functools.cache
def real_texts() -> dict[str, str]:
    """Each text's name and its extracted text."""
    texts = {name: extract_text(LICENCES / name, SourceKind.text, max_chars=1_000_000)
             for name in ("Apache-2.0", "GPL-3", "MPL-2.0")}
    for page in sorted(MANUALS.glob("*/*.html")):
        texts[f"{page.parent.name}/{page.name}"] = extract_text(page, SourceKind.html,
                                                                max_chars=1_000_000)
    with tempfile.TemporaryDirectory() as folder:
        document = Path(folder) / "licence.docx"
        write_docx(document)
        texts["licence.docx"] = extract_text(document, SourceKind.docx, max_chars=1_000_000)
        pdf = Path(folder) / "licence.pdf"
        pdf.write_bytes(apache_pdf())
        texts["licence.pdf"] = extract_text(pdf, SourceKind.pdf, max_chars=1_000_000)
    return texts


def apache_pdf() -> bytes:
    """The Apache licence's sections as a PDF of several pages."""
    body = "".join(f"<h2>{html.escape(title)}</h2>"
                   + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
                   for title, paragraphs in apache_sections())
    pdf: bytes = weasyprint.HTML(string=f"<h1>Apache License</h1>{body}").write_pdf()
    return pdf

