"""The openai provider against a real HTTP server (tests/hostile_model.py) speaking the API:
streamed and whole answers, hostile ids and arguments, usage, refusals, retries and hangs."""

import json
import re
import socket

import pytest

from tests.hostile_model import (Answer, HostileModel, call, failure, reply, server_error,
                                 silence, too_many_requests)
from tickwork.worker.model import (ContextTooLong, Message, ModelUnavailable, Reply, RunView,
                                   ToolCall, ToolSchema, Usage)
from tickwork.worker.providers import (DEFAULT_MODELS, OpenAIProvider, ProviderError, ProviderSettings,
                              Route, ScriptedProvider, build_router, parse_models)

KEY = "sk-test-SECRET-0123456789"
RUN = RunView({})
GET_RECORD = ToolSchema("demo.get_record", "Read one record.",
                        {"type": "object", "properties": {"id": {"type": "integer"}}})
BOTH = pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])


@pytest.fixture(scope="module")
def server():
    with HostileModel() as hostile:
        yield hostile


@pytest.fixture
def model(server):
    server.requests.clear()
    server.answers.clear()
    server.context_chars = None
    return server


def make(model, *, stream=True, timeout=5.0, key=KEY, **options):
    return OpenAIProvider(model.base_url, key, {"default": "gpt-test", "cheap": "gpt-cheap"},
                          timeout=timeout, stream=stream, backoff_seconds=0.01, **options)


@pytest.fixture
async def provider(model):
    provider = make(model)
    yield provider
    await provider.aclose()


@pytest.fixture
async def whole(model):
    provider = make(model, stream=False)
    yield provider
    await provider.aclose()


async def ask(model, stream=True, *, tools=(GET_RECORD,), on_text=None, history=(), **options):
    provider = make(model, stream=stream, **options)
    try:
        return await provider.complete("default", list(history), list(tools), RUN,
                                       on_text=on_text)
    finally:
        await provider.aclose()


def sent(model, n=0):
    return model.requests[n].body


# Shapes on the wire


@BOTH
async def test_tool_calls_round_trip_between_wire_and_canonical_names(model, stream):
    model.queue(reply(None, call("demo.get_record", {"id": 7}, id="call_a")))
    history = [Message("system", "You are terse."), Message("user", "Get record 1."),
               Message("assistant", "", [ToolCall("call_x", "demo.get_record", {"id": 1})]),
               Message("tool", '{"id": 1}', tool_call_id="call_x")]
    answer = await ask(model, stream, history=history)
    assert answer == Reply(text="", tool_calls=[
        ToolCall("call_a", "demo.get_record", {"id": 7}, provider_id="call_a")], streamed=stream)
    body = sent(model)
    assert body["model"] == "gpt-test" and body["tool_choice"] == "auto"
    assert body["tools"][0]["function"]["name"] == "demo__get_record"
    assert (body.get("stream"), body.get("stream_options")) == (
        (True, {"include_usage": True}) if stream else (None, None))
    assistant, tool = body["messages"][2], body["messages"][3]
    assert assistant["content"] == ""  # not null: some servers refuse null beside tool_calls
    assert assistant["tool_calls"] == [{"id": "call_x", "type": "function", "function": {
        "name": "demo__get_record", "arguments": '{"id": 1}'}}]
    assert tool == {"role": "tool", "content": '{"id": 1}', "tool_call_id": "call_x"}


async def test_without_tools_neither_tools_nor_tool_choice_is_sent(model):
    model.queue(reply("ok"))
    assert (await ask(model, tools=[], history=[Message("user", "hi")])).text == "ok"
    assert "tools" not in sent(model) and "tool_choice" not in sent(model)


async def test_each_alias_sends_its_configured_model_and_others_use_defaults(model, provider):
    model.queue(reply("a"), reply("b"))
    await provider.complete("cheap", [], [], RUN)
    await provider.complete("judge", [], [], RUN)
    assert [r.body["model"] for r in model.requests] == ["gpt-cheap", "gpt-test"]


# Streaming


async def test_streamed_text_reaches_on_text_piece_by_piece_in_order(model):
    model.queue(reply("The quick brown fox.", piece_chars=3))
    pieces: list[str] = []
    answer = await ask(model, on_text=pieces.append)
    assert pieces == ["The", " qu", "ick", " br", "own", " fo", "x."]
    assert answer == Reply(text="The quick brown fox.", streamed=True)


async def test_text_is_shown_as_it_arrives_and_a_stream_that_falls_silent_is_retried(model):
    # Two pieces, then silence past the timeout: the pieces were already shown (the sink heard
    # them before the stream ended), and the retry's answer is the reply.
    model.queue(reply("abcdef", piece_chars=3, hang_after_chunks=3), reply("again"))
    pieces: list[str] = []
    answer = await ask(model, on_text=pieces.append, timeout=1.0)
    assert pieces[:2] == ["abc", "def"] and "".join(pieces[2:]) == "again"
    assert answer.text == "again" and len(model.requests) == 2


async def test_tool_calls_are_assembled_from_streamed_fragments_whatever_their_ids(model):
    odd = "tool/" + "x" * 295
    arguments = {"recipient": "ops", "text": "a long message " * 5}
    model.queue(reply(None,  # content: null throughout
                      call("demo.send_message", arguments, id="call_0"),
                      call("demo.send_message", {"recipient": "b", "text": "2"}, id="call_0"),
                      call("demo.get_record", {"id": 3}, id=odd),
                      call("demo.get_record", {"id": 4}, id=None),
                      usage=(321, 54)))
    answer = await ask(model)
    assert answer.text == "" and answer.streamed
    assert [(c.name, c.arguments, c.provider_id) for c in answer.tool_calls] == [
        ("demo.send_message", arguments, "call_0"),
        ("demo.send_message", {"recipient": "b", "text": "2"}, "call_0"),
        ("demo.get_record", {"id": 3}, odd),
        ("demo.get_record", {"id": 4}, None)]
    assert answer.tool_calls[3].id == ""  # missing stays missing: the harness names calls
    assert answer.usage == Usage(321, 54)


async def test_fragments_without_an_index_and_names_sent_twice_still_assemble(model):
    def event(delta, finish=None):
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta,
                                                   "finish_reason": finish}]})
    fragment = lambda **f: {"tool_calls": [f]}
    model.queue(Answer(sse=[
        ": keep-alive", "",
        event(fragment(id="x1", function={"name": "demo__get_record", "arguments": '{"id"'})), "",
        event(fragment(function={"name": "demo__get_record", "arguments": ": 3}"})), "",
        event(fragment(id="x2", function={"name": "demo__list_records", "arguments": "{}"})), "",
        event({}, "tool_calls"), ""]))  # and no [DONE]: the finish reason is enough
    answer = await ask(model)
    assert [(c.name, c.arguments, c.provider_id) for c in answer.tool_calls] == [
        ("demo.get_record", {"id": 3}, "x1"), ("demo.list_records", {}, "x2")]


@BOTH
async def test_unparseable_arguments_are_kept_raw_for_the_loop_to_refuse(model, stream):
    model.queue(reply("", call("demo.get_record", "{id: 7"), call("demo.get_record", "[1, 2]"),
                      call("demo.list_records", "")))
    calls = (await ask(model, stream)).tool_calls
    assert [c.arguments for c in calls] == [{"_raw": "{id: 7"}, {"_raw": "[1, 2]"}, {}]


@BOTH
async def test_null_content_is_empty_text_and_usage_is_read(model, stream):
    model.queue(reply(None, usage=(1200, 7)), reply("no usage reported"))
    first, second = await ask(model, stream), await ask(model, stream)
    assert (first.text, first.usage) == ("", Usage(1200, 7))
    assert (second.text, second.usage) == ("no usage reported", None)


async def test_reasoning_content_is_kept_apart_from_the_answer(model):
    model.queue(Answer(raw={"choices": [{"index": 0, "message": {
        "role": "assistant", "content": None, "reasoning_content": "Think first."}}]}))
    assert await ask(model, stream=False) == Reply("", [], "Think first.")


async def test_a_server_that_ignores_stream_true_is_read_as_a_whole_answer(model):
    model.queue(Answer(raw={"choices": [{"index": 0, "message": {
        "role": "assistant", "content": "whole"}}], "usage": {"prompt_tokens": 3}}))
    pieces: list[str] = []
    answer = await ask(model, on_text=pieces.append)
    assert (answer.text, answer.streamed, answer.usage, pieces) == ("whole", False,
                                                                    Usage(3, 0), [])


async def test_a_server_refusing_stream_options_is_asked_again_without_them(model, provider):
    model.queue(failure(400, "Unrecognized request argument supplied: stream_options",
                        kind="invalid_request_error"), reply("streamed anyway"), reply("again"))
    assert (await provider.complete("default", [], [], RUN)).text == "streamed anyway"
    assert (await provider.complete("default", [], [], RUN)).text == "again"
    assert [("stream_options" in r.body, r.body["stream"]) for r in model.requests] == [
        (True, True), (False, True), (False, True)]  # remembered: not refused twice


async def test_a_stream_that_ends_before_the_answer_is_complete_is_retried(model):
    model.queue(Answer(sse=['data: {"choices": [{"index": 0, "delta": {"content": "cut"}}]}', ""]),
                reply("complete"))
    assert (await ask(model)).text == "complete" and len(model.requests) == 2


# Refusals and retries


CONTEXT_REFUSALS = {
    "openai": {"error": {"message": "This model's maximum context length is 8192 tokens. However,"
                                    " your messages resulted in 9001 tokens.",
                         "type": "invalid_request_error", "param": "messages",
                         "code": "context_length_exceeded"}},
    "vllm": {"object": "error", "message": "This model's maximum context length is 2048 tokens. "
                                          "However, you requested 2100 tokens (2000 in the "
                                          "messages, 100 in the completion).",
             "type": "BadRequestError", "param": None, "code": 400},
    "llama.cpp": {"error": {"code": 400, "message": "the request exceeds the available context "
                                                    "size, try increasing it",
                            "type": "exceed_context_size_error", "n_prompt_tokens": 5000,
                            "n_ctx": 4096}},
    "llama-cpp-python": {"error": {"message": "Requested tokens (5000) exceed context window of "
                                              "4096", "type": "invalid_request_error"}},
}


@pytest.mark.parametrize("server_kind", sorted(CONTEXT_REFUSALS))
async def test_a_context_length_refusal_is_context_too_long_and_never_retried(model, server_kind):
    model.queue(Answer(status=400, raw=CONTEXT_REFUSALS[server_kind]))
    with pytest.raises(ContextTooLong, match="longer than its context"):
        await ask(model)
    assert len(model.requests) == 1


async def test_a_server_enforcing_its_context_size_is_answered_with_context_too_long(model):
    model.context_chars = 50
    model.queue(reply("fits"))
    with pytest.raises(ContextTooLong, match="maximum context length is 50"):
        await ask(model, history=[Message("user", "x" * 51)])
    assert (await ask(model, history=[Message("user", "x" * 50)])).text == "fits"
    assert model.queue and len(model.requests) == 2


async def test_errors_inside_a_stream_are_retried_unless_the_context_is_too_long(model):
    model.queue(Answer(sse=['error: {"code": 500, "message": "slot unavailable"}', ""]),
                reply("after the error"),
                Answer(sse=['data: {"error": {"message": "the request exceeds the available '
                            'context size"}}', ""]))
    assert (await ask(model)).text == "after the error"
    with pytest.raises(ContextTooLong):
        await ask(model)
    assert len(model.requests) == 3


async def test_a_500_is_retried_and_the_retry_succeeds(model):
    model.queue(server_error(), reply("after retry"))
    assert (await ask(model)).text == "after retry"
    assert len(model.requests) == 2


async def test_a_429_with_a_small_retry_after_is_retried_and_then_succeeds(model):
    model.queue(too_many_requests("0.1"), reply("after the wait"))
    assert (await ask(model)).text == "after the wait"
    assert [r.status for r in model.requests] == [429, 200]


async def test_a_429_with_a_long_retry_after_is_unavailable_at_once_with_its_wait(model):
    """Not waited out inside the call (that would hold a worker's slot): the run parks."""
    model.queue(failure(429, "quota", retry_after="3600"))
    with pytest.raises(ModelUnavailable, match="429.*quota.*Retry-After: 3600") as failed:
        await ask(model)
    assert len(model.requests) == 1
    assert failed.value.retry_after == 3600
    assert isinstance(failed.value, ProviderError)


async def test_persistent_5xx_is_unavailable_after_three_quick_attempts_with_a_sentence(model):
    model.queue(*[Answer(status=503, raw="upstream\n  gone") for _ in range(3)])
    with pytest.raises(ModelUnavailable) as failed:
        await ask(model)
    assert len(model.requests) == 3
    assert failed.value.retry_after is None
    assert str(failed.value) == ("Model 'gpt-test' failed after 3 attempt(s): "
                                 "the endpoint answered 503: upstream gone")


async def test_a_400_is_not_retried_and_its_error_never_shows_the_key(model):
    echoed = f"Incorrect API key provided: {KEY}. " + "x" * 1000
    model.queue(failure(400, echoed, kind="invalid_request_error"))
    with pytest.raises(ProviderError) as refused:
        await ask(model)
    assert len(model.requests) == 1
    message = str(refused.value)
    assert "400" in message and "Incorrect API key provided: ***" in message
    assert KEY not in message and "SECRET" not in message and len(message) < 400
    assert KEY not in repr(refused.value.__cause__) + repr(refused.value.__context__)


@BOTH
async def test_silence_past_the_timeout_is_retried(model, stream):
    model.queue(silence(4), reply("in time"))
    assert (await ask(model, stream, timeout=1.0)).text == "in time"


async def test_silence_on_every_attempt_ends_in_one_sentence(model):
    model.queue(silence(4), reply("x", hang_after_chunks=1))
    with pytest.raises(ProviderError, match=r"failed after 2 attempt\(s\): .*went silent"):
        await ask(model, timeout=1.0, max_attempts=2)


async def test_a_stream_that_only_trickles_keep_alives_is_bounded_by_the_deadline(model):
    model.queue(Answer(trickle=0.05))  # never silent for the 0.4 s timeout, never answering
    with pytest.raises(ProviderError, match=r"failed after 1 attempt\(s\): .*did not finish "
                                            r"its answer within 4 s"):
        await ask(model, timeout=0.4, max_attempts=1)


async def test_an_unreachable_endpoint_is_retried_then_fails_with_a_sentence():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider(f"http://127.0.0.1:{port}/v1", KEY, {"default": "m"},
                              backoff_seconds=0.01)
    with pytest.raises(ModelUnavailable, match=r"failed after 3 attempt\(s\): could not reach"):
        await provider.complete("default", [], [], RUN)
    await provider.aclose()


@BOTH
async def test_a_body_that_is_not_a_completion_is_a_provider_error(model, stream):
    model.queue(Answer(raw="<html>proxy</html>"), Answer(raw={"choices": []}))
    with pytest.raises(ProviderError, match="not JSON"):
        await ask(model, stream)
    with pytest.raises(ProviderError, match=r"choices\[0\]\.message"):
        await ask(model, stream)


async def test_the_key_is_sent_as_a_bearer_token_only_when_set(model):
    model.queue(reply("a"), reply("b"))
    await ask(model)
    await ask(model, key="")
    assert model.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert "authorization" not in model.requests[1].headers


@BOTH
async def test_a_scripted_reply_reads_the_same_through_the_openai_provider(model, stream):
    """The scripted provider is kept faithful: its reply, spoken on the wire, parses back equal
    (ids aside: the model's id is the provider id, and the harness renames every call)."""
    script = {"script": [{"text": "Checking.", "tool_calls": [
        {"name": "demo.get_record", "arguments": {"id": 3, "tags": ["a"]}}]}]}
    scripted = await ScriptedProvider().complete("default", [], [GET_RECORD], RunView(script))
    model.queue(reply(scripted.text, *[call(c.name, c.arguments, id=c.id)
                                       for c in scripted.tool_calls]))
    answer = await ask(model, stream)
    assert (answer.text, [(c.id, c.name, c.arguments) for c in answer.tool_calls]) == (
        scripted.text, [(c.id, c.name, c.arguments) for c in scripted.tool_calls])


# The hostile server refuses the histories the real API refuses (and the provider says so)


def assistant(*ids):
    return Message("assistant", "", [ToolCall(i, "demo.get_record", {"id": 1}) for i in ids])


def answered(i):
    return Message("tool", "{}", tool_call_id=i)


@pytest.mark.parametrize("history, says", [
    ([assistant("c1", "c1"), answered("c1"), answered("c1")], "duplicate tool call id"),
    ([assistant("c1"), answered("c1"), assistant("c1"), answered("c1")], "used by an earlier"),
    ([assistant("c1", "c2"), answered("c1"), Message("user", "next")], "did not have response"),
    ([assistant("c1"), answered("c1"), answered("c1")], "already answered"),
    ([Message("user", "hi"), answered("c9")], "must be a response to a preceeding"),
    ([assistant("a/" + "b" * 298), answered("a/" + "b" * 298)], "maximum length 40"),
    ([assistant("")], "tool_calls\\[0\\].id"),
])
async def test_a_malformed_history_is_refused_with_a_400_like_the_real_api(model, history, says):
    model.queue(reply("never"))
    with pytest.raises(ProviderError, match="400") as refused:
        await ask(model, history=history)
    assert model.requests[0].problem and re.search(says, model.requests[0].problem)
    assert "400" in str(refused.value) and len(model.answers) == 1  # no answer was used


async def test_a_well_formed_history_is_accepted(model):
    model.queue(reply("fine"))
    history = [Message("system", "s"), Message("user", "u"), assistant("c1", "c2"),
               answered("c2"), answered("c1"), Message("assistant", "text only"),
               Message("user", "more"), assistant("c3"), answered("c3")]
    assert (await ask(model, history=history)).text == "fine"
    assert model.refused_histories() == []


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
    assert (settings.models, settings.openai_api_key, settings.openai_timeout_seconds,
            settings.openai_stream) == ("default=openai:m", KEY, 7.5, True)
    assert KEY not in repr(settings)
    monkeypatch.setenv("TICKWORK_OPENAI_STREAM", "0")
    assert ProviderSettings().openai_stream is False


@pytest.mark.parametrize("stream", [True, False])
async def test_the_stream_setting_reaches_the_provider(model, stream):
    model.queue(reply("routed"))
    router = build_router(ProviderSettings(models="default=openai:m", openai_stream=stream,
                                           openai_base_url=model.base_url))
    assert (await router.complete("default", [], [], RUN)).streamed is stream
    assert sent(model).get("stream", False) is stream
    await router.aclose()


async def test_the_router_dispatches_each_alias_to_its_configured_provider(model):
    model.queue(reply("ok"))
    router = build_router(ProviderSettings(
        models="default=scripted,cheap=openai:gpt-cheap", openai_base_url=model.base_url))
    scripted_run = RunView({"script": [{"text": "from the script"}], "judge": ["stalled"]})
    assert (await router.complete("cheap", [], [], scripted_run)).text == "ok"
    assert (await router.complete("default", [], [], scripted_run)).text == "from the script"
    # Unconfigured aliases fall back to default's provider, which still sees the alias.
    assert (await router.complete("judge", [], [], scripted_run)).text == "stalled"
    assert (await router.complete("fast", [], [], scripted_run)).text == "from the script"
    assert [r.body["model"] for r in model.requests] == ["gpt-cheap"]
    await router.aclose()


async def test_an_alias_falling_back_to_an_openai_default_uses_the_default_model(model):
    model.queue(reply("1"), reply("2"), reply("3"))
    router = build_router(ProviderSettings(models="default=openai:big,cheap=openai:small",
                                           openai_base_url=model.base_url, openai_api_key=KEY))
    for alias in ("judge", "cheap", "default"):
        await router.complete(alias, [], [], RUN)
    assert [r.body["model"] for r in model.requests] == ["big", "small", "big"]
    await router.aclose()


def test_build_router_refuses_a_bad_models_string():
    with pytest.raises(ValueError, match="unknown provider"):
        build_router(ProviderSettings(models="default=gpt-4o"))
