"""What is sent to the model: tool results older than the last few turns are masked."""

import json

from tickwork.worker.context import mask_stub, masked_count, masked_for_model
from tickwork.worker.model import Message, ToolCall

BIG = json.dumps({"records": [{"id": i, "title": f"Record {i}"} for i in range(40)]})
REF = "f_" + "0123456789abcdef" * 2


def history(turns: int) -> list[Message]:
    messages = [Message("system", "sys"), Message("user", "task")]
    for turn in range(turns):
        call = ToolCall(f"call_{turn}_0", "demo.list_records", {"offset": turn})
        messages.append(Message("assistant", "", [call]))
        messages.append(Message("tool", BIG + f" turn {turn}", tool_call_id=call.id))
    return messages


def results(messages):
    return [m.content for m in messages if m.role == "tool"]


def test_results_of_the_last_few_turns_are_sent_whole_and_older_ones_as_stubs():
    messages = history(6)
    sent = masked_for_model(messages, 3)
    whole = [c for c in results(sent) if c.startswith(BIG)]
    stubs = [json.loads(c) for c in results(sent) if not c.startswith(BIG)]
    assert [c[-6:] for c in whole] == ["turn 3", "turn 4", "turn 5"]
    assert len(stubs) == 3 and all(s["masked"] and s["tool"] == "demo.list_records" for s in stubs)
    assert masked_count(sent, messages) == 3
    assert len(sent) == len(messages)  # every call is still answered exactly once
    assert [m.tool_call_id for m in sent] == [m.tool_call_id for m in messages]


def test_masking_never_changes_the_saved_messages():
    messages = history(5)
    before = [m.to_state() for m in messages]
    masked_for_model(messages, 1)
    assert [m.to_state() for m in messages] == before


def test_the_newest_turns_results_are_always_sent_even_with_keep_zero():
    sent = masked_for_model(history(4), 0)
    assert results(sent)[-1].endswith("turn 3")
    assert sum(c.startswith(BIG) for c in results(sent)) == 1


def test_a_stub_names_the_tool_and_keeps_the_file_reference():
    offloaded = json.dumps({"offloaded": True, "file_ref": REF, "chars": 90000,
                            "preview": "x" * 800, "hint": "use read_file"})
    stub = json.loads(mask_stub("demo.list_records", offloaded))
    assert stub["tool"] == "demo.list_records" and stub["file_ref"] == REF
    assert "read_file" in stub["note"]


def test_a_short_result_is_not_replaced_by_a_longer_stub():
    messages = history(0)
    call = ToolCall("call_1_0", "demo.get_record", {"id": 1})
    messages += [Message("assistant", "", [call]),
                 Message("tool", '{"id":1}', tool_call_id=call.id)]
    for turn in range(3):
        later = ToolCall(f"call_{turn + 2}_0", "demo.get_record", {"id": 2})
        messages += [Message("assistant", "", [later]),
                     Message("tool", '{"id":2}', tool_call_id=later.id)]
    assert masked_for_model(messages, 1) == messages
