"""`shoal eval research`: the research workflow measured on the bundled evaluation set
(`shoal.evals.research`), printed as tables and written as JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shoal.cli.base import TokenOpt, console, err, run, settings_from_env
from shoal.logs import configure_logging

if TYPE_CHECKING:  # imported where used: `shoal`'s other commands start without them
    from shoal.config import Settings
    from shoal.evals.research.goldset import GoldSet
    from shoal.evals.research.judge import Judge
    from shoal.evals.research.recall import Retrieval
    from shoal.evals.research.results import EndToEnd

eval_app = typer.Typer(help="Measure Shoal on its bundled evaluation sets.",
                       no_args_is_help=True)

EMBEDDINGS = ("auto", "fake", "none")
NOT_MEASURED = "not measured"


@eval_app.command("research")
def research(
    server: Annotated[str | None, typer.Option(
        help="Run the questions on this control plane, signed in as `shoal login` keeps you "
             "(or with --token), on its workers' models; default: an embedded Shoal of its "
             "own.")] = None,
    token: TokenOpt = None,
    retrieval_only: Annotated[bool, typer.Option(
        "--retrieval-only", help="Measure search alone: no model, no server.")] = False,
    embeddings: Annotated[str, typer.Option(
        help="Hybrid search's embeddings: auto (SHOAL_EMBEDDING_MODEL if set), fake (the "
             "bundled fake, hashed words) or none (BM25 alone).")] = "auto",
    limit: Annotated[int | None, typer.Option(min=1, help="Run the first N questions.")] = None,
    questions: Annotated[str | None, typer.Option(
        help="Run these questions (ids, comma-separated).")] = None,
    output: Annotated[Path, typer.Option(help="Where to write the results (JSON).")] = Path(
        "eval-research.json"),
    parallel: Annotated[int, typer.Option(min=1, max=8, help="Tasks run at once.")] = 2,
    tool: Annotated[list[str] | None, typer.Option(
        help="The tool the tasks prefer (repeatable), as shoal submit --tool: e.g. anthropic "
             "with ANTHROPIC_API_KEY on the worker.")] = None,
    judge: Annotated[bool, typer.Option(
        help="Also have the model at SHOAL_OPENAI_COMPAT_BASE_URL judge each answer against "
             "the gold one (shown apart).")] = False,
) -> None:
    """Run the bundled research questions: retrieval recall@5 and MRR, then each question as a
    research task (on an embedded Shoal with the demo model, or on --server) scored against
    its gold answer."""
    if embeddings not in EMBEDDINGS:
        err.print(f"--embeddings is one of {', '.join(EMBEDDINGS)}, not {embeddings!r}.")
        raise typer.Exit(2)
    gold = _chosen(questions, limit)
    settings = settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))
    configure_logging("warning")  # the embedded Shoal's own log would bury the progress
    judged = _judge(settings) if judge and not retrieval_only else None
    document = run(lambda: _evaluate(gold, settings, server=server, token=token,
                                     retrieval_only=retrieval_only, embeddings=embeddings,
                                     parallel=parallel, tools=tool or [], judge=judged))
    output.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    console.print(f"Results: {output}", highlight=False)


def _chosen(ids: str | None, limit: int | None) -> GoldSet:
    from shoal.evals.research.goldset import load_set

    gold = load_set()
    wanted = [i.strip() for i in ids.split(",") if i.strip()] if ids else None
    try:
        return gold.chosen(wanted, limit)
    except KeyError as exc:
        err.print(f"No question {exc.args[0]} in the set; its questions are: "
                  f"{', '.join(q.id for q in gold.questions)}.", soft_wrap=True)
        raise typer.Exit(2) from None


def _judge(settings: Settings) -> Judge:
    from shoal.evals.research.judge import Judge

    if not settings.openai_compat_base_url:
        err.print("--judge needs a real model to judge with: set SHOAL_OPENAI_COMPAT_BASE_URL "
                  "(and SHOAL_OPENAI_COMPAT_MODEL, SHOAL_OPENAI_COMPAT_API_KEY).", soft_wrap=True)
        raise typer.Exit(2)
    return Judge(settings.openai_compat_base_url, settings.openai_compat_model,
                 settings.openai_compat_api_key)


async def _evaluate(gold: GoldSet, settings: Settings, *, server: str | None,
                    token: str | None, retrieval_only: bool, embeddings: str, parallel: int,
                    tools: list[str], judge: Judge | None) -> dict[str, Any]:
    retrieval, note = await _retrieval(gold, settings, embeddings)
    _show_retrieval(gold, retrieval, note)
    end_to_end = None
    if not retrieval_only:
        end_to_end = await _end_to_end(gold, settings, server=server, token=token,
                                       parallel=parallel, tools=tools, judge=judge)
        _show_end_to_end(end_to_end)
    from shoal.evals.research.results import results_document

    return results_document(gold, retrieval, hybrid_note=note, end_to_end=end_to_end)


async def _retrieval(gold: GoldSet, settings: Settings,
                     embeddings: str) -> tuple[list[Retrieval], str]:
    """BM25 and (with an embedder) hybrid recall, indexed in a folder removed after; and what
    hybrid search used, or why it did not run."""
    from shoal.evals.research.recall import fake_embedder, measure_retrieval
    from shoal.retrieval.embeddings import embedder_from_settings

    with tempfile.TemporaryDirectory(prefix="shoal-eval-index-") as folder:
        index_dir = Path(folder)
        if embeddings == "fake":
            async with fake_embedder() as fake:
                return (await measure_retrieval(gold, index_dir=index_dir, embedder=fake),
                        "the bundled fake embeddings (hashed words, not a learned model)")
        configured = embedder_from_settings(settings) if embeddings == "auto" else None
        note = (f"{configured.key}" if configured else
                "not run: no embedding model (set SHOAL_EMBEDDING_MODEL, or --embeddings fake)")
        return await measure_retrieval(gold, index_dir=index_dir, embedder=configured), note


@contextlib.asynccontextmanager
async def _control_plane(settings: Settings, *, server: str | None, token: str | None,
                         slots: int) -> AsyncIterator[tuple[Any, str, str]]:
    """A client of the control plane the questions run on — `server`, signed in as the CLI
    is, else an embedded one in a temporary folder — with its URL and its model."""
    from shoal.cli.client import ShoalClient, load_credentials
    from shoal.cli.credentials import CredentialStore

    if server is not None or token is not None:
        store = CredentialStore()
        creds = await asyncio.to_thread(load_credentials, store, server, token)
        async with ShoalClient(creds, store=store, timeout=120) as client:
            yield client, creds.server, "the models of the server's workers"
        return
    from shoal.api.listen import bind_socket
    from shoal.cli.embedded import embedded_shoal, up_settings

    with tempfile.TemporaryDirectory(prefix="shoal-eval-") as folder:
        own = up_settings(settings.model_copy(update={
            "data_dir": Path(folder), "database_url": None, "redis_url": None}))
        async with embedded_shoal(own, slots=slots, sock=bind_socket("127.0.0.1", 0),
                                  keep_session=False) as shoal, ShoalClient(
                shoal.creds, timeout=120) as client:
            yield client, f"embedded ({shoal.url})", shoal.model_label


async def _end_to_end(gold: GoldSet, settings: Settings, *, server: str | None,
                      token: str | None, parallel: int, tools: list[str],
                      judge: Judge | None) -> EndToEnd:
    from shoal.evals.research.judge import described
    from shoal.evals.research.reading import foreign_terms
    from shoal.evals.research.results import EndToEnd
    from shoal.evals.research.runs import run_set

    terms = await asyncio.to_thread(foreign_terms, gold.files)
    async with _control_plane(settings, server=server, token=token,
                              slots=max(2, parallel)) as (client, where, model):
        preferred = f" (preferring {', '.join(tools)})" if tools else ""
        console.print(f"Running {len(gold.questions)} questions as research tasks on {where}; "
                      f"model: {model}{preferred}", soft_wrap=True, highlight=False)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as bar:
            overall = bar.add_task("questions", total=len(gold.questions))

            def told(question: str, what: str) -> None:
                if what == "scored":
                    bar.advance(overall)
                else:
                    bar.update(overall, description=f"{question}: {what}")

            scores = await run_set(client, gold, terms=terms, parallel=parallel, tools=tools,
                                   judge=judge, progress=told)
    return EndToEnd(where, model, described(judge), scores)


def _ratio(value: float | None, absent: str = "-") -> str:
    return absent if value is None else f"{value:.2f}"


def _show_retrieval(gold: GoldSet, retrieval: Sequence[Retrieval], note: str) -> None:
    table = Table(title="Retrieval, no model: recall@5 and MRR (first hit in the top 10)",
                  title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("question", no_wrap=True)
    for r in retrieval:
        table.add_column(f"{r.mode}\nrecall@5", justify="right")
        table.add_column(f"{r.mode}\nMRR", justify="right")
    for question in gold.questions:
        figures = [r.of_question(question.id) for r in retrieval]
        if all(f is None for f in figures):
            continue
        table.add_row(question.id, *[x for f in figures for x in (
            ("-", "-") if f is None else (f"{f[0]:.2f}", f"{f[1]:.2f}"))])
    table.add_row("[bold]all parts[/]", *[x for r in retrieval for x in (
        f"[bold]{r.recall_at_k:.2f}[/]", f"[bold]{r.mrr:.2f}[/]")])
    console.print(table)
    console.print(f"Hybrid: {note}.", soft_wrap=True, highlight=False)


def _show_end_to_end(result: EndToEnd) -> None:
    from shoal.evals.research.judge import described
    from shoal.evals.research.scores import Summary

    judged = result.judge != described(None)
    table = Table(title="End to end: each question as a research task", title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("question", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for name in ("answered", "gaps", "errors", "prec", "res", "other", "facts",
                 *(["judge"] if judged else [])):
        table.add_column(name, justify="right", no_wrap=True)
    for score in result.scores:
        table.add_row(score.question, score.status,
                      *_cells(Summary([score]).figures(), judged=judged))
    figures = Summary(result.scores).figures()
    table.add_row("[bold]all[/]", f"{figures['completed']}/{figures['tasks']} completed",
                  *_cells(figures, judged=judged))
    console.print(table)
    console.print(
        "answered: answerable parts the task counts answered; gaps: unanswerable parts the "
        "report lists as gaps; errors: answerable parts listed as gaps + unanswerable parts "
        "not listed; prec, res: citation precision and resolution by the engine's check "
        f"({NOT_MEASURED} where a task's detail has none: —); other: sentences naming the "
        "demo's sample corpus; facts: gold facts found in the cited sentences"
        + ("; judge: the judge model's verdicts" if judged else "") + ". How each is "
        "computed: docs/guides/evaluation.md.", soft_wrap=True, highlight=False, style="dim")


def _cells(figures: dict[str, Any], *, judged: bool) -> list[str]:
    errors = figures["errors"]
    cells = [_ratio(figures["answered"]), _ratio(figures["gaps_listed"]),
             f"{errors['answerable_as_gap']}+{errors['unanswerable_not_gap']}",
             _ratio(figures["citation_precision"], "—"),
             _ratio(figures["citation_resolution"], "—"),
             str(figures["foreign_sentences"]), _ratio(figures["facts_found"])]
    return cells + ([_ratio(figures["judged"])] if judged else [])
