"""The openai provider against a real HTTP server (uvicorn, in-process) mimicking the API."""

import asyncio
import socket
import threading
import time
from collections import deque

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from worker.model import Message, Reply, RunView, ToolCall, ToolSchema
from worker.providers import (DEFAULT_MODELS, OpenAIProvider, ProviderError, ProviderSettings,
                              Route, ScriptedProvider, build_router, parse_models)

KEY = "sk-test-SECRET-0123456789"
RUN = RunView({})


class FakeChat:
    """Answers POST /v1/chat/completions from a queue of canned responses, recording requests."""

    def __init__(self):
        self.requests: list[dict] = []
        self.responses: deque = deque()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)

    async def chat(self, request: Request):
        self.requests.append({"headers": dict(request.headers), "body": await request.json()})
        status, body, headers, delay = (self.responses.popleft() if self.responses
                                        else (200, completion("ok"), {}, 0))
        await asyncio.sleep(delay)
        if isinstance(body, str):
            return PlainTextResponse(body, status_code=status, headers=headers)
        return JSONResponse(body, status_code=status, headers=headers)

    def answer(self, status=200, body=None, headers=None, delay=0.0):
        self.responses.append((status, completion("ok") if body is None else body,
                               headers or {}, delay))


def completion(content=None, tool_calls=None, **extra):
    message = {"role": "assistant", "content": content, **extra}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def wire_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture(scope="module")
def server():
    fake = FakeChat()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(fake.app, log_level="warning", lifespan="off")
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uvicorn_server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    fake.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    yield fake
    uvicorn_server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture
def chat(server):
    server.requests.clear()
    server.responses.clear()
    return server


@pytest.fixture
async def provider(chat):
    provider = OpenAIProvider(chat.base_url, KEY, {"default": "gpt-test", "cheap": "gpt-cheap"},
                              timeout=5, backoff_seconds=0.01)
    yield provider
    await provider.aclose()


GET_RECORD = ToolSchema("demo.get_record", "Read one record.",
                        {"type": "object", "properties": {"id": {"type": "integer"}}})


async def test_tool_calls_round_trip_between_wire_and_canonical_names(chat, provider):
    chat.answer(body=completion(None, [wire_call("call_a", "demo__get_record", '{"id": 7}')]))
    history = [Message("system", "You are terse."), Message("user", "Get record 1."),
               Message("assistant", "", [ToolCall("call_x", "demo.get_record", {"id": 1})]),
               Message("tool", '{"id": 1}', tool_call_id="call_x")]
    reply = await provider.complete("default", history, [GET_RECORD], RUN)
    assert reply == Reply(text="", tool_calls=[ToolCall("call_a", "demo.get_record", {"id": 7})])
    sent = chat.requests[0]["body"]
    assert sent["model"] == "gpt-test" and sent["tool_choice"] == "auto"
    assert sent["tools"][0]["function"]["name"] == "demo__get_record"
    assistant, tool = sent["messages"][2], sent["messages"][3]
    assert assistant["content"] == ""  # not null: some servers refuse null beside tool_calls
    assert assistant["tool_calls"] == [wire_call("call_x", "demo__get_record", '{"id": 1}')]
    assert tool == {"role": "tool", "content": '{"id": 1}', "tool_call_id": "call_x"}


async def test_without_tools_neither_tools_nor_tool_choice_is_sent(chat, provider):
    assert (await provider.complete("default", [Message("user", "hi")], [], RUN)).text == "ok"
    assert "tools" not in chat.requests[0]["body"]
    assert "tool_choice" not in chat.requests[0]["body"]


async def test_each_alias_sends_its_configured_model_and_others_use_defaults(chat, provider):
    await provider.complete("cheap", [], [], RUN)
    await provider.complete("judge", [], [], RUN)
    assert [r["body"]["model"] for r in chat.requests] == ["gpt-cheap", "gpt-test"]


async def test_null_content_is_empty_text_and_reasoning_content_is_kept(chat, provider):
    chat.answer(body=completion(None, reasoning_content="Think first."))
    assert await provider.complete("default", [], [], RUN) == Reply("", [], "Think first.")


async def test_unparseable_arguments_are_kept_raw_for_the_loop_to_refuse(chat, provider):
    chat.answer(body=completion("", [wire_call("c1", "demo__get_record", "{id: 7"),
                                     wire_call("c2", "demo__get_record", "[1, 2]"),
                                     wire_call("c3", "demo__list_records", "")]))
    calls = (await provider.complete("default", [], [GET_RECORD], RUN)).tool_calls
    assert [c.arguments for c in calls] == [{"_raw": "{id: 7"}, {"_raw": "[1, 2]"}, {}]


async def test_a_500_is_retried_and_the_retry_succeeds(chat, provider):
    chat.answer(500, {"error": {"message": "overloaded"}})
    chat.answer(body=completion("after retry"))
    assert (await provider.complete("default", [], [], RUN)).text == "after retry"
    assert len(chat.requests) == 2


async def test_a_429_waits_out_a_small_retry_after_then_retries(chat, provider):
    chat.answer(429, {"error": {"message": "slow down"}}, {"Retry-After": "0.4"})
    started = time.monotonic()
    assert (await provider.complete("default", [], [], RUN)).text == "ok"
    assert time.monotonic() - started >= 0.4 and len(chat.requests) == 2


async def test_a_429_with_a_long_retry_after_fails_at_once(chat, provider):
    chat.answer(429, {"error": {"message": "quota"}}, {"Retry-After": "3600"})
    with pytest.raises(ProviderError, match="429.*quota.*Retry-After: 3600"):
        await provider.complete("default", [], [], RUN)
    assert len(chat.requests) == 1


async def test_persistent_5xx_gives_up_after_four_attempts_with_a_sentence(chat, provider):
    for _ in range(4):
        chat.answer(503, "upstream\n  gone")
    with pytest.raises(ProviderError) as failed:
        await provider.complete("default", [], [], RUN)
    assert len(chat.requests) == 4
    assert str(failed.value) == ("Model 'gpt-test' failed after 4 attempt(s): "
                                 "the endpoint answered 503: upstream gone")


async def test_a_400_is_not_retried_and_its_error_never_shows_the_key(chat, provider):
    echoed = f"Incorrect API key provided: {KEY}. " + "x" * 1000
    chat.answer(400, {"error": {"message": echoed}})
    with pytest.raises(ProviderError) as refused:
        await provider.complete("default", [], [], RUN)
    assert len(chat.requests) == 1
    message = str(refused.value)
    assert "400" in message and "Incorrect API key provided: ***" in message
    assert KEY not in message and "SECRET" not in message and len(message) < 400
    assert KEY not in repr(refused.value.__cause__) + repr(refused.value.__context__)


async def test_a_timeout_is_retried(chat):
    provider = OpenAIProvider(chat.base_url, "", {"default": "m"}, timeout=0.3,
                              backoff_seconds=0.01)
    chat.answer(delay=1)
    chat.answer(body=completion("in time"))
    assert (await provider.complete("default", [], [], RUN)).text == "in time"
    await provider.aclose()


async def test_an_unreachable_endpoint_is_retried_then_fails_with_a_sentence():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider(f"http://127.0.0.1:{port}/v1", KEY, {"default": "m"},
                              backoff_seconds=0.01)
    with pytest.raises(ProviderError, match=r"failed after 4 attempt\(s\): could not reach"):
        await provider.complete("default", [], [], RUN)
    await provider.aclose()


async def test_a_body_that_is_not_a_completion_is_a_provider_error(chat, provider):
    chat.answer(body="<html>proxy</html>")
    with pytest.raises(ProviderError, match="not JSON"):
        await provider.complete("default", [], [], RUN)
    chat.answer(body={"choices": []})
    with pytest.raises(ProviderError, match=r"choices\[0\]\.message"):
        await provider.complete("default", [], [], RUN)


async def test_the_key_is_sent_as_a_bearer_token_only_when_set(chat, provider):
    await provider.complete("default", [], [], RUN)
    keyless = OpenAIProvider(chat.base_url, "", {"default": "m"})
    await keyless.complete("default", [], [], RUN)
    await keyless.aclose()
    assert chat.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert "authorization" not in chat.requests[1]["headers"]


async def test_a_scripted_reply_reads_the_same_through_the_openai_provider(chat, provider):
    """The scripted provider is kept faithful: its reply, spoken on the wire, parses back equal."""
    script = {"script": [{"text": "Checking.", "tool_calls": [
        {"name": "demo.get_record", "arguments": {"id": 3, "tags": ["a"]}}]}]}
    scripted = await ScriptedProvider().complete("default", [], [GET_RECORD], RunView(script))
    wire = Message("assistant", scripted.text, scripted.tool_calls).to_openai()
    chat.answer(body=completion(wire["content"], wire["tool_calls"]))
    assert await provider.complete("default", [], [GET_RECORD], RUN) == scripted


# Routing


@pytest.mark.parametrize("spec", ["", "   "])
def test_unset_models_route_default_and_judge_to_scripted(spec):
    assert parse_models(spec) == parse_models(DEFAULT_MODELS) == {
        "default": Route("scripted"), "judge": Route("scripted")}


def test_models_are_parsed_as_alias_provider_and_model():
    assert parse_models(" default=scripted, judge=scripted ,cheap=openai:gpt-4o-mini,"
                        "local=openai:llama3.1:8b,") == {
        "default": Route("scripted"), "judge": Route("scripted"),
        "cheap": Route("openai", "gpt-4o-mini"), "local": Route("openai", "llama3.1:8b")}


@pytest.mark.parametrize("spec, says", [
    ("default", "not alias=provider"),
    ("default=scripted,cheap", "not alias=provider"),
    ("default=anthropic", "unknown provider 'anthropic'"),
    ("default=openai", "without a model"),
    ("default=openai:", "without a model"),
    ("default=scripted:gpt-4o", "takes no model"),
    ("=scripted", "no valid alias"),
    ("default=scripted,default=openai:m", "twice"),
    ("cheap=openai:gpt-4o-mini", "must route the alias 'default'"),
])
def test_bad_models_strings_are_refused_with_a_sentence(spec, says):
    with pytest.raises(ValueError, match=says):
        parse_models(spec)


def test_provider_settings_read_tickwork_variables_and_hide_the_key(monkeypatch):
    monkeypatch.setenv("TICKWORK_MODELS", "default=openai:m")
    monkeypatch.setenv("TICKWORK_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("TICKWORK_OPENAI_TIMEOUT_SECONDS", "7.5")
    settings = ProviderSettings()
    assert (settings.models, settings.openai_api_key, settings.openai_timeout_seconds) == (
        "default=openai:m", KEY, 7.5)
    assert KEY not in repr(settings)


async def test_the_router_dispatches_each_alias_to_its_configured_provider(chat):
    router = build_router(ProviderSettings(
        models="default=scripted,cheap=openai:gpt-cheap", openai_base_url=chat.base_url))
    scripted_run = RunView({"script": [{"text": "from the script"}], "judge": ["stalled"]})
    assert (await router.complete("cheap", [], [], scripted_run)).text == "ok"
    assert (await router.complete("default", [], [], scripted_run)).text == "from the script"
    # Unconfigured aliases fall back to default's provider, which still sees the alias.
    assert (await router.complete("judge", [], [], scripted_run)).text == "stalled"
    assert (await router.complete("fast", [], [], scripted_run)).text == "from the script"
    assert [r["body"]["model"] for r in chat.requests] == ["gpt-cheap"]
    await router.aclose()


async def test_an_alias_falling_back_to_an_openai_default_uses_the_default_model(chat):
    router = build_router(ProviderSettings(models="default=openai:big,cheap=openai:small",
                                           openai_base_url=chat.base_url, openai_api_key=KEY))
    for alias in ("judge", "cheap", "default"):
        await router.complete(alias, [], [], RUN)
    assert [r["body"]["model"] for r in chat.requests] == ["big", "small", "big"]
    assert chat.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    await router.aclose()


def test_build_router_refuses_a_bad_models_string():
    with pytest.raises(ValueError, match="unknown provider"):
        build_router(ProviderSettings(models="default=gpt-4o"))
