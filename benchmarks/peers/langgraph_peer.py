"""LangGraph with a durable checkpointer: W1, W2 and W3 as one `StateGraph` each.

    benchmarks/.peers-venv/bin/python benchmarks/peers/langgraph_peer.py --db sqlite|postgres
        --url PATH|URL [--quick] [--repeat N] [--only W1,W2]

What is measured, so the comparison with Shoal is stated:

- The graph: one node per subtask and the DAG's edges (`add_edge(dep, node)` for one
  dependency, `add_edge([deps...], node)` for several, which waits for all of them, as the
  join in W1 and W3's two parents), from START to the roots and from the sinks to END. W1's
  200 middle nodes are parallel edges out of the root and run in one superstep. Each node is an
  `async` function that returns `{"done": 1}` into a state channel summed by `operator.add`
  (the least state a step can write), after `asyncio.sleep(delay)` in W3; the run checks the
  final count equals the number of subtasks.
- Durability: the checkpointer is on (`AsyncSqliteSaver` on a SQLite file in WAL mode with
  `synchronous=NORMAL`, the same settings as Shoal's SQLite; or `AsyncPostgresSaver` on a
  fresh PostgreSQL database, whose commits fsync as Shoal's do) and every run uses
  `durability="sync"`: each superstep's checkpoint is committed before the next superstep
  starts, LangGraph's equivalent of Shoal's commit-before-dispatch. Each run is a new thread id.
- The clock: `ainvoke` of the compiled graph, start to return, in this process (a library:
  no network, no HTTP, no worker processes; the nodes run on this event loop). Compiling the
  graph and opening the checkpointer are outside the clock.
"""

from __future__ import annotations

import asyncio
import operator
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Annotated, Any, TypedDict

from _common import NOTES, Workload, emit, measure, parse_args, timed
from _workloads import Dag
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

PACKAGES = ["langgraph"]


class State(TypedDict):
    done: Annotated[int, operator.add]


def node(delay: float) -> Any:
    """A subtask: optionally sleep, then add one to the count."""

    async def run(state: State) -> dict[str, int]:
        if delay:
            await asyncio.sleep(delay)
        return {"done": 1}

    return run


def build(dag: Dag, delay: float, saver: BaseCheckpointSaver[Any]) -> Any:
    """`dag` as a compiled StateGraph with `saver` as its checkpointer."""
    graph = StateGraph(State)
    for name in dag:
        graph.add_node(name, node(delay))
    needed = {dep for deps in dag.values() for dep in deps}
    for name, deps in dag.items():
        if not deps:
            graph.add_edge(START, name)
        elif len(deps) == 1:
            graph.add_edge(deps[0], name)
        else:
            graph.add_edge(list(deps), name)
        if name not in needed:
            graph.add_edge(name, END)
    return graph.compile(checkpointer=saver)


@asynccontextmanager
async def saver(kind: str, url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The checkpointer of `kind` on `url`, its tables created."""
    package = f"langgraph-checkpoint-{kind}"
    NOTES.append(f"{package} {metadata.version(package)}, durability=sync")
    if kind == "sqlite":
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with aiosqlite.connect(url) as conn:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=NORMAL")
            sqlite_saver = AsyncSqliteSaver(conn)
            await sqlite_saver.setup()
            yield sqlite_saver
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(url) as pg_saver:
        await pg_saver.setup()
        yield pg_saver


async def main_async() -> dict[str, object]:
    args = parse_args(__doc__.split("\n")[0])
    async with saver(args.db, args.url) as cp:
        graphs: dict[str, Any] = {}

        async def run_one(work: Workload) -> float:
            key = f"{work.key}:{len(work.dag)}"
            if key not in graphs:
                graphs[key] = build(work.dag, work.delay, cp)
            config = {"configurable": {"thread_id": uuid.uuid4().hex},
                      "recursion_limit": len(work.dag) + 10}
            start = time.perf_counter()
            out = await graphs[key].ainvoke({"done": 0}, config, durability="sync")
            seconds = timed(start)
            if out["done"] != len(work.dag):
                raise RuntimeError(f"{work.key}: {out['done']} of {len(work.dag)} nodes ran")
            return seconds

        return await measure(args, run_one)


if __name__ == "__main__":
    emit("langgraph", PACKAGES, main_async)
