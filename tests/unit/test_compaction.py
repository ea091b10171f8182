"""Compaction (worker/compaction.py, worker/model_turn.py): where a long conversation is cut,
what is sent after it, the summary's bounded prompt, the settings, and the model turn's use of
it with an injected provider and a journal that only buffers."""

from __future__ import annotations

import json
import random
from uuid import uuid4

import pytest
from pydantic import ValidationError

from tickwork.sql.journal import RunJournal
from tickwork.worker.agent_loop import Loop
from tickwork.worker.compaction import (ContextLimits, Summary, head_length, outgoing,
                                        parse_context_windows, split_point, summary_prompt)
from tickwork.worker.model import ContextTooLong, Message, Reply, ToolCall, Usage
from tickwork.worker.model_turn import ContextExhausted, call_model
from tickwork.worker.providers.scripted import ScriptedFailure, ScriptError, summary_reply
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.state import RunState

RESULT = json.dumps({"records": [{"id": i, "title": f"Record {i}"} for i in range(12)]})


def conversation(turns: int, calls_per_turn: int = 1) -> list[Message]:
    messages = [Message("system", "sys"), Message("user", "task")]
    for turn in range(turns):
        calls = [ToolCall(f"call_{turn}_{j}", "demo.get_record", {"id": turn * 10 + j})
                 for j in range(calls_per_turn)]
        messages.append(Message("assistant", f"turn {turn}", calls))
        messages += [Message("tool", RESULT, tool_call_id=c.id) for c in calls]
    return messages


def calls_answered_within(part: list[Message]) -> bool:
    """Every tool result in ``part`` has its call in ``part`` too."""
    called = {c.id for m in part if m.role == "assistant" for c in m.tool_calls}
    return all(m.tool_call_id in called for m in part if m.role == "tool")


# --- the splitting rule ------------------------------------------------------------------------

def test_the_cut_keeps_the_newest_turns_whole_and_summarises_the_rest():
    messages = conversation(6)
    cut = split_point(messages, head_length(messages), keep_turns=3)
    assert [m.content for m in messages[cut:] if m.role == "assistant"] == [
        "turn 3", "turn 4", "turn 5"]
    assert messages[cut].role == "assistant"


def test_nothing_is_cut_while_there_are_no_more_turns_than_are_kept():
    messages = conversation(3)
    assert split_point(messages, head_length(messages), keep_turns=3) is None
    assert split_point(messages, len(messages), keep_turns=1) is None


def test_a_result_after_the_cut_pulls_its_call_back_into_the_recent_part():
    """A harness note between a call and one of its results (as a resumed run may leave) must
    not leave the result without its call."""
    messages = conversation(4)
    early = ToolCall("call_early", "demo.get_record", {"id": 99})
    messages[4:4] = [Message("assistant", "early", [early]),
                     Message("user", "a note", injected=True)]
    messages.append(Message("assistant", "late"))
    messages.append(Message("tool", RESULT, tool_call_id="call_early"))  # answered late
    cut = split_point(messages, head_length(messages), keep_turns=1)
    assert cut is not None and calls_answered_within(messages[cut:])
    assert messages[cut].content == "early"


def test_a_turn_keeps_the_user_message_that_prompted_it():
    messages = [Message("system", "sys"), Message("user", "first")]
    for n in range(5):
        messages += [Message("assistant", f"answer {n}"), Message("user", f"question {n + 1}")]
    cut = split_point(messages, head_length(messages), keep_turns=2)
    assert [m.content for m in messages[cut:]] == [
        "question 3", "answer 3", "question 4", "answer 4", "question 5"]


def test_no_history_is_ever_cut_between_a_call_and_its_result():
    generator = random.Random(29)
    for _ in range(400):
        messages = [Message("system", "sys"), Message("user", "task")]
        for turn in range(generator.randint(0, 30)):
            calls = [ToolCall(f"c{turn}_{j}", "demo.get_record", {})
                     for j in range(generator.choice([0, 0, 1, 2, 4]))]
            if generator.random() < 0.2:
                messages.append(Message("user", "nudge", injected=True))
            messages.append(Message("assistant", f"t{turn}", calls))
            messages += [Message("tool", "r", tool_call_id=c.id) for c in calls]
        start = head_length(messages)
        for keep in (1, 2, 3, 5):
            cut = split_point(messages, start, keep)
            if cut is None:
                continue
            older, recent = messages[start:cut], messages[cut:]
            assert cut > start and recent[0].role != "tool"
            assert calls_answered_within(older) and calls_answered_within(recent)
            assert sum(m.role == "assistant" for m in recent) >= keep


def test_what_is_sent_is_the_head_the_summary_and_the_messages_after_it():
    messages = conversation(6)
    cut = split_point(messages, 2, keep_turns=2)
    sent = outgoing(messages, Summary("They read records 0 to 3.", cut, cut - 2))
    assert [m.content for m in sent[:2]] == ["sys", "task"]
    assert sent[2].role == "user" and sent[2].injected
    assert sent[2].content.endswith("They read records 0 to 3.")
    assert f"({cut - 2} messages)" in sent[2].content
    assert sent[3:] == messages[cut:]
    assert outgoing(messages, None) is messages


def test_the_summary_prompt_is_bounded_whatever_the_transcript_holds():
    huge = [Message("tool", "x" * 200_000, tool_call_id=f"c{i}") for i in range(500)]
    huge.insert(0, Message("assistant", "y", [ToolCall(f"c{i}", "t", {"blob": "z" * 50_000})
                                              for i in range(500)]))
    prompt = summary_prompt("an earlier summary " * 1000, huge, budget=16_000)
    body = prompt[1].content
    assert prompt[0].role == "system" and "summar" in prompt[0].content
    assert len(body) < 16_000 + 6_000 + 1_000  # the transcript, the earlier summary, the frame
    assert "older messages are left out here for length" in body
    assert "an earlier summary" in body


def test_the_summary_prompt_names_each_call_and_which_result_answers_it():
    messages = conversation(2)
    body = summary_prompt(None, messages[2:], budget=16_000)[1].content
    assert "calls demo.get_record [call_0_0]" in body and "tool result for call_0_0" in body
    assert body.index("turn 0") < body.index("turn 1")  # oldest first


# --- settings ----------------------------------------------------------------------------------

def test_windows_are_one_number_or_per_alias_with_a_default():
    assert parse_context_windows("8192") == {"": 8192}
    assert parse_context_windows("default=128000, cheap=16384") == {
        "default": 128000, "cheap": 16384, "": 8192}
    limits = ContextLimits(parse_context_windows("32000,summary=4000"), fraction=0.5)
    assert (limits.window("default"), limits.window("summary")) == (32000, 4000)
    assert limits.compact_at("default") == 16000 and limits.prompt_chars() == 8000
    assert ContextLimits(fixed=900).compact_at("default") == 900


@pytest.mark.parametrize("spec, says", [
    ("lots", "is not N or alias=N"), ("default=100", "at least 256"),
    ("=4096", "no valid alias"), ("a b=4096", "no valid alias"),
    ("default=4096,default=8192", "gives the alias 'default' twice"),
    ("4096,8192", "gives the default window twice"), ("default=-5", "is not N")])
def test_a_bad_window_setting_is_one_clear_sentence(spec, says):
    with pytest.raises(ValueError, match=says):
        parse_context_windows(spec)
    with pytest.raises(ValidationError, match="TICKWORK_MODEL_CONTEXT_TOKENS"):
        WorkerSettings(model_context_tokens=spec)


def test_the_threshold_settings_are_validated(monkeypatch):
    for bad in ("0", "1.5", "-0.1"):
        monkeypatch.setenv("TICKWORK_CONTEXT_COMPACT_FRACTION", bad)
        with pytest.raises(ValidationError, match="above 0 and at most 1"):
            WorkerSettings()
    monkeypatch.delenv("TICKWORK_CONTEXT_COMPACT_FRACTION")
    monkeypatch.setenv("TICKWORK_CONTEXT_COMPACT_TOKENS", "-1")
    with pytest.raises(ValidationError, match="TICKWORK_CONTEXT_COMPACT_TOKENS"):
        WorkerSettings()
    monkeypatch.setenv("TICKWORK_CONTEXT_COMPACT_TOKENS", "5000")
    monkeypatch.setenv("TICKWORK_MODEL_CONTEXT_TOKENS", "default=128000")
    limits = WorkerSettings().context_limits()
    assert limits.compact_at("default") == 5000 and limits.window("default") == 128000


# --- the run's state ---------------------------------------------------------------------------

def test_a_summary_survives_the_saved_state_redacted_and_old_states_still_read():
    state = RunState.start("sys", {"prompt": "task"}, units=3)
    state.messages += conversation(4)[2:]
    state.summary = Summary("They read records; key sk-abcdefghijklmnopqrstuvwxyz123456.", 6, 4)
    state.last_input_tokens, state.compaction_failures = 5123, 1
    saved = json.loads(json.dumps(state.to_state()))
    back = RunState.from_state(saved)
    assert (back.summary.upto, back.summary.messages) == (6, 4)
    assert back.summary.text.startswith("They read records") and "sk-abc" not in back.summary.text
    assert (back.last_input_tokens, back.compaction_failures) == (5123, 1)
    for key in ("summary", "last_input_tokens", "compaction_failures"):
        del saved[key]  # a state saved before compaction existed
    old = RunState.from_state(saved)
    assert (old.summary, old.last_input_tokens, old.compaction_failures) == (None, None, 0)


def test_the_scripted_summary_is_the_scripts_or_a_fixed_sentence_and_can_fail():
    said = [Message("user", "abc")]
    assert summary_reply(None, said).text.startswith("Scripted summary")
    assert summary_reply("They did X.", said).text == "They did X."
    reply = summary_reply({"text": "S", "usage": {"input_tokens": 7, "output_tokens": 2}}, said)
    assert (reply.text, reply.usage) == ("S", Usage(7, 2))
    with pytest.raises(ScriptedFailure, match="down"):
        summary_reply({"fail": "the summariser is down"}, said)
    with pytest.raises(ContextTooLong):
        summary_reply({"fail": "context_too_long"}, said)
    with pytest.raises(ScriptError):
        summary_reply({"txt": "S"}, said)


# --- the model turn ----------------------------------------------------------------------------

class Provider:
    """Answers the agent with a tool-free text and the given usage; the summary alias with
    ``summary`` (or raises it when it is an exception). Remembers what it was sent."""

    def __init__(self, *, summary: object = "SUMMARY", usage: int = 100,
                 refuse_over: int | None = None) -> None:
        self.summary, self.usage, self.refuse_over = summary, usage, refuse_over
        self.sent: list[tuple[str, list[Message]]] = []

    async def complete(self, alias, messages, tools, run, *, on_text=None):
        self.sent.append((alias, list(messages)))
        if alias == "summary":
            if isinstance(self.summary, Exception):
                raise self.summary
            return Reply(text=str(self.summary), usage=Usage(40, 8))
        if self.refuse_over is not None and len(messages) > self.refuse_over:
            raise ContextTooLong("maximum context length exceeded")
        return Reply(text="ok", usage=Usage(self.usage, 5))


class Tools:
    def schemas(self):
        return []

    def tool_index(self):
        return None


def loop_for(provider, **context) -> Loop:
    journal = RunJournal(None, uuid4(), uuid4(), next_seq=2, linger_seconds=None)
    return Loop(run_input={}, provider=provider, toolbox=Tools(), journal=journal, policy=None,
                gate=None, max_turns=100, cancel_requested=None, keep_turns=2,
                context=ContextLimits(**context))


def events(loop: Loop, kind: str) -> list[dict]:
    return [json.loads(e.payload_json) for e in loop.journal._pending if e.type == kind]


def long_state(turns: int = 8) -> RunState:
    state = RunState.start("sys", {"prompt": "task"}, units=3)
    state.messages += conversation(turns)[2:]
    return state


async def test_a_call_past_the_threshold_is_followed_by_one_compaction_and_its_reuse():
    provider, state = Provider(), long_state()
    loop = loop_for(provider, fixed=1000)
    state.last_input_tokens = 999
    await call_model(state, loop, 1)
    assert [a for a, _ in provider.sent] == ["default"] and state.summary is None
    state.last_input_tokens = 1000
    await call_model(state, loop, 2)
    assert [a for a, _ in provider.sent] == ["default", "summary", "default"]
    sent = provider.sent[-1][1]
    assert [m.content for m in sent[:2]] == ["sys", "task"] and sent[2].content.endswith("SUMMARY")
    assert [m.content for m in sent[3:] if m.role == "assistant"] == ["turn 6", "turn 7"]
    assert calls_answered_within(sent)
    done = events(loop, "context_compacted")
    assert len(done) == 1 and done[0]["ok"] and done[0]["messages_summarised"] == 12
    assert done[0]["freed_tokens_estimate"] > 0 and done[0]["reported_input_tokens"] == 1000
    state.messages.append(Message("assistant", "more"))
    await call_model(state, loop, 3)  # the last call reported 100: the summary is reused
    assert [a for a, _ in provider.sent][3:] == ["default"]
    assert provider.sent[-1][1][2].content.endswith("SUMMARY")
    usage = events(loop, "model_usage")
    assert [u["alias"] for u in usage] == ["default", "summary", "default", "default"]
    assert state.usage() == {"input_tokens": 340, "output_tokens": 23, "model_calls": 4}


async def test_a_second_compaction_folds_the_first_summary_in():
    provider, state = Provider(summary="FIRST"), long_state()
    loop = loop_for(provider, fixed=1000)
    state.last_input_tokens = 5000
    await call_model(state, loop, 1)
    state.messages += conversation(12)[-12:]  # four more turns
    provider.summary, state.last_input_tokens = "SECOND", 5000
    await call_model(state, loop, 2)
    prompt = [m for a, m in provider.sent if a == "summary"][-1][1].content
    assert prompt.startswith("Earlier summary:\nFIRST")
    assert state.summary.text == "SECOND" and state.summary.messages == 12 + 12
    assert provider.sent[-1][1][2].content.endswith("SECOND")


async def test_a_failing_summariser_leaves_the_masked_history_and_is_given_up_after_two():
    provider, state = Provider(summary=RuntimeError("model down")), long_state()
    loop = loop_for(provider, fixed=10)
    for step in range(1, 5):
        reply = await call_model(state, loop, step)
        assert reply.text == "ok"
    assert [a for a, _ in provider.sent].count("summary") == 2
    failed = events(loop, "context_compacted")
    assert [f["ok"] for f in failed] == [False, False] and "model down" in failed[0]["error"]
    assert state.summary is None and len(provider.sent[-1][1]) == len(state.messages)


async def test_a_context_refusal_forces_one_compaction_then_the_masked_retry():
    provider, state = Provider(refuse_over=12), long_state()
    loop = loop_for(provider)  # far below the threshold: only the refusal compacts
    reply = await call_model(state, loop, 1)
    assert reply.text == "ok"
    assert [a for a, _ in provider.sent] == ["default", "summary", "default"]
    assert [e["reason"] for e in events(loop, "context_compacted")] == ["context_too_long"]
    assert len(events(loop, "context_masked")) == 1 and state.context_tight
    retried = provider.sent[-1][1]
    assert retried[2].content.endswith("SUMMARY") and calls_answered_within(retried)


async def test_a_refusal_whose_summariser_fails_still_gets_the_masked_retry_then_fails():
    provider = Provider(refuse_over=12, summary=ContextTooLong("the summary is too long"))
    state = long_state()
    loop = loop_for(provider)
    with pytest.raises(ContextExhausted, match="even with every tool result"):
        await call_model(state, loop, 1)
    assert [a for a, _ in provider.sent] == ["default", "summary", "default"]
    assert [e["ok"] for e in events(loop, "context_compacted")] == [False]
    assert len(events(loop, "context_masked")) == 1
