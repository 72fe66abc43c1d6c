"""The embeddings client against real HTTP servers: the fake model server in both protocols,
and tiny inline apps that fail the way providers do (429 with Retry-After, 404)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shoal.demo.fake.embeddings import embedding
from shoal.demo.fake.exchange import request_log
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app
from shoal.errors import InvalidInput, ToolError
from shoal.retrieval.embeddings import EmbeddingApi, EmbeddingClient, embedder_from_settings
from tests.conftest import make_settings


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def root(app: Starlette) -> AsyncIterator[str]:
    async with running_fake_server(app) as url:
        yield url


@pytest.mark.parametrize(("api", "suffix"), [(EmbeddingApi.openai, "/v1"),
                                             (EmbeddingApi.ollama, "")])
async def test_both_protocols_give_one_unit_row_per_text(root: str, api: EmbeddingApi,
                                                         suffix: str) -> None:
    """OpenAI-compatible and Ollama endpoints both give the fake's vectors, in order."""
    client = EmbeddingClient(api=api, base_url=root + suffix, model="embed-demo")
    vectors = await client.embed(["harbour ferry", "lighthouse keeper"])
    assert vectors.dtype == np.float32
    assert vectors.shape == (2, 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.allclose(vectors[1], embedding("lighthouse keeper"), atol=1e-6)
    assert client.key == f"{api}:embed-demo"


async def test_texts_are_sent_in_batches_and_come_back_in_order(root: str,
                                                                app: Starlette) -> None:
    """130 texts in batches of 50 take three requests, and row i is text i's vector."""
    texts = [f"text number {n}" for n in range(130)]
    client = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="m",
                             batch_size=50, api_key="secret")
    vectors = await client.embed(texts)
    sent = [r for r in request_log(app) if r.api == "openai_embeddings"]
    assert sorted(len(r.body["input"]) for r in sent) == [30, 50, 50]
    assert all(r.headers["authorization"] == "Bearer secret" for r in sent)
    assert np.allclose(vectors[129], embedding("text number 129"), atol=1e-6)


def flaky_app(first: Response) -> tuple[Starlette, list[int]]:
    """An OpenAI-style embeddings endpoint that answers `first` once, then vectors."""
    calls: list[int] = []

    async def embeddings(request: Request) -> Response:
        body = await request.json()
        calls.append(len(body["input"]))
        if len(calls) == 1:
            return first
        return JSONResponse({"data": [{"index": i, "embedding": embedding(t)}
                                      for i, t in enumerate(body["input"])]})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])]), calls


async def test_a_429_is_retried_after_the_time_it_names() -> None:
    """A 429 with `Retry-After: 0` is tried again at once, and then succeeds."""
    app, calls = flaky_app(JSONResponse({"error": {"message": "slow down"}}, status_code=429,
                                        headers={"retry-after": "0"}))
    async with running_fake_server(app) as root:
        client = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="m",
                                 retry_base=30.0)  # a backoff of its own would time the test out
        vectors = await client.embed(["one"])
    assert calls == [1, 1]
    assert np.allclose(vectors[0], embedding("one"), atol=1e-6)


async def test_a_503_is_retried_with_backoff() -> None:
    """A 5xx without `Retry-After` is retried after the client's own backoff."""
    app, calls = flaky_app(Response("busy", status_code=503))
    async with running_fake_server(app) as root:
        client = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="m",
                                 retry_base=0.0)
        await client.embed(["one"])
    assert calls == [1, 1]


async def test_a_404_fails_at_once_saying_what_to_check() -> None:
    """An unknown model is not retried; the error names the endpoint, the answer and a fix."""
    app, calls = flaky_app(JSONResponse({"error": "model 'nomic' not found"}, status_code=404))
    async with running_fake_server(app) as root:
        client = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="nomic")
        with pytest.raises(ToolError) as caught:
            await client.embed(["one"])
    assert calls == [1]
    assert "answered 404: model 'nomic' not found" in caught.value.message
    assert "Check the base URL and that the model 'nomic' exists" in caught.value.message
    assert not caught.value.retryable


async def test_an_unreachable_server_fails_after_its_retries(root: str) -> None:
    """A port where nothing listens is a `ToolError` saying to check the server."""
    async with running_fake_server(create_demo_model_app()) as gone:
        pass  # the server stopped: its port now refuses connections
    client = EmbeddingClient(api=EmbeddingApi.ollama, base_url=gone, model="m", max_retries=1,
                             retry_base=0.0)
    with pytest.raises(ToolError, match="could not be reached"):
        await client.embed(["one"])


async def test_an_answer_with_the_wrong_count_is_refused() -> None:
    """A server answering fewer vectors than texts is an error, not a silent misalignment."""
    app, _ = flaky_app(JSONResponse({"data": [{"index": 0, "embedding": [1.0, 0.0]}]}))
    async with running_fake_server(app) as root:
        client = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="m")
        with pytest.raises(ToolError, match="answered 1 vectors for 2 texts"):
            await client.embed(["one", "two"])


def test_no_embedding_model_configured_gives_no_client(tmp_path: Path) -> None:
    """Without `SHOAL_EMBEDDING_MODEL` there is no embedder (search is BM25 alone)."""
    assert embedder_from_settings(make_settings(tmp_path)) is None


def test_the_client_follows_the_worker_settings(tmp_path: Path) -> None:
    """Each provider takes the base URL and key the worker's tools use."""
    compat = embedder_from_settings(make_settings(
        tmp_path, embedding_model="bge", openai_compat_base_url="http://127.0.0.1:8001/v1",
        openai_compat_api_key="k1", embedding_batch=8))
    ollama = embedder_from_settings(make_settings(
        tmp_path, embedding_model="nomic-embed-text", embedding_provider="ollama",
        ollama_host="127.0.0.1:11434"))
    assert compat is not None
    assert ollama is not None
    assert (compat.api, compat.url, compat.api_key, compat.batch_size) == (
        EmbeddingApi.openai, "http://127.0.0.1:8001/v1/embeddings", "k1", 8)
    assert (ollama.api, ollama.url) == (EmbeddingApi.ollama, "http://127.0.0.1:11434/api/embed")
    assert dataclasses.replace(ollama, model="x").key == "ollama:x"


def test_a_model_without_its_server_is_a_clear_error(tmp_path: Path) -> None:
    """A model set for the OpenAI-compatible provider but no base URL says what to set."""
    with pytest.raises(InvalidInput, match="SHOAL_OPENAI_COMPAT_BASE_URL is not"):
        embedder_from_settings(make_settings(tmp_path, embedding_model="bge"))
