"""The harness names every tool call itself; the model's id is kept only as provider_id."""

import re

from tickwork.worker.calls import harness_named
from tickwork.worker.model import Message, ToolCall


def test_calls_are_named_from_the_step_and_their_index_whatever_ids_the_model_gave():
    given = [ToolCall("call_0", "demo.send_message", {"text": "a"}),
             ToolCall("call_0", "demo.send_message", {"text": "b"}),
             ToolCall("a/b?c#d", "demo.get_record", {"id": 1}),
             ToolCall("x" * 300, "demo.get_record", {"id": 2}),
             ToolCall("", "demo.get_record", {"id": 3})]
    named = harness_named(given, 17)
    assert [c.id for c in named] == ["call_17_0", "call_17_1", "call_17_2", "call_17_3",
                                     "call_17_4"]
    assert [c.arguments for c in named] == [c.arguments for c in given]
    assert [c.provider_id for c in named[:3]] == ["call_0", "call_0", "a/b?c#d"]
    assert named[3].provider_id == "x" * 200  # kept for logs, and kept short
    assert named[4].provider_id is None  # missing stays missing
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", c.id) for c in named)


def test_names_from_different_steps_never_collide():
    first = harness_named([ToolCall("call_0", "t", {})], 2)
    again = harness_named([ToolCall("call_0", "t", {})], 9)
    assert first[0].id != again[0].id


def test_the_provider_id_survives_the_saved_state_and_never_reaches_the_model():
    call = harness_named([ToolCall("model/id", "demo.get_record", {"id": 1})], 3)[0]
    message = Message("assistant", "", [call])
    restored = Message.from_state(message.to_state())
    assert restored.tool_calls[0].provider_id == "model/id"
    assert restored.tool_calls[0].id == "call_3_0"
    assert "model/id" not in str(restored.to_openai())
