"""Embeddings for the fake server: OpenAI's `POST /v1/embeddings` and Ollama's `POST /api/embed`
(and its older `POST /api/embeddings`).

The vectors are deterministic, not learned: `embedding(text)` hashes each word (lower-cased, a
plural's `s` dropped) into one of `DIMENSIONS` signed buckets, weighs it by `1 + log(count)`
and scales the sum to length 1, so texts that share words get similar vectors and the same text
always gets the same one. OpenAI's `encoding_format: "base64"` (which the official SDKs ask for)
is answered as little-endian float32 bytes, and `dimensions` is honoured. Each request is kept
in the log like the others (api `openai_embeddings`, `ollama_embed`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from collections import Counter
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from shoal.demo.fake.exchange import DEMO_MODEL, record

DIMENSIONS = 256
"""The length of a vector unless the request asks for another (`dimensions`)."""

MAX_DIMENSIONS = 4096
MAX_INPUTS = 2048  # OpenAI's own limit of inputs per request

_WORD = re.compile(r"\w+")


def embedding(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """The fake's vector of `text`: hashed bag of words, L2-normalised (all zeros for a text
    without words)."""
    vector = [0.0] * dimensions
    words = Counter(_stem(w) for w in _WORD.findall(text.lower()))
    for word, count in words.items():
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        number = int.from_bytes(digest, "little")
        sign = 1.0 if number >> 63 else -1.0
        vector[number % dimensions] += sign * (1.0 + math.log(count))
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def routes() -> list[BaseRoute]:
    """The embeddings routes of both protocols."""
    return [
        Route("/v1/embeddings", _openai, methods=["POST"]),
        Route("/api/embed", _ollama_embed, methods=["POST"]),
        Route("/api/embeddings", _ollama_embeddings, methods=["POST"]),
    ]


def _texts(value: Any) -> list[str] | None:
    """The inputs as texts (a string, a list of strings, or token arrays), or None."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and len(value) <= MAX_INPUTS:
        if all(isinstance(v, str) for v in value):
            return list(value)
        if all(isinstance(v, int) for v in value):  # one text as tokens
            return [" ".join(f"t{v}" for v in value)]
        if all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value):
            return [" ".join(f"t{t}" for t in v) for v in value]
    return None


def _dimensions(body: dict[str, Any]) -> int | None:
    value = body.get("dimensions", DIMENSIONS)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_DIMENSIONS:
        return value
    return None


async def _body(request: Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _openai_error(message: str) -> Response:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": None, "code": None}}, status_code=400,
                        headers={"x-should-retry": "false"})


async def _openai(request: Request) -> Response:
    body = await _body(request)
    record(request, "openai_embeddings", body)
    if body is None or not isinstance(body.get("model"), str) or not body["model"]:
        return _openai_error("Send a JSON object with `model` and `input`.")
    texts = _texts(body.get("input"))
    if texts is None:
        return _openai_error(f"`input` must be a string or a list of 1 to {MAX_INPUTS} strings "
                             "(or token arrays).")
    dimensions = _dimensions(body)
    if dimensions is None:
        return _openai_error(f"`dimensions` must be an integer from 1 to {MAX_DIMENSIONS}.")
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector = embedding(text, dimensions)
        encoded: Any = (base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                        if as_base64 else vector)
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(len(_WORD.findall(t)) for t in texts)
    return JSONResponse({"object": "list", "data": data, "model": body["model"],
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def _ollama_embed(request: Request) -> Response:
    body = await _body(request)
    record(request, "ollama_embed", body)
    if body is None or not isinstance(body.get("model"), str) or not body["model"]:
        return JSONResponse({"error": "model is required"}, status_code=400)
    texts = _texts(body.get("input"))
    dimensions = _dimensions(body)
    if texts is None or dimensions is None:
        return JSONResponse({"error": "input must be a string or a list of strings, and "
                                      f"dimensions an integer from 1 to {MAX_DIMENSIONS}"},
                            status_code=400)
    tokens = sum(len(_WORD.findall(t)) for t in texts)
    return JSONResponse({"model": body["model"] or DEMO_MODEL,
                         "embeddings": [embedding(t, dimensions) for t in texts],
                         "total_duration": 1000, "load_duration": 0,
                         "prompt_eval_count": tokens})


async def _ollama_embeddings(request: Request) -> Response:
    body = await _body(request)
    record(request, "ollama_embeddings", body)
    if body is None or not isinstance(body.get("prompt"), str):
        return JSONResponse({"error": "prompt is required"}, status_code=400)
    return JSONResponse({"embedding": embedding(body["prompt"])})
