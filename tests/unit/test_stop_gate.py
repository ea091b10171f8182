"""The stop gate: the plan decides first, then the judge's verdict; stalls spend units that
are never refunded; the router ranks a hard stop over a user's stop. Pure: no database."""

import pytest

from tickwork.worker import stop_gate
from tickwork.worker.model import Message, ToolCall
from tickwork.worker.stop_gate import (EMPTY_REPLY, VERDICTS, WRAP_UP, GateDecision, GateSettings,
                              decide_empty, decide_with_verdict, decide_without_judge,
                              judge_messages, open_steps, parse_verdict, route)
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.walls import Meter, WallSettings, check_call, record_call

UNITS = GateSettings().continuation_units
PLAN = {"steps": [{"title": "Fetch records", "status": "completed"},
                  {"title": "Summarize invoices", "status": "in_progress"},
                  {"title": "Send report", "status": "pending"}]}


# --- the judge's verdict -------------------------------------------------------------------

def test_done_ends_the_run_as_done_without_spending_a_unit():
    decision = decide_with_verdict("done", "the summary covers all 40 records", UNITS)
    assert decision == GateDecision("done", True, "done",
                                    "The judge said done: the summary covers all 40 records",
                                    None, False)


def test_question_ends_the_run_as_question_because_asking_is_never_a_stall():
    decision = decide_with_verdict("question", "asks which account to bill", 1)
    assert (decision.verdict, decision.stop, decision.outcome) == ("question", True, "question")
    assert decision.inject is None and not decision.spends_unit


def test_stalled_injects_a_continuation_with_the_judges_reason_and_spends_a_unit():
    decision = decide_with_verdict("stalled", "record 3 was never fetched.", UNITS)
    assert (decision.verdict, decision.stop, decision.outcome) == ("stalled", False, None)
    assert decision.spends_unit
    assert decision.inject == ("You stopped before the task was finished: record 3 was never "
                               "fetched. Continue: do the missing work with your tools, then "
                               "answer.")
    assert "record 3 was never fetched" in decision.reason


def test_stalled_without_a_reason_still_continues():
    decision = decide_with_verdict("stalled", "", 5)
    assert decision.inject.startswith("You stopped before the task was finished. Continue:")


def test_an_unparseable_verdict_counts_as_stalled():
    verdict, reason = parse_verdict("I think the agent did fine overall")
    assert verdict == "stalled"
    assert reason.startswith("the judge's verdict could not be read: ")
    decision = decide_with_verdict(verdict, reason, UNITS)
    assert not decision.stop and decision.spends_unit
    # The judge's confusion is journaled, not shown to the agent as if it named missing work.
    assert "could not be read" in decision.reason and "could not be read" not in decision.inject
    assert parse_verdict("")[0] == "stalled" and "(empty)" in parse_verdict("  ")[1]


def test_a_verdict_outside_the_three_never_ends_the_run_as_done():
    decision = decide_with_verdict("finished", "", UNITS)
    assert not decision.stop and decision.spends_unit


@pytest.mark.parametrize("text,expected", [
    ("done", ("done", "")),
    ("Done.", ("done", "")),
    ("DONE: all records summarized", ("done", "all records summarized")),
    ("question - asks for the account id", ("question", "asks for the account id")),
    ("stalled: record 3 was never fetched", ("stalled", "record 3 was never fetched")),
    ("**Stalled**: skipped the send step", ("stalled", "skipped the send step")),
    ("_done_ - answered", ("done", "answered")),
    ("  stalled\nnarrated an update it never made",
     ("stalled", "narrated an update it never made")),
])
def test_the_first_word_of_the_judges_reply_decides_and_the_rest_is_the_reason(text, expected):
    assert parse_verdict(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("**Done!**", ("done", "")),
    ("verdict: question", ("question", "")),
    ("**Verdict:** stalled - record 2 is missing", ("stalled", "record 2 is missing")),
    ("Verdict = done\nthe answer lists all three", ("done", "the answer lists all three")),
    ('{"verdict": "Stalled", "reason": "no send"}', ("stalled", "no send")),
    ('```json\n{"verdict": "done"}\n```', ("done", "")),
    ("done \u2014 answered with the figures", ("done", "answered with the figures")),
])
def test_a_verdict_is_read_from_a_clear_label_json_or_a_verdict_line(text, expected):
    assert parse_verdict(text) == expected


@pytest.mark.parametrize("text", [
    "Done with reviewing the transcript, I think the agent mostly answered.",
    "done. The agent answered but maybe not everything",
    "Done-ish",
    "The agent is done.",
    "verdict: done with most of it",
    '{"verdict": "finished"}',
    '{"verdict": "done"',
    "questionable: the agent asked nothing",
])
def test_rambling_or_malformed_text_is_unreadable_and_counts_as_stalled(text):
    verdict, reason = parse_verdict(text)
    assert verdict == "stalled" and reason.startswith("the judge's verdict could not be read")


def test_an_empty_reply_is_stalled_without_a_judge_and_spends_a_unit():
    decision = decide_empty(UNITS)
    assert (decision.verdict, decision.stop, decision.spends_unit) == ("stalled", False, True)
    assert decision.reason == EMPTY_REPLY and "empty" in decision.inject
    assert decide_empty(1).inject == WRAP_UP
    last = decide_empty(0)
    assert (last.verdict, last.stop, last.outcome) == ("stalled_out", True, "stalled_out")


def test_units_exhausted_ends_a_stalled_run_as_stalled_out():
    decision = decide_with_verdict("stalled", "record 3 was never fetched", 0)
    assert (decision.verdict, decision.stop, decision.outcome) == \
        ("stalled_out", True, "stalled_out")
    assert decision.inject is None and not decision.spends_unit
    assert "no continuation units are left" in decision.reason


def test_the_last_unit_injects_the_wrap_up_instead_of_the_continuation():
    decision = decide_with_verdict("stalled", "record 3 was never fetched", 1)
    assert decision.inject == WRAP_UP == ("This is your last chance to continue: wrap up with "
                                          "what you have and give your best final answer now.")
    assert decision.spends_unit and not decision.stop


# --- the plan decides first ----------------------------------------------------------------

def test_a_plan_with_an_open_step_rejects_the_stop_and_injects_that_exact_step():
    decision = decide_without_judge(PLAN, UNITS)
    assert (decision.verdict, decision.stop, decision.outcome) == ("plan_open", False, None)
    assert decision.inject == ("Your plan is not finished. Next step: 'Summarize invoices' "
                               "(in_progress). Do it now, then mark it completed with "
                               "update_plan.")
    assert decision.spends_unit
    assert open_steps(PLAN) == PLAN["steps"][1:]


def test_a_plan_with_an_open_step_on_the_last_unit_injects_the_wrap_up():
    assert decide_without_judge(PLAN, 1).inject == WRAP_UP


def test_a_completed_plan_ends_the_run_as_done_without_the_judge():
    plan = {"steps": [{"title": s["title"], "status": "completed"} for s in PLAN["steps"]]}
    decision = decide_without_judge(plan, UNITS)
    assert (decision.verdict, decision.stop, decision.outcome) == ("plan_complete", True, "done")
    assert not decision.spends_unit and open_steps(plan) == []


@pytest.mark.parametrize("plan", [{}, {"steps": []}, None, {"other": 1}])
def test_without_plan_steps_the_caller_asks_the_judge(plan):
    assert decide_without_judge(plan, UNITS) is None


def test_a_model_that_never_updates_its_plan_still_ends_after_exactly_20_rejections():
    units_left, injections = UNITS, []
    while True:
        decision = decide_without_judge(PLAN, units_left)
        if decision.stop:
            break
        injections.append(decision.inject)
        units_left -= decision.spends_unit
    assert len(injections) == 20
    assert injections[:19] == [decide_without_judge(PLAN, UNITS).inject] * 19
    assert injections[19] == WRAP_UP
    assert (decision.verdict, decision.outcome) == ("stalled_out", "stalled_out")


# --- units are never refunded --------------------------------------------------------------

def test_hollow_tool_calls_between_stalls_never_refund_a_unit():
    """A fetch that always returns partial data: the agent calls it, stops, is judged
    stalled, calls it again … Tool calls in between change nothing about the units."""
    fetch = ToolSpec("crm.get_contact", "read", False, "", {})
    meter, settings = Meter(), WallSettings(per_tool=1000, aggregate=1000, hard_cap=0)
    units_left, continuations, turn = UNITS, 0, 0
    while True:
        turn += 1
        call = ToolCall(f"c{turn}", fetch.key, {"id": 3, "attempt": turn})  # a tool-call turn
        record_call(call, fetch, meter, check_call(call, fetch, meter, settings))
        decision = decide_with_verdict(*parse_verdict("stalled: record 3 is partial"),
                                       units_left)  # then a stop
        if decision.stop:
            break
        continuations += 1
        units_left -= decision.spends_unit
    assert continuations == 20 and decision.outcome == "stalled_out"
    assert meter.external_attempts == 21
    assert not [name for name in dir(stop_gate) if "refund" in name.lower()]


# --- the judge's prompt --------------------------------------------------------------------

def test_the_judges_prompt_explains_the_three_verdicts_and_renders_the_window():
    window = [Message("user", "Summarize invoices 1-3."),
              Message("assistant", "", [ToolCall("c1", "crm.get_invoice", {"id": 1})]),
              Message("tool", "x" * 2000, tool_call_id="c1"),
              Message("user", "Your plan is not finished.", injected=True),
              Message("assistant", "I've fetched all three invoices and summarized them.")]
    system, user = judge_messages(window)
    assert (system.role, user.role) == ("system", "user")
    for word in VERDICTS:
        assert word in system.content
    assert "ONE word" in system.content and "narrated an action" in system.content
    assert "user: Summarize invoices 1-3." in user.content
    assert 'calls crm.get_invoice({"id": 1})' in user.content
    assert "tool: " + "x" * 500 + "… [truncated, 2000 characters in all]" in user.content
    assert "x" * 501 not in user.content
    assert "user (harness): Your plan is not finished." in user.content
    assert user.content.index("I've fetched all three") > user.content.index("tool: ")


def test_the_gate_settings_default_to_20_units_and_an_8_message_window():
    assert GateSettings() == GateSettings(continuation_units=20, judge_window=8)


# --- the router ----------------------------------------------------------------------------

@pytest.mark.parametrize("hard_stop,cancel,expected", [
    (True, True, "hard_stop"),
    (True, False, "hard_stop"),
    (False, True, "cancelled"),
    (False, False, "continue"),
])
def test_the_router_ranks_a_hard_stop_over_a_users_stop_over_continuing(hard_stop, cancel,
                                                                         expected):
    assert route(hard_stop=hard_stop, cancel_requested=cancel) == expected


def test_a_judge_quoting_secrets_gives_a_reason_and_a_continuation_without_them():
    stripe, github = "sk" + "_live_" + "aB3dE5fG7hJ9kL1mN2pQ4rS6", "gh" + "p_" + "x7Y" * 12
    for verdict in ("done", "question", "stalled"):
        decision = decide_with_verdict(verdict, f"used {stripe} and {github}", units_left=5)
        shown = decision.reason + (decision.inject or "")
        assert stripe not in shown and github not in shown, verdict
        assert "[REDACTED:stripe]" in decision.reason and "[REDACTED:github]" in decision.reason
    unreadable, reason = parse_verdict(f"Hmm, I saw {'x' * 170} {stripe} in the reply")
    assert unreadable == "stalled" and stripe[:12] not in reason  # not cut into a shapeless piece
