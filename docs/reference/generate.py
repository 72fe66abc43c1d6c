"""Writes the reference pages (docs/reference/*.md) from the code, so that they cannot drift:
the workflow language from its models, the CLI from the typer app, the REST API from the
OpenAPI document, the events, the settings and the metrics. `make docs` runs it before
building the site; tests/docs/test_reference.py fails when the committed pages differ.

    python docs/reference/generate.py [--out FOLDER]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no __pycache__ in docs/, which the site would copy

import ref_api  # noqa: E402
import ref_cli  # noqa: E402
import ref_events  # noqa: E402
import ref_language  # noqa: E402  (found beside this file)
import ref_metrics  # noqa: E402
import ref_settings  # noqa: E402

PAGES: dict[str, Callable[[], str]] = {
    "workflow-language.md": ref_language.page,
    "cli.md": ref_cli.page,
    "rest-api.md": ref_api.page,
    "events.md": ref_events.page,
    "settings.md": ref_settings.page,
    "metrics.md": ref_metrics.page,
}


def write(out: Path) -> list[Path]:
    """Every page, written into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in PAGES.items():
        path = out / name
        path.write_text(page(), encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: here)")
    for path in write(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
