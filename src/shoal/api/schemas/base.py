"""What every request and response shape of the REST API shares: the strict request base, the
error body, the limits on text, the tools a request may name."""

from __future__ import annotations

import functools
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
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
    def _storable(cls, value: Any, info: ValidationInfo) -> Any:
        kind = value.__class__  # the plain values of most fields pass without a call
        if value is None or kind is int or kind is bool or (
                kind is str and "\x00" not in value and value.isascii()):
            return value
        if kind is list and info.field_name in _lists_of_models(cls):
            return value  # each item checked by its own validator (a plan's every step)
        found = value_problem(value)
        if found:
            inner, problem = found
            # `inner` is the path inside a JSON field (requirements, options); the error
            # handler appends it to the field's name.
            raise PydanticCustomError("unstorable_text", "{problem}",
                                      {"inner": inner, "problem": problem})
        return value


@functools.cache
def _lists_of_models(cls: type[Strict]) -> frozenset[str]:
    """The fields of `cls` that hold a list of request shapes (`list[PlanItem] | None`)."""
    def models_only(annotation: Any) -> bool:
        return get_origin(annotation) is list and all(
            isinstance(arg, type) and issubclass(arg, Strict) for arg in get_args(annotation))
    return frozenset(name for name, field in cls.model_fields.items()
                     if models_only(field.annotation)
                     or any(models_only(arg) for arg in get_args(field.annotation)))


class ErrorBody(BaseModel):
    """Every error answer: a stable code, a sentence saying what to do, and details (for a
    validation error, a list of `{field, message, type}`)."""

    error: str = Field(description="A stable code (`not_found`, `validation_error`, …).")
    message: str = Field(description="What happened and what to do, for a person.")
    details: Any = Field(None, description="More about it: for a validation error, a list of "
                                           "`{field, message, type}`.")
