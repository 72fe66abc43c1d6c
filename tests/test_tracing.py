"""Optional traces: nothing without the OTel endpoint; derived ids; OTLP/HTTP export."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shoal.demo.fake.server import bind, serving
from shoal.protocol import ExecuteTask, ResultStatus, TaskResult, Usage
from shoal.tracing import (
    ENDPOINT,
    Tracing,
    attempt_traceparent,
    configure,
    parse_traceparent,
    span_id_of,
    traceparent,
)

OTEL_VARIABLES = (ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
                  "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME")


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTel variable from the machine running the tests."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def exported() -> AsyncIterator[tuple[Tracing, InMemorySpanExporter]]:
    """Tracing into memory, closed after the test."""
    spans = InMemorySpanExporter()
    tracing = configure("shoal-test", exporter=spans)
    assert tracing is not None
    yield tracing, spans
    await tracing.close()


def execute(*, traceparent: str | None = None) -> ExecuteTask:
    return ExecuteTask(attempt_id=uuid.uuid4(), fence=1, task_id=uuid.uuid4(),
                       subtask_id=uuid.uuid4(), role="coder", tool="echo", name="step",
                       instructions="do it", traceparent=traceparent)


def result(msg: ExecuteTask, status: ResultStatus = "succeeded") -> TaskResult:
    return TaskResult(attempt_id=msg.attempt_id, fence=msg.fence, status=status,
                      usage=Usage(input_tokens=10, output_tokens=4, cost_usd=0.25),
                      error="it broke" if status == "failed" else None)


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@contextlib.asynccontextmanager
async def otlp_collector() -> AsyncIterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """A local OTLP/HTTP trace receiver: its root URL and the requests it received."""
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        received.append(message)
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    with bind("127.0.0.1", 0) as sock:
        async with serving(collector, sock, handle_signals=False, log_level="warning") as (
                root, _):
            yield root, received


def test_nothing_is_set_up_without_the_endpoint() -> None:
    """Without the endpoint variable there is no tracing, no global provider, no traceparent."""
    assert configure("shoal-control-plane") is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert attempt_traceparent(uuid.uuid4(), uuid.uuid4()) is None
    assert "traceparent" not in execute().model_dump_json()


def test_the_sdk_is_not_even_loaded_without_the_endpoint() -> None:
    """A control plane and a worker import, and configure, without loading the SDK's traces
    or the exporter (redis-py loads the SDK's metrics by itself)."""
    code = ("import sys; import shoal.api.app, shoal.worker.agent, shoal.cli.embedded; "
            "from shoal.tracing import configure; "
            "assert configure('shoal-worker') is None; "
            "loaded = [m for m in sys.modules if m.startswith(("
            "'opentelemetry.sdk.trace', 'opentelemetry.exporter'))]; "
            "assert not loaded, loaded")
    env = {k: v for k, v in os.environ.items() if k not in OTEL_VARIABLES}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_a_disabled_sdk_wins_over_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true turns tracing off even with an endpoint."""
    monkeypatch.setenv(ENDPOINT, "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert configure("shoal-worker") is None


def test_ids_derive_from_shoal_ids() -> None:
    """A traceparent names the task's UUID as trace and 64 bits of a UUID as span."""
    task, subtask = uuid.uuid4(), uuid.uuid4()
    header = traceparent(task.int, span_id_of(subtask), sampled=True)
    assert header == f"00-{task.hex}-{subtask.hex[16:]}-01"
    assert parse_traceparent(header) == (task.int, span_id_of(subtask), True)
    assert parse_traceparent(header[:-2] + "00") == (task.int, span_id_of(subtask), False)
    for bad in ("", "00-xyz", f"00-{'0' * 32}-{'1' * 16}-01", f"01-{task.hex}-{'1' * 16}-01"):
        assert parse_traceparent(bad) is None


async def test_the_attempt_span_honours_the_traceparent(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    """An attempt's span is the child of the span its traceparent names, with usage."""
    tracing, spans = exported
    other_trace, other_parent = uuid.uuid4().int, 0x1234
    msg = execute(traceparent=traceparent(other_trace, other_parent, sampled=True))
    attempt = tracing.attempt(msg)
    assert attempt is not None
    attempt.end(result(msg, "failed"))
    await tracing.flush()
    [span] = spans.get_finished_spans()
    assert span.name == "shoal.attempt"
    assert span.context is not None
    assert (span.context.trace_id, span.context.span_id) == (other_trace,
                                                             span_id_of(msg.attempt_id))
    assert parent_of(span) == other_parent
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.input_tokens"] == 10
    assert span.attributes["shoal.cost_usd"] == 0.25
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.status.description == "it broke"


async def test_without_a_traceparent_the_attempt_derives_its_parent(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    """With no traceparent (an older control plane), the parent is the subtask's span."""
    tracing, spans = exported
    msg = execute()
    attempt = tracing.attempt(msg)
    assert attempt is not None
    attempt.end(result(msg))
    await tracing.flush()
    [span] = spans.get_finished_spans()
    assert span.context is not None
    assert span.context.trace_id == msg.task_id.int
    assert parent_of(span) == span_id_of(msg.subtask_id)
    assert span.status.status_code is trace.StatusCode.UNSET


async def test_an_unsampled_traceparent_records_nothing(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    """A traceparent that is not sampled means no attempt span and no model-call spans."""
    tracing, _ = exported
    msg = execute(traceparent=traceparent(uuid.uuid4().int, 7, sampled=False))
    assert tracing.attempt(msg) is None


async def test_ratio_sampling_is_even_over_task_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 50 % ratio keeps about half of the tasks, and every process agrees on which."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    one = configure("a", exporter=InMemorySpanExporter())
    two = configure("b", exporter=InMemorySpanExporter())
    assert one is not None
    assert two is not None
    ids = [uuid.uuid4().int for _ in range(2000)]
    kept = [one.sampled(t) for t in ids]
    assert 800 < sum(kept) < 1200
    assert kept == [two.sampled(t) for t in ids]
    await one.close()
    await two.close()


async def test_spans_go_to_the_endpoint_over_otlp_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the endpoint set, spans reach a collector there as OTLP/HTTP protobuf."""
    async with otlp_collector() as (root, received):
        monkeypatch.setenv(ENDPOINT, root)
        tracing = configure("shoal-worker")
        assert tracing is not None
        msg = execute()
        attempt = tracing.attempt(msg)
        assert attempt is not None
        attempt.end(result(msg))
        await tracing.close()
    [request] = received
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "shoal-worker"
    [span] = resource_spans.scope_spans[0].spans
    assert span.name == "shoal.attempt"
    assert span.trace_id == msg.task_id.bytes
