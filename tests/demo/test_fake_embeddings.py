"""The fake server's embeddings, asked by the official `openai` and `ollama` clients over real
HTTP: deterministic, normalised vectors that are closer for texts sharing words."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import httpx
import ollama
import openai
import pytest
from starlette.applications import Starlette

from shoal.demo.fake.embeddings import DIMENSIONS, embedding
from shoal.demo.fake.exchange import request_log
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def root(app: Starlette) -> AsyncIterator[str]:
    async with running_fake_server(app) as url:
        yield url


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_the_openai_sdk_gets_one_normalised_vector_per_input(root: str) -> None:
    """The official SDK (which asks for base64) decodes one unit vector per input, in order."""
    client = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="k", max_retries=0)
    async with client:
        answer = await client.embeddings.create(model="embed-demo",
                                                input=["red apples", "green pears"])
    vectors = [item.embedding for item in answer.data]
    assert [item.index for item in answer.data] == [0, 1]
    assert [len(v) for v in vectors] == [DIMENSIONS, DIMENSIONS]
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-5)
               for v in vectors)
    assert vectors[0] == pytest.approx(embedding("red apples"), abs=1e-6)
    assert answer.usage.prompt_tokens == 4


async def test_plain_float_answers_honour_dimensions(root: str) -> None:
    """A request asking for floats and fewer dimensions gets exactly that, as JSON numbers."""
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{root}/v1/embeddings", json={
            "model": "m", "input": "one text", "encoding_format": "float", "dimensions": 64})
    body = response.json()
    assert response.status_code == 200
    assert body["data"][0]["embedding"] == pytest.approx(embedding("one text", 64))


async def test_similar_texts_get_closer_vectors_than_unrelated_ones() -> None:
    """Shared words make vectors close; the same text always gives the same vector."""
    question = embedding("When does the harbour ferry leave?")
    answer = embedding("The harbour ferry leaves at seven every morning.")
    unrelated = embedding("Quarterly revenue grew by twelve percent.")
    assert cosine(question, answer) > cosine(question, unrelated) + 0.2
    assert embedding("When does the harbour ferry leave?") == question


async def test_the_ollama_client_gets_embeddings_from_api_embed(root: str, app: Starlette) -> None:
    """Ollama's `/api/embed` answers `embeddings`, and the request is recorded."""
    async with ollama.AsyncClient(host=root) as client:
        answer = await client.embed(model="nomic-embed-text", input=["alpha beta", "gamma"])
    assert len(answer.embeddings) == 2
    assert list(answer.embeddings[1]) == pytest.approx(embedding("gamma"), abs=1e-6)
    recorded = [r for r in request_log(app) if r.api == "ollama_embed"]
    assert recorded[0].body["input"] == ["alpha beta", "gamma"]


async def test_a_request_without_input_is_refused_as_openai_would(root: str) -> None:
    """A missing `input` is a 400 with OpenAI's error shape, which the SDK raises."""
    client = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="k", max_retries=0)
    async with client:
        with pytest.raises(openai.BadRequestError, match="`input` must be"):
            await client.embeddings.create(model="m", input=[])
