"""How long a run waits out its model's outage (worker/outage.py): growing waits, Retry-After
as a minimum, never past the patience, then a failure naming the outage; the patience setting
checked; what a parked run needs to continue kept in its saved state."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tickwork.worker.model import ModelUnavailable
from tickwork.worker.outage import gave_up, next_wait, wait_out
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.state import RunState

NOW = 1_800_000_000.0


def waits(patience: float, count: int, retry_after: float | None = None) -> list[float]:
    """The first ``count`` waits of one outage, each failing at once after the last wait."""
    state, now, out = RunState.start("", {}, units=1), NOW, []
    for _ in range(count):
        wait = next_wait(state, now, patience, retry_after)
        if wait is None:
            break
        out.append(wait)
        state.outage_since = NOW if state.outage_since is None else state.outage_since
        state.outage_waits += 1
        now += wait
    return out


def test_the_waits_grow_then_level_off_at_the_default_patience():
    assert waits(900, 8) == [5, 10, 20, 40, 80, 150, 150, 150]


def test_a_short_patience_scales_the_waits_down():
    assert waits(3, 3) == pytest.approx([0.1, 0.2, 0.4])


def test_a_grown_wait_is_spread_by_up_to_a_fifth_so_parked_runs_do_not_return_at_once():
    state = RunState.start("", {}, units=1)
    assert next_wait(state, NOW, 900, None, spread=0.5) == pytest.approx(5.5)
    assert next_wait(state, NOW, 900, 120, spread=0.99) == 120  # Retry-After still the minimum


def test_retry_after_is_a_minimum():
    assert waits(900, 2, retry_after=120) == [120, 120]
    assert waits(900, 1, retry_after=0.5) == [5]


def test_no_wait_carries_the_run_past_its_patience_and_then_it_is_spent():
    spent = waits(900, 100, retry_after=400)
    assert spent == [400, 400, 100]  # the last try at the patience's end
    state = RunState.start("", {}, units=1)
    state.outage_since, state.outage_waits = NOW - 900, 3
    assert next_wait(state, NOW, 900, None) is None


def test_a_patience_of_zero_never_waits():
    assert next_wait(RunState.start("", {}, units=1), NOW, 0, None) is None


async def test_spent_patience_fails_the_run_with_a_reason_naming_the_outage():
    state = RunState.start("", {}, units=1)
    state.outage_since, state.outage_waits = NOW - 61, 4
    outage = ModelUnavailable("Model 'm' failed after 3 attempt(s): the endpoint answered 503")
    ended = await wait_out(state, None, outage, 60, clock=lambda: NOW)  # no journal: not parked
    assert (ended.status, ended.outcome) == ("failed", "failed")
    assert ended.reason == ("The model stayed unavailable for 61 s over 4 wait(s), past the "
                            "patience of 60 s (TICKWORK_PROVIDER_PATIENCE_SECONDS); the last "
                            "failure: Model 'm' failed after 3 attempt(s): the endpoint "
                            "answered 503")
    assert gave_up(state, NOW, 0, "as the provider said") == "as the provider said"


def test_the_patience_comes_from_the_environment(monkeypatch):
    assert WorkerSettings().provider_patience_seconds == 900
    monkeypatch.setenv("TICKWORK_PROVIDER_PATIENCE_SECONDS", "0")
    assert WorkerSettings().provider_patience_seconds == 0


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "604801"])
def test_a_patience_out_of_range_is_refused_in_one_sentence(monkeypatch, value):
    monkeypatch.setenv("TICKWORK_PROVIDER_PATIENCE_SECONDS", value)
    with pytest.raises(ValidationError) as refused:
        WorkerSettings()
    assert "provider_patience_seconds must be a number of seconds from 0 to 604800" in str(
        refused.value)


def test_a_parked_state_keeps_its_outage_and_a_pending_judgement():
    state = RunState.start("Be brief.", {"prompt": "hi"}, units=3)
    state.outage_since, state.outage_waits, state.gate_step = NOW, 2, 7
    again = RunState.from_state(state.to_state())
    assert (again.outage_since, again.outage_waits, again.gate_step) == (NOW, 2, 7)
    older = state.to_state()  # saved before these were kept: no outage, nothing to judge
    for key in ("outage_since", "outage_waits", "gate_step"):
        del older[key]
    again = RunState.from_state(older)
    assert (again.outage_since, again.outage_waits, again.gate_step) == (None, 0, None)


def test_a_call_that_answers_ends_the_outage():
    state = RunState.start("", {}, units=1)
    state.outage_since, state.outage_waits = NOW, 3
    state.add_usage(None)
    assert (state.outage_since, state.outage_waits) == (None, 0)


def test_the_tail_draws_each_wait_with_its_retry_time_and_reason():
    from tickwork.run_tree import build_view, view_lines
    journal = [{"seq": 1, "parent_seq": None, "type": "run_start", "payload": {"attempt": 1}},
               {"seq": 2, "parent_seq": 1, "type": "provider_wait", "ts": "2026-01-01T00:00:00Z",
                "payload": {"attempt": 1, "wait_seconds": 120, "until": "2026-01-01T00:02:00Z",
                            "reason": "Model 'm' failed after 1 attempt(s): the endpoint "
                                      "answered 429: slow down (Retry-After: 120)"}}]
    assert view_lines(build_view("r", journal))[1] == (
        "  ↻ model unavailable (wait 1): trying again at 2026-01-01T00:02:00Z: Model 'm' failed "
        "after 1 attempt(s): the endpoint answered 429: slow down (Retry-After: 120)")


def test_the_run_list_says_why_a_parked_run_does_not_move():
    from tickwork.cli_resources import run_status_text
    assert run_status_text({"status": "running", "breadcrumb": "parked"}) == (
        "running (model unavailable, retrying)")
    assert run_status_text({"status": "running", "breadcrumb": None}) == "running"
