"""Any OpenAI-compatible Chat Completions endpoint: a hosted API, vLLM, llama.cpp's server, Ollama.

Answers are streamed by default (text reaches the run's sink while the model writes; a server
that answers with a whole body instead is read as one). Transient failures (connection errors,
silence past the timeout, 429, 5xx, a stream that breaks off) are retried here a few times
within a second or so, for a blip; an outage that outlasts them (or a 429 whose Retry-After is
longer than a blip) is raised as ModelUnavailable, which the run waits out without holding a
worker (worker/outage.py). So the agent loop sees a reply, ContextTooLong (the one refusal it can
act on), ModelUnavailable, or one ProviderError sentence it can record as the run's reason.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity import wait_exponential

from tickwork.worker.model import (ContextTooLong, Message, ModelUnavailable, Reply, RunView,
                                   TextSink, ToolSchema)
from tickwork.worker.providers.openai_stream import (MalformedAnswer, StreamAssembler, parse_reply,
                                            sse_events)

MESSAGE_LIMIT = 300  # characters of a server's error message kept in ours
# A stream may trickle (keep-alives, slow tokens) for at most this many timeouts in all; the
# timeout itself bounds silence.
DEADLINE_TIMEOUTS = 10
# How servers say the messages exceed the model's context: OpenAI and llama-cpp-python
# (code context_length_exceeded, "This model's maximum context length is …"), vLLM (the same
# sentence), llama.cpp (exceed_context_size_error, "the request exceeds the available context
# size"), llama-cpp-python's own "Requested tokens (N) exceed context window of M", Ollama
# ("exceeded max context length").
_CONTEXT_TOO_LONG = re.compile(
    r"context[_ ]length[_ ]exceeded|exceed_context_size_error|max(imum)? context length"
    r"|exceed\w*\s+(the\s+)?(available\s+|model's\s+)?context\s+(size|window|length)"
    r"|prompt is too long", re.IGNORECASE)


class ProviderError(RuntimeError):
    """The model endpoint failed for good: after retries, or with a request it will never accept."""


class Unavailable(ProviderError, ModelUnavailable):
    """The endpoint is down for now, after the quick retries: the run parks and tries later."""


class _OptionRefused(ProviderError):
    """A 400 naming stream_options: a server (or an old API version) that does not know it."""


class _Transient(Exception):
    """A failure worth retrying; retry_after is the server's Retry-After, in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OpenAIProvider:
    def __init__(self, base_url: str, api_key: str, model_by_alias: dict[str, str],
                 http: httpx.AsyncClient | None = None, timeout: float = 60.0, *,
                 stream: bool = True, max_attempts: int = 3, backoff_seconds: float = 0.25,
                 max_retry_after: float = 2.0) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._models = dict(model_by_alias)
        self._owns_http = http is None
        self._http = http if http is not None else httpx.AsyncClient()
        self._timeout = timeout
        self._stream = stream
        self._usage_option = True  # until a server refuses stream_options
        self._max_attempts = max_attempts
        self._backoff = wait_exponential(multiplier=backoff_seconds, max=30)
        # A longer Retry-After is not waited out inside one model turn, holding a worker's
        # slot: the run is parked instead (ModelUnavailable).
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
        if self._stream:
            body["stream"] = True
            if self._usage_option:
                body["stream_options"] = {"include_usage": True}
        try:
            return await self._with_retries(body, on_text)
        except _OptionRefused:
            if "stream_options" not in body:
                raise
        # Streaming still works without it; usage is then whatever the server sends anyway.
        self._usage_option = False
        del body["stream_options"]
        return await self._with_retries(body, on_text)

    async def _with_retries(self, body: dict[str, Any], on_text: TextSink | None) -> Reply:
        retrying = AsyncRetrying(stop=stop_after_attempt(self._max_attempts), wait=self._wait,
                                 retry=retry_if_exception(self._retryable), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    # A retry after a stream broke off streams again: a tail may show the
                    # broken-off text before the answer that counts (the reply holds only that).
                    return await self._attempt(body, on_text)
        except _Transient as failure:
            tries = retrying.statistics.get("attempt_number", 1)
            raise Unavailable(self._scrub(
                f"Model '{body['model']}' failed after {tries} attempt(s): {failure}"),
                failure.retry_after) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(self, body: dict[str, Any], on_text: TextSink | None) -> Reply:
        try:
            async with asyncio.timeout(self._timeout * DEADLINE_TIMEOUTS):
                async with self._http.stream("POST", self._url, json=body,
                                             headers=self._headers(),
                                             timeout=self._timeout) as response:
                    await self._refuse_failures(body["model"], response)
                    if response.headers.get("content-type", "").startswith("text/event-stream"):
                        return await self._read_stream(body["model"], response, on_text)
                    return self._read_body(body["model"], response.status_code,
                                           await response.aread())
        except httpx.TimeoutException:
            raise _Transient(f"the endpoint {self._url} went silent past the "
                             f"{self._timeout:g} s timeout")
        except TimeoutError:  # asyncio.timeout: the whole answer took too long
            raise _Transient(f"the endpoint {self._url} did not finish its answer within "
                             f"{self._timeout * DEADLINE_TIMEOUTS:g} s")
        except httpx.TransportError as error:
            raise _Transient(f"could not reach {self._url} or lost it mid-answer "
                             f"({type(error).__name__})")

    async def _refuse_failures(self, model: str, response: httpx.Response) -> None:
        if response.is_success:
            return
        await response.aread()
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(self._status_sentence(response), retry_after_seconds(response))
        if _CONTEXT_TOO_LONG.search(response.text[:4000]):
            raise ContextTooLong(self._scrub(f"Model '{model}' refused the messages as longer "
                                             f"than its context: {server_message(response)}"))
        refused = _OptionRefused if "stream_options" in response.text[:4000] else ProviderError
        raise refused(f"Model '{model}' was refused: {self._status_sentence(response)}")

    async def _read_stream(self, model: str, response: httpx.Response,
                           on_text: TextSink | None) -> Reply:
        assembler = StreamAssembler(on_text)
        async for event, data in sse_events(response.aiter_lines()):
            if data.strip() == "[DONE]":
                return assembler.reply()
            try:
                chunk = json.loads(data)
            except ValueError:
                chunk = None
            if event == "error" or (isinstance(chunk, dict) and "error" in chunk):
                self._stream_failure(model, data, chunk)
            if chunk is None:
                raise ProviderError(f"Model '{model}' streamed an event that is not JSON.")
            try:
                assembler.feed(chunk)
            except MalformedAnswer as error:
                raise ProviderError(f"Model '{model}' streamed an answer that is not a chat "
                                    f"completion: {error}.") from None
        if assembler.finished:  # complete, only the closing [DONE] is missing
            return assembler.reply()
        raise _Transient("the stream ended before the answer was complete")

    def _stream_failure(self, model: str, data: str, chunk: Any) -> None:
        """An error reported inside a stream that had already answered 200."""
        error = chunk.get("error", chunk) if isinstance(chunk, dict) else (chunk or data)
        message = error.get("message") if isinstance(error, dict) else error
        line = _one_line(str(message or data))
        if _CONTEXT_TOO_LONG.search(data[:4000]):
            raise ContextTooLong(self._scrub(f"Model '{model}' refused the messages as longer "
                                             f"than its context: {line}"))
        raise _Transient(self._scrub(f"the stream reported an error: {line}"))

    def _read_body(self, model: str, status: int, content: bytes) -> Reply:
        try:
            data = json.loads(content)
        except ValueError:
            raise ProviderError(f"Model '{model}' answered {status} with a body "
                                "that is not JSON.") from None
        try:
            return parse_reply(data)
        except MalformedAnswer:
            raise ProviderError("The model endpoint answered without choices[0].message.") from None

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
    return _one_line(" ".join(str(message).split()) or response.reason_phrase or "no message")


def _one_line(text: str) -> str:
    line = " ".join(text.split()) or "no message"
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
