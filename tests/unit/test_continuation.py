"""How a retry rebuilds its conversation from earlier attempts' journals (worker/continuation.py),
on journals written by hand: which turns count, what each call's result reads as, and what is
left to run."""

from __future__ import annotations

import asyncio
import json

from tickwork.worker.continuation import (INTERRUPTED, READ_NOT_KEPT, Replay, _continued,
                                          call_prefix)
from tickwork.worker.state import RunState
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.walls import WallSettings

SPECS = {name: ToolSpec(key=name, tool_class=cls, is_local=False, description="", parameters={})
         for name, cls in (("demo.get_record", "read"), ("demo.send_message", "send"))}


def event(seq, type, payload, parent=None):
    return {"seq": seq, "type": type, "payload": payload, "parent_seq": parent}


def rebuilt(*attempts, stored=None) -> RunState:
    replay = Replay()
    for events in attempts:
        replay.read_attempt(events)
    start = RunState.start("Be brief.", {"prompt": "Do it."}, units=20)
    return asyncio.run(_continued(start, replay, stored or {}, SPECS.get, WallSettings()))


def tool_turn(step, *calls, completed=(), text=""):
    """A turn at ``step`` whose calls (id, tool, arguments) started; ``completed`` finished."""
    events = [event(step, "step_start", {"turn": 1})]
    if text:
        events.append(event(step + 1, "content_delta", {"text": text}, step))
    seq = step + 2
    for call_id, tool, arguments in calls:
        events.append(event(seq, "tool_start", {"tool": tool, "call_id": call_id,
                                                "arguments": arguments}, step))
        if call_id in completed:
            events.append(event(seq + 1, "tool_complete", {"call_id": call_id, "ok": True}, seq))
        seq += 2
    return events


def test_a_send_stored_by_the_first_attempt_is_its_result_and_nothing_is_left_to_run():
    events = tool_turn(2, ("call_2_0", "demo.send_message", {"text": "hi"}),
                       completed={"call_2_0"})
    state = rebuilt(events, stored={"call_2_0": ('{"delivered":true}', True)})
    assert [m.role for m in state.messages] == ["system", "user", "assistant", "tool"]
    assert state.messages[-1].content == '{"delivered":true}'
    assert state.pending is None and state.model_turns == 1


def test_calls_of_the_last_turn_without_a_known_result_are_left_to_run_in_order():
    events = tool_turn(2, ("call_2_0", "demo.get_record", {"id": 1}),
                       ("call_2_1", "demo.send_message", {"text": "hi"}),
                       completed={"call_2_0"})
    state = rebuilt(events)
    assert [c.id for c in state.pending.calls] == ["call_2_0", "call_2_1"]


def test_an_older_turn_s_read_reads_as_not_kept_and_a_refusal_as_its_refusal():
    first = tool_turn(2, ("call_2_0", "demo.get_record", {"id": 1}), completed={"call_2_0"})
    first.append(event(20, "budget_refusal", {"tool": "demo.get_record", "call_id": "call_2_1",
                                              "message": "did NOT execute"}, 2))
    second = tool_turn(30, ("call_30_0", "demo.send_message", {"text": "x"}),
                       completed={"call_30_0"})
    state = rebuilt(first + second, stored={"call_30_0": ("sent", True)})
    tools = [m.content for m in state.messages if m.role == "tool"]
    assert tools == [READ_NOT_KEPT, "did NOT execute", "sent"]
    assert state.model_turns == 2 and state.meter.deliveries == 1


def test_a_call_whose_journaled_arguments_were_redacted_is_not_made_again_with_them():
    events = tool_turn(2, ("call_2_0", "demo.send_message", {"text": "[REDACTED:api_key]"}))
    state = rebuilt(events)
    assert state.pending is None
    error = json.loads(state.messages[-1].content)["error"]
    assert error == INTERRUPTED.format(tool="demo.send_message")


def test_a_turn_cut_off_before_its_answer_was_judged_is_asked_again():
    events = [event(2, "step_start", {"turn": 1}),
              event(3, "content_delta", {"text": "Half an ans"}, 2)]
    state = rebuilt(events)
    assert [m.role for m in state.messages] == ["system", "user"] and state.model_turns == 0


def test_usage_units_and_later_attempts_add_up_along_the_chain():
    first = tool_turn(2, ("call_2_0", "demo.get_record", {"id": 1}), completed={"call_2_0"})
    first += [event(9, "model_usage", {"alias": "default", "input_tokens": 10,
                                       "output_tokens": 1}, 2)]
    # The second attempt made the read again under the first one's name, then answered.
    second = [event(2, "step_start", {"turn": 1, "continues": "x", "calls": ["call_2_0"]}),
              event(3, "tool_start", {"tool": "demo.get_record", "call_id": "call_2_0",
                                      "arguments": {"id": 1}}, 2),
              event(4, "tool_complete", {"call_id": "call_2_0", "ok": True}, 3),
              event(5, "step_start", {"turn": 2}),
              event(6, "model_usage", {"alias": "default", "input_tokens": 20,
                                       "output_tokens": 2}, 5),
              event(7, "content_delta", {"text": "Done."}, 5),
              event(8, "model_usage", {"alias": "judge", "input_tokens": 5,
                                       "output_tokens": 1}, 5),
              event(9, "gate_decision", {"verdict": "stalled", "units_left": 19,
                                         "injected": "Go on."}, 5)]
    state = rebuilt(first, second)
    assert state.usage() == {"input_tokens": 35, "output_tokens": 4, "model_calls": 3}
    assert (state.units_left, state.judge_calls, state.model_turns) == (19, 1, 2)
    assert [m.role for m in state.messages][-2:] == ["assistant", "user"]
    assert state.pending is None


def test_a_retry_names_its_calls_with_its_attempt():
    assert (call_prefix(1), call_prefix(3)) == ("call", "call_3")
