"""How many runs a worker claims ahead of its free slots follows the rate at which its slots
free (worker/claim_ahead.py), on an injected clock."""

from __future__ import annotations

from tickwork.worker.claim_ahead import AHEAD_WAIT_SECONDS, RATE_WINDOW_SECONDS, AheadSizer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def freeing(sizer: AheadSizer, clock: Clock, *, count: int, over: float) -> None:
    for _ in range(count):
        clock.now += over / count
        sizer.slot_freed()


def test_a_worker_whose_slots_have_not_freed_claims_nothing_ahead():
    clock = Clock()
    sizer = AheadSizer(clock)
    clock.now += 5
    assert sizer.ahead(cap=16) == 0


def test_slots_freeing_fast_claim_as_many_as_would_free_while_one_waits_up_to_the_cap():
    clock = Clock()
    sizer = AheadSizer(clock)
    freeing(sizer, clock, count=100, over=RATE_WINDOW_SECONDS)  # 1,000 slots a second
    assert abs(sizer.ahead(cap=256) - 1000 * AHEAD_WAIT_SECONDS) <= 1  # the window's edge
    assert sizer.ahead(cap=16) == 16


def test_runs_that_take_long_get_nothing_claimed_ahead():
    clock = Clock()
    sizer = AheadSizer(clock)
    freeing(sizer, clock, count=30, over=10.0)  # three slots a second: runs of seconds
    assert sizer.ahead(cap=16) == 0


def test_once_slots_stop_freeing_the_runs_ahead_fall_to_none_within_a_window_or_two():
    clock = Clock()
    sizer = AheadSizer(clock)
    freeing(sizer, clock, count=100, over=RATE_WINDOW_SECONDS)
    assert sizer.ahead(cap=16) == 16
    clock.now += 2 * RATE_WINDOW_SECONDS  # nothing freed since
    assert sizer.ahead(cap=16) == 0
