"""What a task's report costs to render (`shoal.reports`): a generated report of about twenty
A4 pages (headings, paragraphs, lists, tables and code) as sanitised HTML, as a page, and as a
PDF with WeasyPrint.

    .venv/bin/python benchmarks/bench_reports.py [--sections N] [--repeat N]

One warm-up render first (WeasyPrint's import, fonts); then each step runs `--repeat` times and
its median and best wall time, and the process's CPU time per run, are printed.

`render_pdf` blocks its thread for that long, so a route runs it through `asyncio.to_thread`;
the second table shows what that costs the event loop beside it: the same PDF rendered
`--repeat` times on a thread while the loop wakes every millisecond (the lateness of its
wake-ups), with the heap settled first as a server's is (`shoal.heap.settle`, ADR 0019), and
the garbage collector's pauses meanwhile, which hold the GIL and so stop the loop too.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import resource
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pypdf
from rich.console import Console
from rich.table import Table

from shoal import heap
from shoal.reports import Report, markdown_to_html, render_pdf, report_page

PARAGRAPH = ("The planner split the work into independent steps; each ran on its own worker "
             "and passed review before its dependents started. Figures below are medians of "
             "three runs, and every step's output is kept with the task. ")


def section(n: int) -> str:
    """One section of the generated report: heading, prose, a list, a table and a code block."""
    rows = "".join(f"| step {n}.{i} | worker-{i % 3} | {0.5 + i * n % 7:.2f} s | "
                   f"{'ok' if i % 5 else 'retried'} |\n" for i in range(10))
    code = "\n".join(f"    result_{i} = run_step(plan[{i}], timeout={30 + i}, retries=3)"
                     for i in range(8))
    return (f"## {n}. Findings for area {n}\n\n{PARAGRAPH * 2}\n\n{PARAGRAPH}\n\n"
            f"- the first point about area {n}\n- a second, with `inline code`\n"
            f"- a third, **strongly** put\n\n### Timings\n\n"
            f"| step | worker | time | outcome |\n|---|---|--:|---|\n{rows}\n"
            f"```python\ndef area_{n}(plan):\n{code}\n    return result_0\n```\n")


def report(sections: int) -> Report:
    """The benchmark's report: an introduction and `sections` sections."""
    markdown = f"# Report\n\n{PARAGRAPH * 3}\n\n" + "\n".join(
        section(n) for n in range(1, sections + 1))
    return Report(title="Compare three designs for the job queue and recommend one " * 2,
                  markdown=markdown, created_at=datetime(2026, 11, 26, tzinfo=UTC),
                  task_id=uuid.uuid4(), subtitle="dag")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(run: Callable[[], object], repeat: int) -> tuple[list[float], float]:
    """Wall seconds of each of `repeat` runs, and CPU seconds per run."""
    walls = []
    gc.collect()  # the previous step's garbage is not this one's cost
    cpu = _cpu()
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        walls.append(time.perf_counter() - began)
    return walls, (_cpu() - cpu) / repeat


async def _late_wakeups(renders: int, subject: Report) -> list[float]:
    """Seconds each 1 ms sleep overslept while `renders` PDFs were made on a thread."""
    late: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - began - 0.001)

    async with asyncio.TaskGroup() as group:
        group.create_task(tick())
        for _ in range(renders):
            await asyncio.to_thread(render_pdf, subject)
        done.set()
    return late


def loop_table(subject: Report, renders: int) -> Table:
    """The event loop's lateness, and the collector's pauses, while PDFs render beside it."""
    heap.settle()
    pauses: list[tuple[int, float]] = []
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - began[0]))

    gc.callbacks.append(timed)
    try:
        late = sorted(asyncio.run(_late_wakeups(renders, subject)))
    finally:
        gc.callbacks.remove(timed)
    table = Table(title=f"The event loop while {renders} PDFs render on a thread "
                        "(asyncio.to_thread), heap settled")
    for column in ("measure", "p50", "p99", "max", "count"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row("1 ms sleep: late by", *(f"{x * 1000:.1f} ms" for x in (
        late[len(late) // 2], late[int(len(late) * 0.99)], late[-1])), f"{len(late):,}")
    for generation in (0, 1, 2):
        times = sorted(t for g, t in pauses if g == generation) or [0.0]
        table.add_row(f"gen {generation} collection", f"{statistics.median(times) * 1000:.1f} ms",
                      "", f"{times[-1] * 1000:.1f} ms",
                      str(sum(1 for g, _ in pauses if g == generation)))
    return table


def main() -> None:
    """Render the report's HTML, page and PDF `--repeat` times each and print a table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sections", type=int, default=19, help="19 make about 20 pages")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    subject = report(args.sections)
    pdf = render_pdf(subject)  # warm-up
    pages = len(pypdf.PdfReader(io.BytesIO(pdf)).pages)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("markdown_to_html", lambda: markdown_to_html(subject.markdown)),
        ("report_page", lambda: report_page(subject)),
        ("render_pdf", lambda: render_pdf(subject)),
    ]
    table = Table(title=f"A report of {len(subject.markdown):,} characters of Markdown: "
                        f"{pages} pages, {len(pdf):,} bytes of PDF; {args.repeat} runs")
    for column in ("step", "median", "best", "CPU per run", "per page"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for name, run in steps:
        walls, cpu = measure(run, args.repeat)
        median = statistics.median(walls)
        table.add_row(name, f"{median:.3f} s", f"{min(walls):.3f} s", f"{cpu:.3f} s",
                      f"{median / pages * 1000:.1f} ms")
    Console().print(table)
    Console().print(loop_table(subject, args.repeat))


if __name__ == "__main__":
    main()
