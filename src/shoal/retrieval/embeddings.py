"""Embeddings from the configured model provider: an async client of its embeddings endpoint.

Two wire formats, each a small `_Wire` keyed by `EmbeddingApi`:

- OpenAI and OpenAI-compatible servers (vLLM, LM Studio, llama.cpp, Ollama's `/v1`):
  `POST {base}/embeddings` with `{"model", "input": [...]}`, answered `data[i].embedding`;
- Ollama's own: `POST {host}/api/embed` with `{"model", "input": [...]}`, answered `embeddings`.

`EmbeddingClient.embed(texts)` sends them in batches (a few in flight), retries a 429, a 5xx or
a network error with backoff (honouring `Retry-After`), checks the answer, and returns one
L2-normalised float32 row per text. `embedder_from_settings(settings)` builds the client the
worker's settings describe (`SHOAL_EMBEDDING_PROVIDER`, `SHOAL_EMBEDDING_MODEL`, and the
provider's base URL and key, read as the worker's tools read them), or None when no embedding
model is configured: search is then BM25 alone, and says why (`NO_EMBEDDING_MODEL`).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import math
import random
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt

from shoal.config import Settings
from shoal.errors import InvalidInput, ToolError

Vectors = npt.NDArray[np.float32]
"""A matrix of embeddings, one L2-normalised float32 row per text."""

NO_EMBEDDING_MODEL = ("No embedding model is configured, so passages are found by BM25 (word "
                      "matches) alone. To add vector search, set SHOAL_EMBEDDING_MODEL (and "
                      "SHOAL_EMBEDDING_PROVIDER: openai_compat, openai or ollama).")
"""Why search runs without vectors when the worker has no embedding model."""

_RETRIED = frozenset({408, 409, 425, 429})


class EmbeddingApi(StrEnum):
    """Which wire format an embeddings endpoint speaks."""

    openai = "openai"
    ollama = "ollama"


class Embedder(Protocol):
    """What search and indexing need of an embedding model."""

    @property
    def key(self) -> str:
        """Names the vectors' space: vectors under one key can be compared."""
        ...

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, in order."""
        ...


class _Wire(Protocol):
    path: str

    def request(self, model: str, texts: Sequence[str]) -> dict[str, Any]: ...

    def vectors(self, body: Any) -> list[Any]: ...


class _OpenAIWire:
    path = "/embeddings"

    def request(self, model: str, texts: Sequence[str]) -> dict[str, Any]:
        return {"model": model, "input": list(texts), "encoding_format": "float"}

    def vectors(self, body: Any) -> list[Any]:
        data = body["data"]
        # The specification lets a server answer in any order: `index` says which input.
        ordered = sorted(data, key=lambda item: item["index"]) if all(
            "index" in item for item in data) else data
        return [item["embedding"] for item in ordered]


class _OllamaWire:
    path = "/api/embed"

    def request(self, model: str, texts: Sequence[str]) -> dict[str, Any]:
        return {"model": model, "input": list(texts)}

    def vectors(self, body: Any) -> list[Any]:
        embeddings: list[Any] = body["embeddings"]
        return embeddings


_WIRES: dict[EmbeddingApi, _Wire] = {EmbeddingApi.openai: _OpenAIWire(),
                                     EmbeddingApi.ollama: _OllamaWire()}


@dataclass(frozen=True, slots=True)
class EmbeddingClient:
    """An embeddings endpoint: its API, base URL (`…/v1` for OpenAI, the host for Ollama),
    model and key, with batching, retries and timeouts."""

    api: EmbeddingApi
    base_url: str
    model: str
    api_key: str | None = None
    batch_size: int = 64
    concurrency: int = 4
    timeout: float = 60.0
    max_retries: int = 4
    retry_base: float = 1.0
    retry_cap: float = 60.0

    @property
    def key(self) -> str:
        """`<api>:<model>`: vectors of one model on one kind of server."""
        return f"{self.api}:{self.model}"

    @property
    def url(self) -> str:
        """Where the requests go."""
        return self.base_url.rstrip("/") + _WIRES[self.api].path

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, in order; `ToolError` saying what went
        wrong when the endpoint cannot give them (after retries, for what retrying can fix)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        batches = [texts[i:i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        results: list[Vectors | None] = [None] * len(batches)
        gate = asyncio.Semaphore(self.concurrency)
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers,
                                     verify=_tls()) as client:

            async def run(index: int) -> None:
                async with gate:
                    results[index] = await self._batch(client, batches[index])

            try:
                async with asyncio.TaskGroup() as group:
                    for index in range(len(batches)):
                        group.create_task(run(index))
            except ExceptionGroup as failed:  # the first batch's failure says it for all
                raise failed.exceptions[0] from None
        rows = [r for r in results if r is not None]
        if len({r.shape[1] for r in rows}) > 1:
            raise ToolError(f"The embedding model {self.model!r} at {self.url} answered vectors "
                            "of different lengths in one run. Check that one model serves it.")
        return np.vstack(rows)

    async def _batch(self, client: httpx.AsyncClient, texts: Sequence[str]) -> Vectors:
        wire = _WIRES[self.api]
        body = wire.request(self.model, texts)
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await client.post(self.url, json=body)
            except httpx.TransportError as exc:
                if last:
                    raise ToolError(f"The embeddings endpoint {self.url} could not be reached "
                                    f"({type(exc).__name__}: {exc}). Check that the server "
                                    "runs and the base URL is right.") from exc
                await asyncio.sleep(self._backoff(attempt, None))
                continue
            if response.status_code < 400:
                return self._parse(response, len(texts))
            if last or not _retryable(response.status_code):
                raise self._refusal(response)
            await asyncio.sleep(self._backoff(attempt, response))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _backoff(self, attempt: int, response: httpx.Response | None) -> float:
        told = _retry_after(response) if response is not None else None
        if told is not None:
            return min(told, self.retry_cap)
        wait = min(self.retry_base * 2.0 ** attempt, self.retry_cap)
        return wait * random.uniform(0.5, 1.0)  # jitter: clients that failed together spread

    def _parse(self, response: httpx.Response, count: int) -> Vectors:
        try:
            raw = _WIRES[self.api].vectors(response.json())
            matrix = np.asarray(raw, dtype=np.float32)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ToolError(f"The embeddings endpoint {self.url} answered something that is not "
                            f"a list of vectors ({type(exc).__name__}: {exc}). Check that it "
                            f"speaks the {self.api} embeddings API.") from exc
        if matrix.ndim != 2 or matrix.shape[0] != count or matrix.shape[1] == 0:
            raise ToolError(f"The embeddings endpoint {self.url} answered {matrix.shape[0]} "
                            f"vectors for {count} texts. Check that it speaks the {self.api} "
                            "embeddings API.")
        if not np.isfinite(matrix).all():
            raise ToolError(f"The embedding model {self.model!r} answered a vector with NaN "
                            "or infinite values.")
        return normalised(matrix)

    def _refusal(self, response: httpx.Response) -> ToolError:
        detail = _error_text(response)
        hint = {401: "Check the API key.", 403: "Check the API key and its permissions.",
                404: f"Check the base URL and that the model {self.model!r} exists there "
                     "(for Ollama: `ollama pull` it)."}.get(
            response.status_code, "Check SHOAL_EMBEDDING_MODEL and the provider's settings.")
        error = ToolError(f"The embeddings endpoint {self.url} answered {response.status_code}"
                          f"{': ' + detail if detail else ''}. {hint}",
                          retry_after=_retry_after(response))
        error.retryable = _retryable(response.status_code)
        return error


def normalised(matrix: npt.NDArray[Any]) -> Vectors:
    """`matrix` as float32 rows of length 1 (a zero row stays zero)."""
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: Vectors = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return out


def embedder_from_settings(settings: Settings) -> EmbeddingClient | None:
    """The embeddings endpoint the settings name, or None when `embedding_model` is unset.
    `InvalidInput` when a model is set but its provider cannot be reached as configured."""
    model = settings.embedding_model
    if not model:
        return None
    provider = settings.embedding_provider
    limits: dict[str, Any] = {
        "model": model, "batch_size": settings.embedding_batch,
        "timeout": settings.embedding_timeout, "max_retries": settings.model_max_retries,
        "retry_base": settings.model_retry_base, "retry_cap": settings.model_retry_cap}
    if provider == "ollama":
        host = settings.ollama_host if "://" in settings.ollama_host else (
            f"http://{settings.ollama_host}")
        return EmbeddingClient(api=EmbeddingApi.ollama, base_url=host, **limits)
    if provider == "openai":
        if settings.openai_api_key is None:
            raise InvalidInput("SHOAL_EMBEDDING_PROVIDER is openai but no OpenAI API key is "
                               "set. Set OPENAI_API_KEY, or choose another provider.")
        return EmbeddingClient(api=EmbeddingApi.openai,
                               base_url=settings.openai_base_url or "https://api.openai.com/v1",
                               api_key=settings.openai_api_key.get_secret_value(), **limits)
    if not settings.openai_compat_base_url:
        raise InvalidInput("SHOAL_EMBEDDING_MODEL is set but SHOAL_OPENAI_COMPAT_BASE_URL is "
                           "not: set it to the server's base URL (e.g. http://127.0.0.1:8000/v1)"
                           ", or set SHOAL_EMBEDDING_PROVIDER to openai or ollama.")
    return EmbeddingClient(api=EmbeddingApi.openai, base_url=settings.openai_compat_base_url,
                           api_key=settings.openai_compat_api_key, **limits)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every request: building one costs about 25 ms, as much as a
    whole query, and `httpx.AsyncClient()` would build one per client."""
    return httpx.create_ssl_context()


def _retryable(status: int) -> bool:
    return status in _RETRIED or status >= 500


def _retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (it may be a number or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _error_text(response: httpx.Response) -> str:
    """The error a server put in its body (OpenAI's `error.message`, Ollama's `error`)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return str(error)[:300] if error else ""
