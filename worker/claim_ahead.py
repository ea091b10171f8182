"""How many runs a worker claims beyond its free slots, so that a slot that frees starts its
next run at once instead of waiting for a claim's round trip.

A run claimed ahead is started in the database (run_start written, its deadline running) while
it waits in the worker for a slot, and another worker may be idle meanwhile. So the number
ahead follows the rate at which this worker's slots have been freeing: as many as free in
AHEAD_WAIT_SECONDS at that rate. Runs that end in milliseconds get a claim's worth ahead; runs
that wait seconds on a model get none, and the queue stays with every worker. The one case a
run waits longer is a sudden change from short runs to long ones: at most the runs ahead then
(those that the last ~50 ms would have freed) wait for a slot as long as a run takes.
"""

from __future__ import annotations

from typing import Callable

# At the rate slots have been freeing, a run claimed ahead waits about this long for one.
AHEAD_WAIT_SECONDS = 0.05
# The rate is the frees counted over at least this long (a shorter count is too noisy).
RATE_WINDOW_SECONDS = 0.1


class AheadSizer:
    """Counts the slots that free and says how many runs to claim ahead. ``clock`` is a
    monotonic clock in seconds (time.monotonic in the worker), injected so tests can drive it."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._window_start = clock()
        self._freed = 0  # slots freed since _window_start
        self._rate = 0.0  # slots freed per second over the last full window

    def slot_freed(self) -> None:
        self._roll()
        self._freed += 1

    def ahead(self, cap: int) -> int:
        """Runs to claim beyond the free slots now: never more than ``cap``."""
        self._roll()
        return max(0, min(cap, int(self._rate * AHEAD_WAIT_SECONDS)))

    def _roll(self) -> None:
        """Close the window once it is long enough. A window closed late (nothing freed or
        asked for a while) spreads its count over all of its length, so a worker whose runs
        stopped ending sees its rate fall to what it is."""
        now = self._clock()
        elapsed = now - self._window_start
        if elapsed >= RATE_WINDOW_SECONDS:
            self._rate = self._freed / elapsed
            self._window_start, self._freed = now, 0
