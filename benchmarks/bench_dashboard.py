"""The dashboard in a real browser (Debian's chromium through Playwright) on a task of 500
subtasks: how soon its page paints, and how soon a node changes colour after its event.

    .venv/bin/python benchmarks/bench_dashboard.py [--db sqlite|postgres] [--repeat N]

As `bench_dag.py` does, the control plane runs in this process on a fresh database, with the
benchmark workers (a no-op `echo` tool) in a second process. Measured:

- **Page**: a finished task of 500 subtasks (`W1`'s shape: one root → 498 → one join) opened
  in a fresh tab, `--repeat` times: first contentful paint (the browser's own
  `first-contentful-paint` entry), and when the graph's 500 nodes were first drawn (the page's
  `shoal:graph-drawn` mark), both from the start of navigation; and how long the page takes to
  replay the task's history (`shoal:caught-up`, when the replay's last event was applied).
  Targets: first contentful paint < 1 s (issue 17), the graph drawn < 1 s.
- **Event → colour**: a task page is open on a task whose root is held for two seconds. For
  every `subtask_update` the control plane published after the page was drawn, the time from
  the event's timestamp to the first animation frame after the node's `data-status` took that
  value (its colour is painted in that frame), split into event → bus (this process hears it
  as the socket does), event → the page's socket, and socket → colour. Both clocks are this
  machine's wall clock. Target p95 < 100 ms. Two runs:
  - burst: then 498 subtasks run at once and a join after them (some 1,300 status events in
    about a second, the worst burst a page sees);
  - steady: a chain of 500 subtasks of 20 ms each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from _workloads import Dag, Workload, chain, fan_out, plan_for
from bench_dag import TERMINAL, cluster, postgres_reachable, quiet_logs
from playwright.async_api import Browser, Page, async_playwright
from rich.console import Console
from rich.table import Table

from shoal.events import EventType

CHROMIUM = Path(os.environ.get("SHOAL_CHROMIUM", "/usr/bin/chromium"))
QUIET = ["--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--no-first-run", "--disable-gpu"]
WIDTH = 498  # root → 498 → join: 500 subtasks
HOLD = 2.0  # seconds the event → colour run's root waits, while the page opens
STEP = 0.02  # seconds each subtask of the steady run takes

# Before any of the page's scripts: the session (as after a sign-in), and a recorder of every
# node's status changes, stamped at the next animation frame (when the new colour is painted).
INIT = """
sessionStorage.setItem("shoal.access", %(access)s);
sessionStorage.setItem("shoal.refresh", %(refresh)s);
window.__changes = [];
window.__arrived = {};  // "subtask id status" → when its event reached the page's socket
const Native = WebSocket;
window.WebSocket = function (...args) {
  const socket = new Native(...args);
  socket.addEventListener("message", (message) => {
    const at = performance.timeOrigin + performance.now();
    const frame = JSON.parse(message.data);
    for (const item of frame.type === "batch" ? frame.items : [frame]) {
      if (item.type === "subtask_update") {
        window.__arrived[`${item.data.subtask_id} ${item.data.status}`] ??= at;
      }
    }
  });
  return socket;
};
Object.assign(window.WebSocket, Native);
new MutationObserver((records) => {
  const seen = records.filter((r) => r.target.classList?.contains("node"))
    .map((r) => [r.target.dataset.subtaskId, r.target.dataset.status]);
  if (seen.length) requestAnimationFrame(() => {
    const at = performance.timeOrigin + performance.now();
    for (const [id, status] of seen) window.__changes.push([id, status, at]);
  });
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-status"],
                      childList: true});
"""
MARKS = """() => {
  const get = (name) => performance.getEntriesByName(name)[0]?.startTime ?? null;
  return {fcp: get("first-contentful-paint"), graph: get("shoal:graph-drawn"),
          caught_up: get("shoal:caught-up"),
          nodes: document.querySelectorAll("#graph .node").length};
}"""


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=QUIET)
        try:
            yield browser
        finally:
            await browser.close()


async def signed_in_page(browser: Browser, url: str, tokens: dict[str, Any]) -> Page:
    # Playwright's polling evaluates strings, which the dashboard's CSP forbids
    context = await browser.new_context(base_url=url, bypass_csp=True)
    await context.add_init_script(INIT % {"access": json.dumps(tokens["access_token"]),
                                          "refresh": json.dumps(tokens["refresh_token"])})
    return await context.new_page()


async def page_load(browser: Browser, url: str, tokens: dict[str, Any], task_id: str,
                    repeat: int) -> list[dict[str, float]]:
    """First contentful paint, graph drawn and caught up, each from navigation start (ms)."""
    loads = []
    for _ in range(repeat + 1):  # the first warms the server's and the browser's caches
        page = await signed_in_page(browser, url, tokens)
        await page.goto(f"/tasks/{task_id}")
        await page.wait_for_function("performance.getEntriesByName('shoal:caught-up').length",
                                     timeout=60_000)
        marks = await page.evaluate(MARKS)
        assert marks["nodes"] == WIDTH + 2, marks
        loads.append(marks)
        await page.context.close()
    return loads[1:]


async def event_to_colour(bench: Any, browser: Browser, url: str, tokens: dict[str, Any],
                          dag: Dag, delay: float) -> list[tuple[float, float, float]]:
    """Milliseconds from each live `subtask_update` to the frame that paints its colour, and
    from it to its publication on the bus (this process hears it as the socket does)."""
    plan = plan_for(dag, delay)
    plan[0]["options"]["delay"] = HOLD
    published: list[tuple[str, str, float, float]] = []
    async with bench.srv.services.bus.subscribe() as sub:
        resp = await bench.client.post("/api/v1/tasks", json={
            "description": "dashboard benchmark: event to colour", "plan": plan})
        resp.raise_for_status()
        task_id = resp.json()["task_id"]
        page = await signed_in_page(browser, url, tokens)
        await page.goto(f"/tasks/{task_id}")
        await page.wait_for_function("performance.getEntriesByName('shoal:caught-up').length")
        drawn = datetime.now().timestamp() * 1000
        async with asyncio.timeout(120):
            async for event in sub:
                if str(event.task_id) != task_id:
                    continue
                if event.type == EventType.SUBTASK_UPDATE:
                    published.append((event.data["subtask_id"], event.data["status"],
                                      event.timestamp.timestamp() * 1000,
                                      datetime.now().timestamp() * 1000))
                if event.type in TERMINAL:
                    break
    await page.wait_for_function(
        "() => [...document.querySelectorAll('#graph .node')]"
        ".every((n) => n.dataset.status === 'completed')")
    changes = await page.evaluate("window.__changes")
    arrived = await page.evaluate("window.__arrived")
    await page.context.close()
    painted: dict[tuple[str, str], float] = {}
    for sid, status, at in changes:
        painted.setdefault((sid, status), at)
    return [(painted[(sid, status)] - at, heard - at, arrived[f"{sid} {status}"] - at)
            for sid, status, at, heard in published
            if at > drawn and (sid, status) in painted and f"{sid} {status}" in arrived]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    async with cluster(args.db) as bench, chromium() as browser:
        url = bench.srv.url
        resp = await bench.client.post("/api/v1/auth/login", json={
            "username": "bench", "password": "bench-pass-1"})
        resp.raise_for_status()
        tokens = resp.json()
        done = await bench.run(Workload("D500", f"1→{WIDTH}→1", fan_out(WIDTH), 0.0))
        loads = await page_load(browser, url, tokens, done.task_id, args.repeat)
        runs = {"burst": await event_to_colour(bench, browser, url, tokens, fan_out(WIDTH), 0.0),
                "steady": await event_to_colour(bench, browser, url, tokens,
                                                chain(WIDTH + 2), STEP)}
    out: dict[str, Any] = {"db": args.db, "subtasks": WIDTH + 2, "repeat": args.repeat}
    table = Table(title=f"The dashboard on a task of {WIDTH + 2} subtasks ({args.db})")
    for column in ("measure", "median ms", "p95 ms", "max ms", "n", "target"):
        table.add_column(column, justify="right")
    for key, name, target in (("fcp", "first contentful paint", "< 1000"),
                              ("graph", "graph drawn", "< 1000"),
                              ("caught_up", "history replayed", "")):
        values = [load[key] for load in loads]
        out[key] = {"median": round(statistics.median(values), 1),
                    "max": round(max(values), 1)}
        table.add_row(name, f"{statistics.median(values):.0f}", "",
                      f"{max(values):.0f}", str(len(values)), target)
    for run, latencies in runs.items():
        for key, name, target, values in (
                ("event_to_colour", "event → colour", "p95 < 100", [c for c, _, _ in latencies]),
                ("event_to_bus", "  event → bus", "", [b for _, b, _ in latencies]),
                ("event_to_socket", "  event → socket", "", [w for _, _, w in latencies]),
                ("socket_to_colour", "  socket → colour", "", [c - w for c, _, w in latencies])):
            if not values:
                continue
            out.setdefault(run, {})[key] = {
                "median": round(statistics.median(values), 1),
                "p95": round(percentile(values, 0.95), 1),
                "max": round(max(values), 1), "n": len(values)}
            table.add_row(f"{run}: {name}", f"{statistics.median(values):.1f}",
                          f"{percentile(values, 0.95):.1f}", f"{max(values):.1f}",
                          str(len(values)), target)
    console.print(table)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium.")
    if args.db == "postgres" and not postgres_reachable():
        sys.exit("PostgreSQL is not reachable.")
    quiet_logs()
    console = Console()
    console.print_json(data=asyncio.run(main_async(args, console)))


if __name__ == "__main__":
    main()
