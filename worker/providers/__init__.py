"""Model providers behind the ModelProvider protocol, reached by alias through a Router."""

from tickwork.worker.providers.openai import OpenAIProvider, ProviderError
from tickwork.worker.providers.routing import (DEFAULT_MODELS, ProviderSettings, Route, Router,
                                      build_router, parse_models)
from tickwork.worker.providers.scripted import ScriptError, ScriptedProvider

__all__ = ["DEFAULT_MODELS", "OpenAIProvider", "ProviderError", "ProviderSettings", "Route",
           "Router", "ScriptError", "ScriptedProvider", "build_router", "parse_models"]
