"""A model outage is waited out, not failed (DESIGN.md, third round).

When the model endpoint stays down past the provider's few quick retries (ModelUnavailable:
connection errors, 5xx, 429 whatever its Retry-After, silence), the run is parked: its state is
saved, it keeps status running with the breadcrumb 'parked' and holds no worker slot, and its
deadline stops (what was left of it comes back with it). An unpark task takes it back after the
wait, and it continues from its saved state by asking its model again. Each wait is journaled as
provider_wait. The waits grow, honour Retry-After as a minimum, and never carry the run past
TICKWORK_PROVIDER_PATIENCE_SECONDS from the outage's first failure (the last try is at its end);
once it is spent, the run fails with the reason.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from tickwork.sql.journal import RunJournal
from tickwork.worker.agent_loop import ROOT_SEQ, RunOutcome, last_answer
from tickwork.worker.model import ModelUnavailable
from tickwork.worker.redact import redact_text
from tickwork.worker.state import STATE_VERSION, RunState

# At the default patience (900 s) the waits are 5, 10, 20, 40, 80, then 150 s each; a shorter
# patience scales them down (a test's few seconds wait fractions of one), a longer one lets
# them grow further, never past LONGEST_WAIT_SECONDS unless a Retry-After asks for more.
FIRST_WAIT_SECONDS = 5.0
LONGEST_WAIT_SECONDS = 600.0
# Each grown wait is up to this fraction longer, at random: the runs one outage parked do not
# all ask the recovered endpoint again at the same moment.
SPREAD = 0.2
REASON_CHARS = 200  # of the provider's sentence, in the journal's provider_wait


@dataclass(frozen=True)
class Parked:
    """The run waits out its model's outage without a worker until ``until``."""

    attempt: int
    wait_seconds: float
    until: datetime


def next_wait(state: RunState, now: float, patience: float, retry_after: float | None,
              spread: float = 0.0) -> float | None:
    """Seconds to wait before the model is asked again, or None when patience is spent (or
    0: waiting disabled). The wait doubles from the first and stops growing at the longest
    (both scaled to the patience), lengthened by ``spread`` (0 to 1) times SPREAD, is at
    least the server's Retry-After, and never ends past the patience."""
    if patience <= 0:
        return None
    since = now if state.outage_since is None else state.outage_since
    left = since + patience - now
    if left <= 0:
        return None
    first = min(FIRST_WAIT_SECONDS, patience / 30)
    longest = max(first, min(LONGEST_WAIT_SECONDS, patience / 6))
    grown = min(longest, first * 2 ** min(state.outage_waits, 32)) * (1 + SPREAD * spread)
    return min(max(grown, retry_after or 0.0), left)


async def wait_out(state: RunState, journal: RunJournal, outage: ModelUnavailable,
                   patience: float, clock: Callable[[], float] = time.time,
                   spread: Callable[[], float] = random.random) -> Parked | RunOutcome:
    """Park the run for its next wait (journaled as provider_wait, saved with its state in one
    transaction), or, with patience spent, the failure that names the outage."""
    now = clock()
    said = redact_text(str(outage))
    wait = next_wait(state, now, patience, outage.retry_after, spread())
    if wait is None:
        return RunOutcome("failed", "failed", gave_up(state, now, patience, said),
                          last_answer(state))
    if state.outage_since is None:
        state.outage_since = now
    state.outage_waits += 1
    until = datetime.fromtimestamp(now + wait, timezone.utc)
    journal.emit("provider_wait", {
        "attempt": state.outage_waits, "wait_seconds": round(wait, 3),
        "reason": said if len(said) <= REASON_CHARS else said[:REASON_CHARS - 1] + "…",
        "until": until.isoformat()}, parent=ROOT_SEQ)
    await journal.park(state=state.to_state(), version=STATE_VERSION, wait_seconds=wait,
                       usage=state.usage())
    return Parked(state.outage_waits, wait, until)


def gave_up(state: RunState, now: float, patience: float, said: str) -> str:
    if patience <= 0:  # waiting is off: the provider's own sentence, as before
        return said
    waited = now - (now if state.outage_since is None else state.outage_since)
    return (f"The model stayed unavailable for {waited:.0f} s over {state.outage_waits} "
            f"wait(s), past the patience of {patience:g} s "
            f"(TICKWORK_PROVIDER_PATIENCE_SECONDS); the last failure: {said}")
