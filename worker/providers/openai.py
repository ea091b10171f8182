"""Any OpenAI-compatible Chat Completions endpoint: a hosted API, vLLM, llama.cpp's server, Ollama.

Transient failures (connection errors, timeouts, 429, 5xx) are retried here, at the leaf, so the
agent loop sees either a reply or one ProviderError sentence it can record as the run's reason.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity import wait_exponential

from worker.model import (Message, Reply, RunView, TextSink, ToolCall, ToolSchema,
                          canonical_name)

MESSAGE_LIMIT = 300  # characters of a server's error message kept in ours


class ProviderError(RuntimeError):
    """The model endpoint failed for good: after retries, or with a request it will never accept."""


class _Transient(Exception):
    """A failure worth retrying; retry_after is the server's Retry-After, in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAIProvider:
    def __init__(self, base_url: str, api_key: str, model_by_alias: dict[str, str],
                 http: httpx.AsyncClient | None = None, timeout: float = 60.0, *,
                 max_attempts: int = 4, backoff_seconds: float = 0.5,
                 max_retry_after: float = 20.0) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._models = dict(model_by_alias)
        self._owns_http = http is None
        self._http = http if http is not None else httpx.AsyncClient()
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._backoff = wait_exponential(multiplier=backoff_seconds, max=30)
        # A longer Retry-After is not waited out inside one model turn: the run fails instead.
        self._max_retry_after = max_retry_after

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def complete(self, alias: str, messages: list[Message], tools: list[ToolSchema],
                       run: RunView, *, on_text: TextSink | None = None) -> Reply:
        model = self._models.get(alias) or self._models.get("default")
        if not model:
            raise ProviderError(f"No openai model is configured for alias '{alias}'.")
        body: dict[str, Any] = {"model": model, "messages": [m.to_openai() for m in messages]}
        if tools:
            body["tools"] = [tool.to_openai() for tool in tools]
            body["tool_choice"] = "auto"
        return parse_reply(await self._post_with_retries(body))

    async def _post_with_retries(self, body: dict[str, Any]) -> Any:
        retrying = AsyncRetrying(stop=stop_after_attempt(self._max_attempts), wait=self._wait,
                                 retry=retry_if_exception(self._retryable), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._post_once(body)
        except _Transient as failure:
            tries = retrying.statistics.get("attempt_number", 1)
            raise ProviderError(self._scrub(
                f"Model '{body['model']}' failed after {tries} attempt(s): {failure}")) from None

    async def _post_once(self, body: dict[str, Any]) -> Any:
        model = body["model"]
        try:
            response = await self._http.post(self._url, json=body, headers=self._headers(),
                                             timeout=self._timeout)
        except httpx.TimeoutException:
            raise _Transient(f"the endpoint {self._url} timed out after {self._timeout:g} s")
        except httpx.TransportError as error:
            raise _Transient(f"could not reach {self._url} ({type(error).__name__})")
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(self._status_sentence(response), retry_after_seconds(response))
        if not response.is_success:
            raise ProviderError(f"Model '{model}' was refused: {self._status_sentence(response)}")
        try:
            return response.json()
        except ValueError:
            raise ProviderError(f"Model '{model}' answered {response.status_code} with a body "
                                "that is not JSON.") from None

    def _headers(self) -> dict[str, str]:
        # Local servers (llama.cpp, Ollama) take no key; an empty Bearer confuses some of them.
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _retryable(self, error: BaseException) -> bool:
        return isinstance(error, _Transient) and (
            error.retry_after is None or error.retry_after <= self._max_retry_after)

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Transient) and error.retry_after is not None:
            return error.retry_after
        return self._backoff(state)

    def _status_sentence(self, response: httpx.Response) -> str:
        sentence = f"the endpoint answered {response.status_code}: {server_message(response)}"
        if "retry-after" in response.headers:
            sentence += f" (Retry-After: {response.headers['retry-after'][:40]})"
        return self._scrub(sentence)

    def _scrub(self, text: str) -> str:
        """Servers echo keys back ("Incorrect API key provided: sk-…"); ours never leaves."""
        return text.replace(self._api_key, "***") if self._api_key else text


def server_message(response: httpx.Response) -> str:
    """The server's own explanation, as one line of at most MESSAGE_LIMIT characters."""
    try:
        data = response.json()
    except ValueError:
        data = None
    message: Any = response.text
    if isinstance(data, dict):
        error = data.get("error")
        message = (error.get("message") if isinstance(error, dict) else error) \
            or data.get("message") or data.get("detail") or response.text
    line = " ".join(str(message).split()) or response.reason_phrase or "no message"
    return line if len(line) <= MESSAGE_LIMIT else line[:MESSAGE_LIMIT - 1] + "…"


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Retry-After as seconds: a number (fractions tolerated) or an HTTP date."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, seconds) if seconds == seconds else None  # NaN is no answer


def parse_reply(data: Any) -> Reply:
    """choices[0].message as a Reply: canonical tool names, arguments as a dict."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        message = None
    if not isinstance(message, dict):
        raise ProviderError("The model endpoint answered without choices[0].message.")
    calls = [parse_call(call) for call in message.get("tool_calls") or []]
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return Reply(text=_text(message.get("content")), tool_calls=calls,
                 reasoning=reasoning if isinstance(reasoning, str) else "")


def parse_call(call: Any) -> ToolCall:
    function = (call.get("function") if isinstance(call, dict) else None) or {}
    # Some local servers omit ids; the tool result still needs one to answer to.
    call_id = (call.get("id") if isinstance(call, dict) else None) or f"call_{uuid.uuid4().hex}"
    return ToolCall(str(call_id), canonical_name(str(function.get("name") or "")),
                    parse_arguments(function.get("arguments")))


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A dict of arguments; anything that is not a JSON object is kept as {"_raw": …} so the
    loop can refuse the call with the model's own text instead of guessing."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}  # servers send "" for a call without arguments
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_raw": raw}
    return {"_raw": json.dumps(raw)}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts, as a few servers answer
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
