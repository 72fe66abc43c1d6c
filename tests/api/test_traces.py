"""A task run end to end is one trace: task → subtasks → attempts → model calls."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.demo.model import running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tracing import ENDPOINT, attempt_traceparent, configure, span_id_of, traceparent
from tests.runtime.harness import echo_worker, login, sse_events, submit, task_detail
from tests.test_tracing import otlp_collector

PLAN = [{"name": "store", "tool": "openai_compat",
         "description": "Write todo.py: a TodoList class with add/complete/remove/list."},
        {"name": "tests", "tool": "openai_compat", "dependencies": ["store"],
         "description": "Write test_todo.py: pytest tests for todo.py."}]


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def attribute(span: ReadableSpan, name: str) -> object:
    assert span.attributes is not None
    return span.attributes.get(name)


def number(span: ReadableSpan, name: str) -> float:
    value = attribute(span, name)
    assert isinstance(value, int | float)
    return value


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_a_task_is_one_trace_of_nested_spans(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task, subtask, attempt and model-call spans share the task's trace, each the child of
    the one above it, with tokens and cost where they are spent."""
    monkeypatch.setenv("SHOAL_MODEL_PRICES", '{"shoal-demo": [1.0, 2.0]}')
    plane_spans, worker_spans = InMemorySpanExporter(), InMemorySpanExporter()
    plane = configure("shoal-control-plane", exporter=plane_spans)
    worker = configure("shoal-worker", exporter=worker_spans)
    assert plane is not None
    assert worker is not None
    async with running_demo_model() as url, running_server(settings, tracing=plane) as srv:
        client = await login(srv, settings)
        tool = OpenAICompatTool(base_url=url, api_key="sk-test", model="shoal-demo")
        async with echo_worker(srv, settings, tools={"openai_compat": tool}, tracing=worker):
            resp = await client.post("/api/v1/tasks", json={
                "description": "A todo app", "plan": PLAN, "quality": "off"})
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
            assert events[-1]["type"] == "task_complete"
            detail = await task_detail(client, task_id)
        await client.aclose()
    # The server has stopped: the spans of its last events are emitted by now.
    await plane.close()
    await worker.close()
    spans = [*plane_spans.get_finished_spans(), *worker_spans.get_finished_spans()]
    task = uuid.UUID(task_id)
    assert {s.context.trace_id for s in spans if s.context} == {task.int}

    [task_span] = named(spans, "shoal.task")
    assert (span_id(task_span), parent_id(task_span)) == (span_id_of(task), None)
    assert attribute(task_span, "shoal.status") == "completed"
    assert attribute(task_span, "shoal.cost_usd") == pytest.approx(detail["usage"]["cost_usd"])

    subtasks = named(spans, "shoal.subtask")
    planned = {s["subtask_id"] for s in detail["subtasks"]}
    assert Counter(str(attribute(s, "shoal.subtask_id")) for s in subtasks) == Counter(planned)
    assert {parent_id(s) for s in subtasks} == {span_id(task_span)}

    attempts = named(spans, "shoal.attempt")
    assert len(attempts) >= len(planned)
    assert {parent_id(s) for s in attempts} <= {span_id(s) for s in subtasks}
    assert {attribute(s, "gen_ai.request.model") for s in attempts} == {"shoal-demo"}

    calls = named(spans, "chat ")
    assert calls
    assert {s.kind for s in calls} == {SpanKind.CLIENT}
    assert {parent_id(s) for s in calls} == {span_id(s) for s in attempts}
    for call in calls:
        assert attribute(call, "gen_ai.request.model") == "shoal-demo"
        assert number(call, "gen_ai.usage.input_tokens") > 0
        assert number(call, "shoal.cost_usd") > 0
    tokens = sum(number(c, "gen_ai.usage.input_tokens") for c in calls)
    assert tokens == number(task_span, "gen_ai.usage.input_tokens")


async def test_attempts_carry_the_subtask_traceparent_while_tracing(settings: Settings) -> None:
    """While a control plane traces, attempts it dispatches name their subtask's span."""
    task, subtask = uuid.uuid4(), uuid.uuid4()
    plane = configure("shoal-control-plane", exporter=InMemorySpanExporter())
    assert plane is not None
    async with running_server(settings, tracing=plane):
        assert attempt_traceparent(task, subtask) == traceparent(
            task.int, span_id_of(subtask), sampled=True)
    assert attempt_traceparent(task, subtask) is None
    await plane.close()


async def test_a_control_plane_traces_to_the_endpoint_it_is_given(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set, `shoal serve` sends its spans there itself."""
    async with otlp_collector() as (root, received):
        monkeypatch.setenv(ENDPOINT, root)
        async with running_server(settings) as srv:
            client = await login(srv, settings)
            async with echo_worker(srv, settings):
                task_id = await submit(client, [{"name": "a", "description": "x",
                                                 "tool": "echo"}])
                await sse_events(client, task_id, until={"task_complete", "task_failed"})
            await client.aclose()
    spans = [span for request in received for resources in request.resource_spans
             for scope in resources.scope_spans for span in scope.spans]
    assert sorted(span.name for span in spans) == ["shoal.subtask", "shoal.task"]
    assert {span.trace_id for span in spans} == {uuid.UUID(task_id).bytes}


async def test_a_control_plane_without_the_endpoint_does_not_trace(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without OTEL_EXPORTER_OTLP_ENDPOINT a control plane sends attempts no traceparent."""
    monkeypatch.delenv(ENDPOINT, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    async with running_server(settings):
        assert attempt_traceparent(uuid.uuid4(), uuid.uuid4()) is None
