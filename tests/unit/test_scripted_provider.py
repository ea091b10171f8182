import json

import pytest

from tickwork.worker.model import Message, Reply, RunView, ToolCall, Usage
from tickwork.worker.providers import ScriptError, ScriptedProvider


class FakeSleep:
    def __init__(self):
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def sleep():
    return FakeSleep()


@pytest.fixture
def provider(sleep):
    return ScriptedProvider(sleep=sleep)


async def turn(provider, script, n=0, messages=(), alias="default"):
    return await provider.complete(alias, list(messages), [], RunView({"script": script}, n))


async def test_a_text_turn_is_a_reply_with_that_text_and_no_calls(provider):
    assert await turn(provider, [{"text": "Hello."}]) == Reply(text="Hello.")


async def test_a_tool_calls_turn_calls_each_tool_with_its_arguments(provider):
    script = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}},
                              {"name": "demo.list_records"}]}]
    reply = await turn(provider, script)
    assert reply == Reply(text="", tool_calls=[ToolCall("call_0_0", "demo.get_record", {"id": 1}),
                                               ToolCall("call_0_1", "demo.list_records", {})])


async def test_a_turn_may_carry_text_alongside_its_tool_calls(provider):
    reply = await turn(provider, [{"text": "Looking.", "tool_calls": [{"name": "demo.get_record",
                                                                      "arguments": {"id": 2}}]}])
    assert reply.text == "Looking."
    assert [c.name for c in reply.tool_calls] == ["demo.get_record"]


async def test_the_position_is_the_runs_model_turn_count(provider):
    script = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    assert [(await turn(provider, script, n)).text for n in range(3)] == ["one", "two", "three"]


async def test_tool_names_are_canonicalized_whichever_spelling_the_script_uses(provider):
    script = [{"tool_calls": [{"name": "demo__get_record", "arguments": {}},
                              {"name": "demo.get_record", "arguments": {}}]},
              {"repeat": {"tool": "demo__list_records", "times": 1}}]
    assert [c.name for c in (await turn(provider, script, 0)).tool_calls] == ["demo.get_record"] * 2
    assert (await turn(provider, script, 1)).tool_calls[0].name == "demo.list_records"


async def test_tool_call_ids_are_deterministic_and_unique_per_turn(provider):
    script = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}}]}]
    first = await turn(provider, script, 0)
    assert first == await turn(provider, script, 0)
    # The last turn repeats past the end, yet its call id is new each turn.
    assert (await turn(provider, script, 7)).tool_calls[0].id == "call_7_0"


async def test_a_repeat_expands_to_one_call_per_turn_varying_the_argument(provider):
    script = [{"repeat": {"tool": "demo.get_record", "times": 500, "vary": "id",
                          "arguments": {"verbose": True}}},
              {"text": "Done."}]
    for n in (0, 1, 249, 499):
        reply = await turn(provider, script, n)
        assert reply.text == ""
        assert [(c.name, c.arguments) for c in reply.tool_calls] == [
            ("demo.get_record", {"verbose": True, "id": n + 1})]
    assert (await turn(provider, script, 500)).text == "Done."


async def test_a_repeat_without_vary_calls_with_the_same_arguments(provider):
    script = [{"repeat": {"tool": "demo.get_record", "times": 3, "arguments": {"id": 9}}}]
    assert (await turn(provider, script, 2)).tool_calls[0].arguments == {"id": 9}


async def test_a_sleep_delays_the_next_turn_and_is_not_a_turn_itself(provider, sleep):
    script = [{"text": "fast"}, {"sleep": 2}, {"sleep": 0.5}, {"text": "slow"}, {"text": "after"}]
    assert (await turn(provider, script, 0)).text == "fast"
    assert sleep.slept == []
    assert (await turn(provider, script, 1)).text == "slow"
    assert sleep.slept == [2.5]  # consecutive sleeps accumulate onto the following turn
    assert (await turn(provider, script, 2)).text == "after"
    assert sleep.slept == [2.5]


async def test_a_sleep_before_a_repeat_delays_only_its_first_turn(provider, sleep):
    script = [{"sleep": 1}, {"repeat": {"tool": "demo.get_record", "times": 3, "vary": "id"}}]
    for n in range(3):
        await turn(provider, script, n)
    assert sleep.slept == [1]


async def test_when_the_script_is_exhausted_the_last_turn_repeats_without_sleeping(provider, sleep):
    script = [{"text": "first"}, {"sleep": 3}, {"tool_calls": [{"name": "demo.get_record",
                                                                "arguments": {"id": 1}}]}]
    replies = [await turn(provider, script, n) for n in range(5)]
    assert [r.tool_calls[0].arguments for r in replies[1:]] == [{"id": 1}] * 4
    assert sleep.slept == [3]


async def test_a_trailing_sleep_delays_the_first_repeat_of_the_last_turn(provider, sleep):
    script = [{"text": "a"}, {"sleep": 4}]
    assert [(await turn(provider, script, n)).text for n in range(3)] == ["a", "a", "a"]
    assert sleep.slept == [4]


async def test_the_last_turn_of_a_repeat_is_what_repeats(provider):
    script = [{"repeat": {"tool": "demo.get_record", "times": 3, "vary": "id"}}]
    assert (await turn(provider, script, 10)).tool_calls[0].arguments == {"id": 3}


@pytest.mark.parametrize("given", [{}, {"script": None}, {"script": []}])
async def test_an_absent_or_empty_script_says_done(provider, given):
    assert await provider.complete("default", [], [], RunView(given)) == Reply(text="Done.")


def offload(ref: str) -> Message:
    return Message("tool", json.dumps({"offloaded": True, "file_ref": ref, "chars": 12345,
                                       "preview": "[...]"}), tool_call_id="call_0_0")


async def test_last_file_ref_is_replaced_by_the_most_recent_offloaded_reference(provider):
    messages = [Message("user", "go"), offload("f_old"), offload("f_new"),
                Message("tool", '{"id": 1, "name": "small result"}', tool_call_id="call_2_0"),
                Message("tool", "not json at all", tool_call_id="call_3_0")]
    script = [{"tool_calls": [{"name": "query_file", "arguments": {
        "file_ref": "$last_file_ref", "sql": "SELECT count(*) FROM result",
        "nested": {"refs": ["$last_file_ref", "keep"], "note": "$last_file_ref!"}}}]}]
    arguments = (await turn(provider, script, 0, messages)).tool_calls[0].arguments
    assert arguments == {"file_ref": "f_new", "sql": "SELECT count(*) FROM result",
                         "nested": {"refs": ["f_new", "keep"], "note": "$last_file_ref!"}}
    # The script itself is not rewritten: a later turn sees the placeholder again.
    assert script[0]["tool_calls"][0]["arguments"]["file_ref"] == "$last_file_ref"


async def test_last_file_ref_stays_as_is_when_nothing_was_offloaded(provider):
    script = [{"tool_calls": [{"name": "query_file", "arguments": {"file_ref": "$last_file_ref"}}]}]
    arguments = (await turn(provider, script, 0, [Message("user", "go")])).tool_calls[0].arguments
    assert arguments == {"file_ref": "$last_file_ref"}


async def judge(provider, verdicts, calls, model_turns=0):
    given = {} if verdicts is None else {"judge": verdicts}
    given["script"] = [{"text": "not for the judge"}]
    return (await provider.complete("judge", [], [], RunView(given, model_turns, calls))).text


async def test_the_judge_gives_its_verdicts_in_order_then_the_last_repeats(provider):
    verdicts = ["stalled", "question", "done"]
    assert [await judge(provider, verdicts, n, model_turns=9) for n in range(5)] == [
        "stalled", "question", "done", "done", "done"]


@pytest.mark.parametrize("verdicts", [None, []])
async def test_an_absent_judge_script_says_done(provider, verdicts):
    assert await judge(provider, verdicts, 0) == "done"


async def test_an_unparseable_verdict_is_returned_verbatim(provider):
    assert await judge(provider, ["¯\\_(ツ)_/¯ maybe?"], 0) == "¯\\_(ツ)_/¯ maybe?"


async def test_the_judge_never_sleeps_or_calls_tools(provider, sleep):
    given = {"script": [{"sleep": 5}, {"tool_calls": [{"name": "demo.get_record"}]}]}
    reply = await provider.complete("judge", [], [], RunView(given))
    assert reply == Reply(text="done") and sleep.slept == []


@pytest.mark.parametrize("script, index", [
    ([{"text": "ok"}, "just a string"], 1),
    ([{"text": "ok"}, {}], 1),
    ([{"text": "ok"}, {"text": "a", "sleep": 1}], 1),
    ([{"say": "hello"}], 0),
    ([{"text": 5}], 0),
    ([{"tool_calls": []}], 0),
    ([{"tool_calls": [{"arguments": {"id": 1}}]}], 0),
    ([{"tool_calls": [{"name": "demo.get_record", "arguments": "id=1"}]}], 0),
    ([{"text": "a"}, {"text": "b"}, {"repeat": {"times": 3}}], 2),
    ([{"repeat": {"tool": "demo.get_record"}}], 0),
    ([{"repeat": {"tool": "demo.get_record", "times": 100_001}}], 0),
    ([{"repeat": {"tool": "demo.get_record", "times": 0}}], 0),
    ([{"repeat": {"tool": "demo.get_record", "times": True}}], 0),
    ([{"repeat": {"tool": "demo.get_record", "times": 2, "vary": 3}}], 0),
    ([{"repeat": {"tool": "demo.get_record", "times": 2, "extra": 1}}], 0),
    ([{"text": "a"}, {"sleep": -1}], 1),
    ([{"sleep": "5"}], 0),
    ([{"sleep": float("nan")}], 0),
    ([{"tool_calls": [{"name": "demo.get_record", "id": 7}]}], 0),
    ([{"text": "a", "usage": {"input_tokens": 1}}], 0),
    ([{"text": "a", "usage": {"input_tokens": -1, "output_tokens": 2}}], 0),
])
async def test_a_malformed_script_raises_a_script_error_naming_the_bad_turn(provider, sleep,
                                                                         script, index):
    with pytest.raises(ScriptError, match=rf"turn {index}\b"):
        await turn(provider, script, 0)
    assert sleep.slept == []  # validated before any delay


async def test_a_malformed_turn_fails_the_run_on_its_first_turn_not_when_reached(provider):
    with pytest.raises(ScriptError, match="turn 3"):
        await turn(provider, [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"oops": 1}], 0)


async def test_a_script_that_is_not_a_list_raises_a_script_error(provider):
    with pytest.raises(ScriptError, match="must be a list"):
        await turn(provider, {"text": "hi"}, 0)


@pytest.mark.parametrize("verdicts", ["done", ["done", 3]])
async def test_a_malformed_judge_script_raises_a_script_error(provider, verdicts):
    with pytest.raises(ScriptError):
        await judge(provider, verdicts, 0)


async def test_a_script_error_is_a_value_error_with_a_sentence(provider):
    with pytest.raises(ValueError) as refused:
        await turn(provider, [{"sleep": -2}], 0)
    assert str(refused.value).endswith(".")


async def test_a_script_may_give_the_models_own_call_ids_duplicated_odd_or_missing(provider):
    script = [{"tool_calls": [{"name": "demo.send_message", "id": "call_0"},
                              {"name": "demo.send_message", "id": "call_0"},
                              {"name": "demo.get_record", "id": "a/b"},
                              {"name": "demo.get_record", "id": None},
                              {"name": "demo.get_record"}]}]
    reply = await turn(provider, script, 4)
    assert [c.id for c in reply.tool_calls] == ["call_0", "call_0", "a/b", "", "call_4_4"]


async def test_a_turn_may_say_what_it_cost_and_otherwise_reports_no_usage(provider):
    script = [{"text": "a", "usage": {"input_tokens": 120, "output_tokens": 7}}, {"text": "b"}]
    assert (await turn(provider, script, 0)).usage == Usage(120, 7)
    assert (await turn(provider, script, 1)).usage is None


async def test_a_runs_script_is_parsed_once_and_runs_with_equal_scripts_keep_their_own(
        provider, monkeypatch):
    from tickwork.worker.providers import scripted

    parsed = []
    real = scripted.parse_script
    monkeypatch.setattr(scripted, "parse_script", lambda raw: parsed.append(raw) or real(raw))
    first = {"script": [{"text": "one"}, {"text": "two"}]}
    second = {"script": [{"text": "one"}, {"text": "two"}]}  # equal, not the same object
    second["script"][1]["text"] = "other"
    texts = []
    for turn in range(3):
        for given in (first, second):
            reply = await provider.complete("default", [], [], RunView(given, model_turns=turn))
            texts.append(reply.text)
    assert texts == ["one", "one", "two", "other", "two", "other"]
    assert parsed == [first["script"], second["script"]]  # once per run, not once per turn
