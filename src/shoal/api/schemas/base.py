"""What every request and response shape of the REST API shares: the strict request base, the
error body, the limits on text, the tools a request may name."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from shoal.limits import value_problem

ToolName = Literal[
    "claude_code", "gemini_cli", "codex", "ollama", "anthropic", "openai", "gemini",
    "openai_compat", "echo",
]
MAX_DESCRIPTION = 20_000
MAX_ANSWER = 20_000  # characters of an answer to a workflow's question


class Strict(BaseModel):
    """A request body: unknown fields refused, every string storable, numbers finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        kind = value.__class__  # the plain values of most fields pass without a call
        if value is None or kind is int or kind is bool or (
                kind is str and "\x00" not in value and value.isascii()):
            return value
        found = value_problem(value)
        if found:
            inner, problem = found
            # `inner` is the path inside a JSON field (requirements, options); the error
            # handler appends it to the field's name.
            raise PydanticCustomError("unstorable_text", "{problem}",
                                      {"inner": inner, "problem": problem})
        return value


class ErrorBody(BaseModel):
    """Every error answer: a stable code, a sentence saying what to do, and details (for a
    validation error, a list of `{field, message, type}`)."""

    error: str = Field(description="A stable code (`not_found`, `validation_error`, …).")
    message: str = Field(description="What happened and what to do, for a person.")
    details: Any = Field(None, description="More about it: for a validation error, a list of "
                                           "`{field, message, type}`.")
