"""The tail's tree sums a run's usage from its model_usage events (drawn as no node) and ends
with it; the total a run_complete carries wins; a run without reported tokens prints as before."""

from __future__ import annotations

from tickwork.run_tree import build_view, view_lines


def ev(seq, parent, kind, payload=None):
    return {"seq": seq, "parent_seq": parent, "type": kind, "payload": payload or {},
            "ts": "2026-01-01T00:00:00Z"}


JOURNAL = [
    ev(1, None, "run_start", {"attempt": 1}),
    ev(2, 1, "step_start", {"turn": 1}),
    ev(3, 2, "model_usage", {"alias": "default", "input_tokens": 1200, "output_tokens": 45}),
    ev(4, 2, "content_delta", {"text": "Done."}),
    ev(5, 2, "model_usage", {"alias": "judge", "input_tokens": 300, "output_tokens": 3}),
    ev(6, 2, "gate_decision", {"verdict": "done"}),
]


def test_usage_is_summed_from_model_usage_events_and_printed_last():
    view = build_view("r", [*JOURNAL, ev(7, 1, "run_complete", {"status": "completed",
                                                                "outcome": "done"})])
    assert view.usage == {"input_tokens": 1500, "output_tokens": 48, "model_calls": 2}
    lines = view_lines(view)
    assert lines == ["run r · done", "  step 1", "    ✓ gate: done", "  ✓ done", "", "Done.",
                     "", "usage: 1,500 tokens in, 48 out, 2 model calls"]


def test_the_total_on_run_complete_wins_over_the_sum_of_what_the_tail_saw():
    total = {"input_tokens": 9000, "output_tokens": 700, "model_calls": 5}  # a resumed run
    view = build_view("r", [*JOURNAL, ev(7, 1, "run_complete", {"outcome": "done",
                                                                "usage": total})])
    assert view.usage == total
    assert view_lines(view)[-1] == "usage: 9,000 tokens in, 700 out, 5 model calls"


def test_a_run_without_reported_tokens_prints_no_usage_line():
    journal = [e for e in JOURNAL if e["type"] != "model_usage"]
    lines = view_lines(build_view("r", [*journal, ev(7, 1, "run_complete", {"outcome": "done"})]))
    assert lines[-1] == "Done." and not any(line.startswith("usage:") for line in lines)
