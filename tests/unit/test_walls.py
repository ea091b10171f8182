"""The four walls, the hard cap and the turn warning: each wall against the loop shape it
exists for, and against the shapes the other walls cannot see. Pure: no database."""

import json

import pytest

from tickwork.worker.model import ToolCall
from tickwork.worker.sql_shape import sql_shape
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.walls import (Allow, Meter, Refuse, WallSettings, call_identity, check_call,
                          hard_cap_reached, hard_stop_message, record_call, token_stop_message,
                          turn_warning)

CRM = ToolSpec("crm.get_contact", "read", False, "", {})
MAIL = ToolSpec("mail.send", "send", False, "", {})
QUERY = ToolSpec("query_file", "read", True, "", {})
PLAN = ToolSpec("update_plan", "write", True, "", {})
DEFAULTS = WallSettings()
EIGHT = [ToolSpec(f"vendor{i}.list_items", "read", False, "", {}) for i in range(8)]


def attempt(spec, arguments, meter, settings=DEFAULTS):
    """Check a call, record the decision, return it: what the agent loop does per call."""
    call = ToolCall(f"c{meter.external_attempts}", spec.key, arguments)
    decision = check_call(call, spec, meter, settings)
    record_call(call, spec, meter, decision)
    return decision


def query(sql, meter, file_ref="f_1", settings=DEFAULTS):
    return attempt(QUERY, {"file_ref": file_ref, "sql": sql}, meter, settings)


# --- per tool name -------------------------------------------------------------------------

def test_one_tool_enumerating_fifty_records_runs_exactly_forty_then_the_per_tool_wall_refuses():
    meter = Meter()
    decisions = [attempt(CRM, {"id": i}, meter) for i in range(1, 51)]
    assert [type(d) for d in decisions] == [Allow] * 40 + [Refuse] * 10
    assert {d.wall for d in decisions[40:]} == {"per_tool"}
    assert meter.per_tool == {"crm.get_contact": 40}
    # No call ever repeated itself: a de-duplicator would have let all fifty through.
    assert len({call_identity(CRM.key, {"id": i}) for i in range(1, 51)}) == 50


def test_the_per_tool_wall_stops_the_enumeration_even_where_the_aggregate_never_would():
    meter = Meter()
    settings = WallSettings(aggregate=1000)
    decisions = [attempt(CRM, {"id": i}, meter, settings) for i in range(1, 51)]
    assert sum(isinstance(d, Allow) for d in decisions) == 40
    assert {d.wall for d in decisions if isinstance(d, Refuse)} == {"per_tool"}
    assert meter.refused_identities == []  # the aggregate refused nothing


def test_both_spellings_of_a_tool_name_share_one_per_tool_count():
    meter = Meter()
    for i in range(20):
        attempt(CRM, {"id": i}, meter)
        record_call(ToolCall("x", "crm__get_contact", {"id": -i}), CRM, meter, Allow())
    assert meter.per_tool == {"crm.get_contact": 40}
    assert attempt(CRM, {"id": 99}, meter).wall == "per_tool"


def test_a_per_tool_limit_of_zero_refuses_every_call_to_an_external_tool():
    assert attempt(CRM, {"id": 1}, Meter(), WallSettings(per_tool=0)).wall == "per_tool"


# --- aggregate (soft) ----------------------------------------------------------------------

def eight_tools_thirty_nine_calls_each(meter):
    return [attempt(spec, {"page": n}, meter) for n in range(39) for spec in EIGHT]


def test_eight_tools_under_their_own_caps_are_stopped_by_the_aggregate_from_the_41st_call():
    meter = Meter()
    decisions = eight_tools_thirty_nine_calls_each(meter)
    assert len(decisions) == 312
    assert [type(d) for d in decisions] == [Allow] * 40 + [Refuse] * 272
    assert {d.wall for d in decisions[40:]} == {"aggregate"}  # per_tool never fires
    assert max(meter.per_tool.values()) <= 39
    assert meter.aggregate == 40
    assert len(meter.refused_identities) == 272  # each new identity refused once


def test_a_refused_identity_repeated_unchanged_goes_through_as_the_confirmed_retry():
    meter = Meter()
    eight_tools_thirty_nine_calls_each(meter)
    refused = attempt(EIGHT[0], {"page": 99}, meter)
    assert isinstance(refused, Refuse) and refused.wall == "aggregate"
    assert attempt(EIGHT[0], {"page": 99}, meter) == Allow()
    assert meter.aggregate == 41
    # Key order is not a new identity.
    attempt(CRM, {"id": 7, "fields": "name"}, meter)
    assert attempt(CRM, {"fields": "name", "id": 7}, meter) == Allow()


def test_a_runaway_with_ever_new_identities_stays_refused_forever():
    meter = Meter()
    eight_tools_thirty_nine_calls_each(meter)
    decisions = [attempt(EIGHT[i % 8], {"page": 1000 + i}, meter) for i in range(500)]
    assert all(isinstance(d, Refuse) and d.wall == "aggregate" for d in decisions)
    assert meter.aggregate == 40


def test_below_the_aggregate_cap_identical_calls_all_pass():
    meter = Meter()
    assert all(attempt(CRM, {"id": 1}, meter) == Allow() for _ in range(40))


# --- delivery reserve ----------------------------------------------------------------------

def test_a_read_heavy_run_still_delivers_five_sends_then_the_sixth_is_refused():
    meter = Meter()
    reads = [attempt(EIGHT[i % 8], {"page": i}, meter) for i in range(40)]
    assert all(d == Allow() for d in reads) and meter.aggregate == 40
    assert attempt(CRM, {"id": 1}, meter).wall == "aggregate"  # the aggregate is full
    sends = [attempt(MAIL, {"to": "ops@example.com", "body": f"v{i}"}, meter) for i in range(6)]
    assert [type(d) for d in sends] == [Allow] * 5 + [Refuse]
    assert sends[5].wall == "delivery"
    assert meter.deliveries == 5 and meter.aggregate == 40  # sends never count toward it


def test_the_delivery_reserve_ignores_arguments_so_rewording_a_send_does_not_get_through():
    meter = Meter()
    for i in range(5):
        attempt(MAIL, {"body": f"draft {i}"}, meter)
    assert attempt(MAIL, {"body": "draft 0"}, meter).wall == "delivery"
    assert attempt(MAIL, {"body": "draft 0"}, meter).wall == "delivery"  # no confirmed retry


def test_the_per_tool_wall_applies_to_send_class_tools_too():
    meter = Meter()
    settings = WallSettings(per_tool=3, delivery=10)
    decisions = [attempt(MAIL, {"n": i}, meter, settings) for i in range(4)]
    assert [type(d) for d in decisions] == [Allow] * 3 + [Refuse]
    assert decisions[3].wall == "per_tool"


# --- query loop ----------------------------------------------------------------------------

def test_rotating_sql_literals_run_ten_times_then_the_query_loop_wall_refuses():
    meter = Meter()
    decisions = [query(f"SELECT * FROM result WHERE id = {i}", meter) for i in range(1, 12)]
    assert [type(d) for d in decisions] == [Allow] * 10 + [Refuse]
    assert decisions[10].wall == "query_loop"
    # A different shape, or the same shape over another file, is still allowed.
    assert query("SELECT category, count(*) FROM result GROUP BY category", meter) == Allow()
    assert query("SELECT * FROM result WHERE id = 1", meter, file_ref="f_2") == Allow()


def test_query_file_is_local_so_the_per_tool_and_aggregate_walls_never_see_it():
    meter = Meter()
    for i in range(60):
        query(f"SELECT * FROM result WHERE title = 'Record {i}' AND n > {i}", meter)
    assert meter.per_tool == {} and meter.aggregate == 0 and meter.external_attempts == 0
    # Every query was distinct text: only the shape key sees the loop.
    assert sum(meter.queries.values()) == 10


def test_other_local_tools_are_never_metered():
    meter = Meter()
    assert all(attempt(PLAN, {"steps": []}, meter, WallSettings(per_tool=0, aggregate=0)) ==
               Allow() for _ in range(200))
    assert meter == Meter()


def test_sql_shape_collapses_rotating_literals_and_normalizes_spacing_and_case():
    assert sql_shape("SELECT * FROM result WHERE ts='A'") == \
        sql_shape("select *  from result where ts = 'B'")
    assert sql_shape("SELECT * FROM result LIMIT 5") == sql_shape("select * from result limit 10")
    assert sql_shape("SELECT * FROM result WHERE id = 1") == \
        sql_shape("SELECT * FROM Result WHERE id = -2.5 /* retry */")


def test_sql_shape_keeps_different_structures_apart():
    shapes = {sql_shape("SELECT * FROM result WHERE id = 1"),
              sql_shape("SELECT * FROM result WHERE title = 1"),
              sql_shape("SELECT id FROM result WHERE id = 1"),
              sql_shape("SELECT * FROM result WHERE id > 1"),
              sql_shape("SELECT category, count(*) FROM result GROUP BY category")}
    assert len(shapes) == 5


@pytest.mark.parametrize("garbage", ["", "((((", "SELEC FROM WHERE 'x", "';--", "\x00\x01",
                                     "(" * 5000, "select * from result where a = 'unterminated"])
def test_sql_shape_never_raises_on_garbage(garbage):
    assert isinstance(sql_shape(garbage), str)


def test_unparseable_sql_still_collapses_its_literals_in_the_fallback():
    assert sql_shape("SELEC  * FRM result WHERE ts = 'A' AND n = 1") == \
        sql_shape("selec * frm result where ts='B' and n=22") == \
        "selec * frm result where ts = ? and n = ?"


# --- hard cap ------------------------------------------------------------------------------

def test_the_hard_cap_counts_refused_attempts_and_is_reached_after_exactly_100():
    meter = Meter()
    settings = WallSettings()
    reached_at = None
    for i in range(1, 151):
        attempt(CRM, {"id": i}, meter, settings)  # refused forever after the 40th
        if hard_cap_reached(meter, settings):
            reached_at = i
            break
    assert reached_at == 100
    assert meter.per_tool == {"crm.get_contact": 40} and meter.external_attempts == 100


def test_a_hard_cap_of_zero_disables_it():
    meter = Meter()
    settings = WallSettings(hard_cap=0)
    for i in range(1000):
        attempt(CRM, {"id": i}, meter, settings)
    assert meter.external_attempts == 1000
    assert not hard_cap_reached(meter, settings)


# --- messages ------------------------------------------------------------------------------

def every_kind_of_refusal():
    meter = Meter()
    refusals = [attempt(CRM, {"id": i}, meter) for i in range(41)][-1:]
    meter = Meter()
    eight_tools_thirty_nine_calls_each(meter)
    refusals.append(attempt(CRM, {"id": 1}, meter))
    refusals += [attempt(MAIL, {"n": i}, meter) for i in range(6)][-1:]
    refusals += [query(f"SELECT * FROM result WHERE id = {i}", meter) for i in range(11)][-1:]
    return refusals


def test_every_refusal_says_the_call_did_not_execute_names_its_wall_and_limit_and_what_to_do():
    refusals = every_kind_of_refusal()
    assert [r.wall for r in refusals] == ["per_tool", "aggregate", "delivery", "query_loop"]
    for refusal in refusals:
        assert "did NOT execute" in refusal.message
    per_tool, aggregate, delivery, query_loop = (r.message for r in refusals)
    assert "per-tool limit is 40" in per_tool and "called crm.get_contact 40 times" in per_tool
    assert "different approach" in per_tool
    assert "limit of 40" in aggregate and "repeat it unchanged" in aggregate
    assert "already sent 5 messages" in delivery and "No more sends" in delivery
    assert "limit is 10" in query_loop and "GROUP BY" in query_loop


def test_the_hard_stop_message_is_written_for_the_user():
    meter = Meter(external_attempts=100)
    text = hard_stop_message(meter, WallSettings(), "contacts 1-40 fetched, 3 overdue invoices.")
    assert text.startswith("I stopped after 100 tool calls")
    assert "hard limit of 100 tool calls" in text and "runaway loop" in text
    assert "contacts 1-40 fetched, 3 overdue invoices." in text and ".." not in text
    assert "break it into smaller runs" in text and "raise" in text
    assert "did NOT execute" not in text and "{" not in text
    assert "not gathered anything" in hard_stop_message(meter, WallSettings(), "  ")


def test_turn_warnings_come_exactly_at_50_100_150_and_gate_nothing():
    warned = [turn for turn in range(0, 201) if turn_warning(turn) is not None]
    assert warned == [50, 100, 150, 200]
    assert "100 turns" in turn_warning(100) and "not a limit" in turn_warning(100)
    assert turn_warning(49) is None and turn_warning(51) is None
    assert turn_warning(30, every=0) is None and turn_warning(20, every=10) is not None


# --- state ---------------------------------------------------------------------------------

def test_the_meter_round_trips_through_its_state():
    meter = Meter()
    eight_tools_thirty_nine_calls_each(meter)
    attempt(MAIL, {"body": "hi"}, meter)
    query("SELECT * FROM result WHERE id = 3", meter)
    state = json.loads(json.dumps(meter.to_state()))
    restored = Meter.from_state(state)
    assert restored == meter
    assert Meter.from_state({}) == Meter() == Meter.from_state(None)
    # The restored meter keeps deciding as the original would: the confirmed retry survives.
    assert attempt(EIGHT[7], {"page": 38}, restored) == Allow()


def test_the_token_budget_message_is_written_for_the_user():
    text = token_stop_message(5120, 5000, "records 1-12 read, 2 overdue.")
    assert "5120 tokens" in text and "token budget of 5000" in text
    assert "records 1-12 read, 2 overdue." in text and "raise the token budget" in text
    assert "not gathered anything" in token_stop_message(10, 5, "")
