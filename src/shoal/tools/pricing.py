"""What tokens cost: list prices per million tokens, for tools whose final event has no cost.

Claude Code reports its own cost; the APIs and the Gemini and Codex CLIs report tokens only, so
their cost is estimated here from published list prices (USD per million input / output
tokens, as of late 2025). A model that is not listed — a local model, a new release — costs 0
and says so in the log. Prices change: `SHOAL_MODEL_PRICES='{"my-model": [0.5, 1.5]}'` adds or
overrides entries (longest matching name prefix wins).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from shoal.protocol import Usage

LIST_PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-haiku-4": (1.0, 5.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.4),
    "gpt-5": (1.25, 10.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4o": (2.5, 10.0),
    "o4-mini": (1.1, 4.4),
    "o3": (2.0, 8.0),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash-lite": (0.1, 0.4),
    "gemini-2.5-flash": (0.3, 2.5),
    "gemini-2.0-flash": (0.1, 0.4),
}


def _prices() -> dict[str, tuple[float, float]]:
    prices = dict(LIST_PRICES)
    raw = os.environ.get("SHOAL_MODEL_PRICES")
    if raw:
        try:
            extra = json.loads(raw)
        except ValueError:
            extra = {}
        if isinstance(extra, Mapping):
            for name, pair in extra.items():
                if isinstance(pair, list | tuple) and len(pair) == 2:
                    prices[str(name)] = (float(pair[0]), float(pair[1]))
    return prices


def price_of(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for `model`, or None when unknown."""
    prices = _prices()
    name = model.lower().split("/")[-1]
    matches = [key for key in prices if name.startswith(key.lower())]
    return prices[max(matches, key=len)] if matches else None


def with_cost(usage: Usage, model: str) -> Usage:
    """`usage` naming `model` (unless it names one), with `cost_usd` filled from list prices
    unless the tool reported a cost."""
    named = usage.model or model or None
    if usage.cost_usd or not (usage.input_tokens or usage.output_tokens):
        return usage if usage.model == named else usage.model_copy(update={"model": named})
    price = price_of(model)
    cost = usage.cost_usd if price is None else round(
        (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000, 6)
    return Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                 cost_usd=cost, model=named)
