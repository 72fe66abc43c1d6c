"""Optional OpenTelemetry traces: task → subtask → attempt → model call.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. Then
`configure` builds a tracer provider of this process's own (never the global one) that sends
spans in batches over OTLP/HTTP; otherwise it returns None, the SDK is not even imported, and
a caller's `if tracing is not None` is all tracing costs.

Tasks and subtasks live for minutes and outlive a control-plane restart, so no span is held
open: each is emitted when it ends, with its recorded start, under ids derived from Shoal's
own. The trace id is the task's UUID (a trace is found by its task id), and the span id of a
task, subtask or attempt is the low 64 bits of its UUID. So spans emitted by different
processes, before and after restarts, form one tree. The control plane emits task and subtask
spans (`api/traces.py`); the worker emits each attempt's span and, through its tool, one span
per model call. `execute_task` carries the subtask span's `traceparent` while the control
plane traces; a worker given none derives the same parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import trace
from opentelemetry.context import Context

from shoal import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
    from opentelemetry.util.types import AttributeValue

    from shoal.protocol import ExecuteTask, TaskResult, Usage

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_ENDPOINTS = (ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_MASK64 = (1 << 64) - 1
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MAX_ERROR = 500  # characters of an error message kept in a span's status

# The (trace id, span id) the span being started takes, when derived rather than random.
_next_ids: ContextVar[tuple[int, int] | None] = ContextVar("shoal_next_ids", default=None)
# The tracing of each control plane in this process that traces: attempts carry a traceparent.
_propagating: list[Tracing] = []

Attributes = Mapping[str, "AttributeValue"]


def span_id_of(value: uuid.UUID) -> int:
    """The span id of the task, subtask or attempt `value` names: the low 64 bits of its UUID."""
    return value.int & _MASK64 or 1  # a random UUID's variant bits make it non-zero anyway


def traceparent(trace_id: int, span_id: int, *, sampled: bool) -> str:
    """A W3C `traceparent` header value naming the span `span_id` of trace `trace_id`."""
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def parse_traceparent(value: str) -> tuple[int, int, bool] | None:
    """(trace id, span id, sampled) of a W3C `traceparent`; None when it is not one."""
    found = _TRACEPARENT.fullmatch(value.strip().lower())
    if found is None:
        return None
    trace_id, span_id = int(found[1], 16), int(found[2], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, bool(int(found[3], 16) & 1)


def attempt_traceparent(task_id: uuid.UUID, subtask_id: uuid.UUID) -> str | None:
    """The `traceparent` for an attempt of this subtask: its subtask's span. None unless a
    control plane of this process traces (then `execute_task` goes without one)."""
    if not _propagating:
        return None
    tracing = _propagating[-1]
    return traceparent(task_id.int, span_id_of(subtask_id),
                       sampled=tracing.sampled(task_id.int))


def usage_attributes(usage: Usage) -> dict[str, AttributeValue]:
    """Tokens (OpenTelemetry's gen_ai names) and cost of `usage`, as span attributes."""
    return {"gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "shoal.cost_usd": usage.cost_usd}


class Tracing:
    """Where this process's spans go: a tracer provider of its own, closed with `close()`."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("shoal", __version__)

    def sampled(self, trace_id: int) -> bool:
        """Whether trace `trace_id` is recorded: the configured sampler's root decision, the
        same in every process that shares its configuration."""
        from opentelemetry.sdk.trace.sampling import Decision  # loaded with the provider

        result = self.provider.sampler.should_sample(None, trace_id, "shoal.task")
        return result.decision is Decision.RECORD_AND_SAMPLE

    def emit(self, name: str, *, trace_id: int, span_id: int, parent_id: int | None,
             start: int, end: int, attributes: Attributes, error: str | None = None) -> None:
        """Record a span that has ended (times in ns since the epoch) under derived ids."""
        context = (Context() if parent_id is None else
                   parent_context(trace_id, parent_id, sampled=self.sampled(trace_id)))
        token = _next_ids.set((trace_id, span_id))
        try:
            span = self.tracer.start_span(name, context, attributes=attributes, start_time=start)
        finally:
            _next_ids.reset(token)
        if error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, error[:_MAX_ERROR]))
        span.end(end_time=max(start, end))

    def attempt(self, msg: ExecuteTask) -> AttemptTrace | None:
        """The trace of the attempt `msg` starts, under the span its `traceparent` names (or,
        without one, its subtask's); None when that trace is not recorded."""
        parent = parse_traceparent(msg.traceparent) if msg.traceparent else None
        if parent is None:
            trace_id = msg.task_id.int
            parent = (trace_id, span_id_of(msg.subtask_id), self.sampled(trace_id))
        trace_id, parent_id, sampled = parent
        if not sampled:
            return None
        return AttemptTrace(self, msg, trace_id=trace_id, parent_id=parent_id)

    def propagate(self) -> None:
        """Give the attempts this process dispatches a `traceparent` (a control plane's)."""
        _propagating.append(self)

    def stop_propagating(self) -> None:
        """Dispatch attempts without a `traceparent` again."""
        with contextlib.suppress(ValueError):
            _propagating.remove(self)

    async def flush(self) -> None:
        """Export every span ended so far."""
        await asyncio.to_thread(self.provider.force_flush)

    async def close(self) -> None:
        """Export what is still buffered, then stop."""
        self.stop_propagating()
        await asyncio.to_thread(self.provider.shutdown)


def parent_context(trace_id: int, span_id: int, *, sampled: bool = True) -> Context:
    """A context whose current span is the (already or not yet emitted) span `span_id`."""
    flags = _SAMPLED if sampled else trace.TraceFlags(trace.TraceFlags.DEFAULT)
    span = trace.NonRecordingSpan(trace.SpanContext(trace_id, span_id, is_remote=True,
                                                    trace_flags=flags))
    return trace.set_span_in_context(span, Context())


@dataclass(slots=True)
class ModelSpan:
    """What one model call tells its span before the span ends."""

    usage: Usage | None = None


@dataclass(slots=True)
class AttemptTrace:
    """One attempt's place in its task's trace. Its span is emitted by `end`; the tool adds
    a span per model call under it with `model_call`."""

    tracing: Tracing
    message: ExecuteTask
    trace_id: int
    parent_id: int  # the subtask's span
    start: int = field(default_factory=time.time_ns)
    model: str | None = None

    @property
    def span_id(self) -> int:
        """The attempt's span id."""
        return span_id_of(self.message.attempt_id)

    def note_model(self, model: str) -> None:
        """Name the model the attempt's tool talks to (CLI tools call it out of sight)."""
        if model:
            self.model = model

    @contextlib.contextmanager
    def model_call(self, provider: str, model: str) -> Iterator[ModelSpan]:
        """A span around one model request; set `usage` on what it yields before leaving."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
            "gen_ai.request.model": model, "shoal.tool": self.message.tool,
            "shoal.attempt_id": str(self.message.attempt_id)}
        span = self.tracing.tracer.start_span(
            f"chat {model}", parent_context(self.trace_id, self.span_id),
            kind=trace.SpanKind.CLIENT, attributes=attributes)
        call = ModelSpan()
        try:
            yield call
        except BaseException as exc:  # a failed request (or a cancelled attempt) ends it too
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:_MAX_ERROR]))
            raise
        finally:
            if call.usage is not None:
                span.set_attributes(usage_attributes(call.usage))
            span.end()

    def end(self, result: TaskResult) -> None:
        """Emit the attempt's span: from its start until now, with the result's end state,
        tokens and cost."""
        msg = self.message
        attributes: dict[str, AttributeValue] = {
            "shoal.task_id": str(msg.task_id), "shoal.subtask_id": str(msg.subtask_id),
            "shoal.attempt_id": str(msg.attempt_id), "shoal.fence": msg.fence,
            "shoal.tool": msg.tool, "shoal.role": msg.role, "shoal.subtask.name": msg.name,
            "shoal.status": result.status, **usage_attributes(result.usage)}
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        failed = result.status in ("failed", "timed_out")
        self.tracing.emit("shoal.attempt", trace_id=self.trace_id, span_id=self.span_id,
                          parent_id=self.parent_id, start=self.start, end=time.time_ns(),
                          attributes=attributes,
                          error=(result.error or result.status) if failed else None)


def configure(service: str, *, exporter: SpanExporter | None = None) -> Tracing | None:
    """This process's tracing as the environment asks (OTLP/HTTP to the endpoint the OTel
    variables name), or into `exporter` when one is given; None when neither asks for it."""
    if exporter is None and not _wanted(os.environ):
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # reads the endpoint, headers and time-out variables
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service}
    provider = TracerProvider(resource=Resource.create({**named, "service.version": __version__}),
                              id_generator=cast("IdGenerator", _DerivedIds()),
                              shutdown_on_exit=False)
    provider.sampler = cast("Sampler", _SpreadSampler(provider.sampler))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider)


def _wanted(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in _ENDPOINTS)


class _DerivedIds:
    """The SDK's `IdGenerator` (duck-typed, so the SDK loads only when tracing is on): the ids
    `Tracing.emit` set for the span it starts, random ones for any other span."""

    def generate_span_id(self) -> int:
        ids = _next_ids.get()
        return ids[1] if ids is not None else _random_bits(64)

    def generate_trace_id(self) -> int:
        ids = _next_ids.get()
        return ids[0] if ids is not None else _random_bits(128)

    def is_trace_id_random(self) -> bool:
        return False  # a task's UUID, not W3C's random trace id


def _random_bits(bits: int) -> int:
    return int.from_bytes(os.urandom(bits // 8)) or 1


class _SpreadSampler:
    """The sampler the environment asks for (the SDK's `Sampler`, duck-typed), shown a trace
    id whose two halves are mixed: a UUID's fixed version and variant bits would skew ratio
    sampling, which reads only the low 64 bits."""

    def __init__(self, inner: Sampler) -> None:
        self._inner = inner

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str,
                      *args: Any, **kwargs: Any) -> SamplingResult:
        spread = ((trace_id >> 64) ^ trace_id) & _MASK64
        return self._inner.should_sample(parent_context, spread, name, *args, **kwargs)

    def get_description(self) -> str:
        return f"Spread{{{self._inner.get_description()}}}"

