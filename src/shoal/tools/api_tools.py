"""The model-API tools: Shoal's agent loop over OpenAI, Anthropic, Gemini, Ollama and any
OpenAI-compatible server. Each has a `probe_*` (is it configured? no model call is made,
except Ollama's `/api/version`, which is free) and a `create_*`.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from shoal.config import Settings
from shoal.tools.agent_loop import AgentLoopTool, OpenAICompatTool, RetryPolicy, is_local_url
from shoal.tools.base import Probe, Tool
from shoal.tools.models.base import ModelClient


def _retry(settings: Settings) -> RetryPolicy:
    return RetryPolicy(max_retries=settings.model_max_retries, base=settings.model_retry_base,
                       cap=settings.model_retry_cap)


def _loop_tool(settings: Settings, probe: Probe, client: Callable[[], ModelClient], *,
               local: bool = False) -> Tool:
    """Shoal's agent loop over `client`, with the worker's limits, retries and journal."""
    return AgentLoopTool(name=probe.name, client=client, local=local, version=probe.version,
                         max_turns=settings.agent_max_turns,
                         command_timeout=settings.command_timeout, retry=_retry(settings),
                         journal_dir=settings.data_dir / "journal")


def _secret(value: object) -> str:
    getter = getattr(value, "get_secret_value", None)
    return str(getter()) if getter is not None else ""


def _sdk_version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "unknown"


# ---- OpenAI-compatible servers ---------------------------------------------------------------


async def probe_openai_compat(settings: Settings) -> Probe:
    url = settings.openai_compat_base_url
    if not url:
        return Probe("openai_compat", False, detail="no OpenAI-compatible server is configured",
                     enable="set SHOAL_OPENAI_COMPAT_BASE_URL (e.g. http://127.0.0.1:8000/v1 "
                            "for vLLM, LM Studio or llama.cpp) and SHOAL_OPENAI_COMPAT_MODEL")
    return Probe("openai_compat", True, version=f"openai-python {_sdk_version('openai')}",
                 local=is_local_url(url), detail=f"{url}, model {settings.openai_compat_model}")


def create_openai_compat(settings: Settings, probe: Probe) -> Tool:
    assert settings.openai_compat_base_url is not None
    return OpenAICompatTool(
        base_url=settings.openai_compat_base_url, api_key=settings.openai_compat_api_key,
        model=settings.openai_compat_model, max_turns=settings.agent_max_turns,
        command_timeout=settings.command_timeout, max_retries=settings.model_max_retries,
        journal_dir=settings.data_dir / "journal", version=probe.version)


# ---- OpenAI ----------------------------------------------------------------------------------


async def probe_openai(settings: Settings) -> Probe:
    if settings.openai_api_key is None:
        return Probe("openai", False, detail="no OpenAI API key",
                     enable="set OPENAI_API_KEY (optionally SHOAL_OPENAI_MODEL)")
    where = settings.openai_base_url or "https://api.openai.com/v1"
    return Probe("openai", True, version=f"openai-python {_sdk_version('openai')}",
                 local=False, detail=f"{where}, model {settings.openai_model}")


def create_openai(settings: Settings, probe: Probe) -> Tool:
    return OpenAICompatTool(
        name="openai", base_url=settings.openai_base_url or "https://api.openai.com/v1",
        api_key=_secret(settings.openai_api_key), model=settings.openai_model, local=False,
        max_turns=settings.agent_max_turns, command_timeout=settings.command_timeout,
        max_retries=settings.model_max_retries, journal_dir=settings.data_dir / "journal",
        version=probe.version, key_hint="OPENAI_API_KEY")


# ---- Anthropic -------------------------------------------------------------------------------


async def probe_anthropic(settings: Settings) -> Probe:
    if settings.anthropic_api_key is None:
        return Probe("anthropic", False, detail="no Anthropic API key",
                     enable="set ANTHROPIC_API_KEY (optionally SHOAL_ANTHROPIC_MODEL)")
    where = settings.anthropic_base_url or "https://api.anthropic.com"
    return Probe("anthropic", True, version=f"anthropic-python {_sdk_version('anthropic')}",
                 detail=f"{where}, model {settings.anthropic_model}")


def create_anthropic(settings: Settings, probe: Probe) -> Tool:
    from shoal.tools.models.anthropic import AnthropicClient

    def client() -> ModelClient:
        return AnthropicClient(base_url=settings.anthropic_base_url,
                               api_key=_secret(settings.anthropic_api_key),
                               model=settings.anthropic_model)

    return _loop_tool(settings, probe, client)


# ---- Gemini ----------------------------------------------------------------------------------


async def probe_gemini(settings: Settings) -> Probe:
    if settings.gemini_api_key is None:
        return Probe("gemini", False, detail="no Gemini API key",
                     enable="set GEMINI_API_KEY (optionally SHOAL_GEMINI_MODEL)")
    where = settings.gemini_base_url or "https://generativelanguage.googleapis.com"
    return Probe("gemini", True, version=f"google-genai {_sdk_version('google-genai')}",
                 detail=f"{where}, model {settings.gemini_model}")


def create_gemini(settings: Settings, probe: Probe) -> Tool:
    from shoal.tools.models.gemini import GeminiClient

    def client() -> ModelClient:
        return GeminiClient(base_url=settings.gemini_base_url,
                            api_key=_secret(settings.gemini_api_key),
                            model=settings.gemini_model)

    return _loop_tool(settings, probe, client)


# ---- Ollama ----------------------------------------------------------------------------------


async def probe_ollama(settings: Settings) -> Probe:
    host = settings.ollama_host.rstrip("/")
    if "://" not in host:
        host = f"http://{host}"
    try:
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            response = await client.get(f"{host}/api/version")
            response.raise_for_status()
            version = str(response.json().get("version", "unknown"))
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return Probe("ollama", False, detail=f"no Ollama server answered at {host} ({exc})",
                     enable="start Ollama (`ollama serve`) or set OLLAMA_HOST to where it runs")
    return Probe("ollama", True, version=f"ollama {version}", local=is_local_url(host),
                 detail=f"{host}, model {settings.ollama_model}")


def create_ollama(settings: Settings, probe: Probe) -> Tool:
    from shoal.tools.models.ollama import OllamaClient

    host = settings.ollama_host if "://" in settings.ollama_host else (
        f"http://{settings.ollama_host}")

    def client() -> ModelClient:
        return OllamaClient(host=host, model=settings.ollama_model)

    return _loop_tool(settings, probe, client, local=probe.local)
