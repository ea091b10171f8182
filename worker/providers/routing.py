"""Model aliases routed by configuration, e.g.
TICKWORK_MODELS="default=scripted,judge=scripted,cheap=openai:gpt-4o-mini".

No code names a model and no agent stores one: swapping a model is a configuration change.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tickwork.worker.model import Message, ModelProvider, Reply, RunView, TextSink, ToolSchema
from tickwork.worker.providers.openai import OpenAIProvider
from tickwork.worker.providers.scripted import ScriptedProvider

DEFAULT_ALIAS = "default"
DEFAULT_MODELS = "default=scripted,judge=scripted"
_ALIAS = re.compile(r"[A-Za-z0-9_.-]+")


class ProviderSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    models: str = ""
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_api_key: str = Field(default="", repr=False)  # never in a repr, a log or an error
    openai_timeout_seconds: float = 60
    # Stream answers (text visible as it is written). Off for servers that cannot stream
    # while offering tools (llama-cpp-python's server among them).
    openai_stream: bool = True


@dataclass(frozen=True)
class Route:
    provider: str
    model: str | None = None


# provider name → whether a route must name a model
_NEEDS_MODEL = {"scripted": False, "openai": True}


def parse_models(spec: str) -> dict[str, Route]:
    """alias=provider[:model], comma-separated; unset or empty means DEFAULT_MODELS."""
    routes: dict[str, Route] = {}
    entries = (part.strip() for part in (spec.strip() or DEFAULT_MODELS).split(","))
    for entry in filter(None, entries):  # a trailing comma is harmless
        alias, route = _parse_entry(entry)
        if alias in routes:
            raise ValueError(f"TICKWORK_MODELS routes the alias '{alias}' twice.")
        routes[alias] = route
    if DEFAULT_ALIAS not in routes:
        raise ValueError("TICKWORK_MODELS must route the alias 'default' (unconfigured aliases "
                         "fall back to it), e.g. 'default=scripted'.")
    return routes


def _parse_entry(entry: str) -> tuple[str, Route]:
    alias, equals, target = (part.strip() for part in entry.partition("="))
    if not equals:
        raise ValueError(f"TICKWORK_MODELS entry '{entry}' is not alias=provider[:model].")
    if not _ALIAS.fullmatch(alias):
        raise ValueError(f"TICKWORK_MODELS entry '{entry}' has no valid alias before '='.")
    # Split once: model names may hold colons themselves (Ollama's "llama3.1:8b").
    provider, colon, model = (part.strip() for part in target.partition(":"))
    if provider not in _NEEDS_MODEL:
        known = ", ".join(sorted(_NEEDS_MODEL))
        raise ValueError(f"TICKWORK_MODELS routes '{alias}' to unknown provider '{provider}' "
                         f"(known: {known}).")
    if _NEEDS_MODEL[provider] and not model:
        raise ValueError(f"TICKWORK_MODELS routes '{alias}' to {provider} without a model; "
                         f"write {alias}={provider}:MODEL.")
    if not _NEEDS_MODEL[provider] and colon:
        raise ValueError(f"TICKWORK_MODELS routes '{alias}' to {provider}, which takes no model.")
    return alias, Route(provider, model or None)


class Router:
    """A ModelProvider that hands each alias to the provider configured for it.

    The alias itself is passed on unchanged: the scripted provider answers the judge differently,
    and the openai provider picks the model configured for that alias.
    """

    def __init__(self, providers: dict[str, ModelProvider]) -> None:
        if DEFAULT_ALIAS not in providers:
            raise ValueError("A router needs a provider for the alias 'default'.")
        self._providers = dict(providers)

    @property
    def aliases(self) -> frozenset[str]:
        """The aliases configured (an agent's model must be one of them)."""
        return frozenset(self._providers)

    def provider_for(self, alias: str) -> ModelProvider:
        return self._providers.get(alias) or self._providers[DEFAULT_ALIAS]

    async def complete(self, alias: str, messages: list[Message], tools: list[ToolSchema],
                       run: RunView, *, on_text: TextSink | None = None) -> Reply:
        return await self.provider_for(alias).complete(alias, messages, tools, run,
                                                      on_text=on_text)

    async def aclose(self) -> None:
        for provider in {id(p): p for p in self._providers.values()}.values():
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()


def build_router(settings: ProviderSettings, *, http: httpx.AsyncClient | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> Router:
    """One provider instance per provider name, shared by every alias routed to it."""
    routes = parse_models(settings.models)
    factories: dict[str, Callable[[dict[str, str]], Any]] = {
        "scripted": lambda _models: ScriptedProvider(sleep=sleep),
        "openai": lambda models: OpenAIProvider(
            settings.openai_base_url, settings.openai_api_key, models, http=http,
            timeout=settings.openai_timeout_seconds, stream=settings.openai_stream),
    }
    instances = {name: factories[name]({alias: route.model for alias, route in routes.items()
                                        if route.provider == name and route.model})
                 for name in {route.provider for route in routes.values()}}
    return Router({alias: instances[route.provider] for alias, route in routes.items()})
