"""The port between Shoal's agent loop and a model API.

The loop keeps the conversation in neutral form (`Turn`s) and asks a `ModelClient` for the
next answer. A client translates to its vendor's protocol through the vendor's official SDK
(OpenAI, Anthropic, Gemini, Ollama), streams text to `on_text`, and returns a `ModelAnswer`.

Clients never retry: they turn every failure into a `ModelError` that says whether a retry
can help and how long the server asked to wait. The loop owns retries (one policy for every
vendor, honouring `Retry-After`) and the journal.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol

from shoal.protocol import Usage


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A tool the agent offers the model: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelCall:
    """A tool call the model made. `arguments` is the raw JSON text the model sent."""

    id: str
    name: str
    arguments: str

    def arguments_dict(self) -> dict[str, Any]:
        """The arguments as an object ({} when they are not a JSON object)."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Turn:
    """One entry of the conversation, in neutral form.

    `user`: the instructions. `assistant`: the model's text and calls. `tool`: the result of
    the call `call_id` (named `name`).
    """

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    calls: tuple[ModelCall, ...] = ()
    call_id: str = ""
    name: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "text": self.text, "call_id": self.call_id,
                "name": self.name, "calls": [[c.id, c.name, c.arguments] for c in self.calls]}


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """What the model answered to one request."""

    text: str
    calls: tuple[ModelCall, ...] = ()
    usage: Usage = field(default_factory=Usage)

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "calls": [[c.id, c.name, c.arguments] for c in self.calls],
                "usage": self.usage.model_dump()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelAnswer:
        calls = tuple(ModelCall(str(i), str(n), str(a)) for i, n, a in data.get("calls", []))
        return cls(str(data.get("text", "")), calls, Usage(**dict(data.get("usage", {}))))


class ModelError(Exception):
    """A model request failed. `retryable` says whether trying again can help."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status


class ModelClient(Protocol):
    """One vendor's API, as the agent loop sees it."""

    provider: str  # "openai", "anthropic", "gemini", "ollama", "openai_compat"
    model: str
    endpoint: str  # where requests go, for messages

    async def complete(self, system: str, turns: list[Turn], tools: list[ToolDef],
                       on_text: Callable[[str], None]) -> ModelAnswer:
        """The model's next answer; raises `ModelError`."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a server asked for in `Retry-After` (seconds or an HTTP date), or None."""
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def status_error(endpoint: str, model: str, status: int, said: str,
                 headers: Mapping[str, str] | None, key_hint: str) -> ModelError:
    """A `ModelError` for an HTTP error status, with what to do about it.

    429, 408, 409 and 5xx are retryable unless the server says `x-should-retry: false`.
    """
    server = f"The model API at {endpoint}"
    detail = f"HTTP {status}: {said}"
    retry_after = retry_after_seconds(headers)
    if headers and str(headers.get("x-should-retry", "")).lower() == "false":
        return ModelError(f"{server} failed ({detail}) and said not to retry.",
                          retryable=False, status=status)
    if status in (401, 403):
        return ModelError(f"{server} refused the API key ({detail}). Set {key_hint} to a key "
                          "it accepts.", retryable=False, status=status)
    if status == 404:
        return ModelError(f"{server} does not know model {model!r} or the path ({detail}). "
                          "Check the model name and the base URL.", retryable=False,
                          status=status)
    if status in (408, 409, 429) or status >= 500:
        what = "is rate limiting" if status == 429 else "failed"
        return ModelError(f"{server} {what} ({detail}).", retryable=True,
                          retry_after=retry_after, status=status)
    return ModelError(f"{server} rejected the request ({detail}). Check that model {model!r} "
                      "supports streaming and tool calls.", retryable=False, status=status)
