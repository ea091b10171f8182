"""Pure planning of one tick: for each due schedule, which fire runs and which are recorded skipped.

Missed windows coalesce: a schedule due five times while everything was down fires once, for
its latest due fire, and the other four are recorded as 'coalesced' against that execution.
A fire is skipped (and recorded) while the agent is not active, or while the previous run of
an overlap='skip' schedule is unfinished. next_run always jumps to the first fire after the
tick time, which comes from the database clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, NamedTuple, Sequence
from uuid import UUID

from tickwork.scheduler import cron
from tickwork.sql.vocabulary import AgentStatus, Overlap, SkipReason

# An execution id as minted: a UUID, or its text (the tick mints text: it only ever sends it).
ExecutionId = UUID | str


class DueSchedule(NamedTuple):
    """A claimed schedule, in the column order of claim_due_schedules (rows are built as these
    straight from the cursor, with no dict in between)."""
    id: UUID
    cron: str
    next_run: datetime
    overlap: Overlap
    agent_status: AgentStatus
    unfinished_execution_id: UUID | None
    tick_time: datetime


@dataclass(frozen=True)
class SkippedFire:
    scheduled_for: datetime
    reason: SkipReason
    execution_id: ExecutionId | None


@dataclass(frozen=True)
class FirePlan:
    schedule_id: UUID
    next_run: datetime
    fire_at: datetime | None
    execution_id: ExecutionId | None
    fires: int
    skipped: list[SkippedFire] = field(default_factory=list)


class CronCache:
    """Memoizes cron math per (cron, tick time): thousands of schedules share a few crons; and
    the due fires per (cron, next_run, tick time), which schedules that share a cron and a
    next_run share too."""

    def __init__(self) -> None:
        self._bounds: dict[tuple[str, datetime], tuple[datetime, datetime]] = {}
        self._fires: dict[tuple[str, datetime, datetime, int],
                          tuple[list[datetime], datetime]] = {}

    def bounds(self, expression: str, tick_time: datetime) -> tuple[datetime, datetime]:
        """(latest fire at or before tick_time, first fire after it)."""
        key = (expression, tick_time)
        if key not in self._bounds:
            self._bounds[key] = (cron.latest_fire_at_or_before(expression, tick_time),
                                 cron.next_fire_after(expression, tick_time))
        return self._bounds[key]

    def group_fires(self, schedule: DueSchedule, limit: int) -> tuple[list[datetime], datetime]:
        """(due fires, next_run after the tick) of every schedule with this one's cron,
        next_run and tick time: computed once per such group."""
        key = (schedule.cron, schedule.next_run, schedule.tick_time, limit)
        found = self._fires.get(key)
        if found is None:
            latest, next_run = self.bounds(schedule.cron, schedule.tick_time)
            found = self._fires[key] = (due_fires(schedule, latest, limit), next_run)
        return found


def due_fires(schedule: DueSchedule, latest: datetime, limit: int) -> list[datetime]:
    """Fires from next_run through latest, oldest first; past ``limit`` the oldest are dropped
    from the record (the latest is always kept: it is the one that runs)."""
    if latest < schedule.next_run:
        return []
    if latest == schedule.next_run:
        return [latest]
    fires = cron.fires_between(schedule.cron, schedule.next_run, latest, limit=limit)
    if not fires or fires[-1] != latest:
        fires = fires[: limit - 1] + [latest]
    return fires


def plan_fire(schedule: DueSchedule, cache: CronCache, *, new_id: Callable[[], ExecutionId],
              missed_limit: int) -> FirePlan:
    """The plan of one schedule (the reference plan_batch must agree with)."""
    latest, next_run = cache.bounds(schedule.cron, schedule.tick_time)
    return _plan(schedule, due_fires(schedule, latest, missed_limit), next_run, new_id)


def plan_batch(schedules: Sequence[DueSchedule], cache: CronCache, *,
               new_id: Callable[[], ExecutionId], missed_limit: int) -> list[FirePlan]:
    """Plans of a claimed batch, in claim order (so execution ids are minted in that order),
    exactly as plan_fire would make them one by one; the cron math runs once per
    (cron, next_run, tick time) group."""
    group_fires = cache.group_fires
    return [_plan(schedule, *group_fires(schedule, missed_limit), new_id)
            for schedule in schedules]


def _plan(schedule: DueSchedule, fires: list[datetime], next_run: datetime,
          new_id: Callable[[], ExecutionId]) -> FirePlan:
    if not fires:
        return FirePlan(schedule.id, next_run, None, None, 0)
    if schedule.agent_status != "active":
        return _skip_all(schedule, next_run, fires, "agent_inactive", None)
    if schedule.overlap == "skip" and schedule.unfinished_execution_id is not None:
        return _skip_all(schedule, next_run, fires, "overlap", schedule.unfinished_execution_id)
    execution_id = new_id()
    coalesced = [SkippedFire(at, "coalesced", execution_id) for at in fires[:-1]]
    return FirePlan(schedule.id, next_run, fires[-1], execution_id, len(fires), coalesced)


def _skip_all(schedule: DueSchedule, next_run: datetime, fires: list[datetime], reason: SkipReason,
              execution_id: ExecutionId | None) -> FirePlan:
    skipped = [SkippedFire(at, reason, execution_id) for at in fires]
    return FirePlan(schedule.id, next_run, None, None, len(fires), skipped)
