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
from typing import Callable
from uuid import UUID

from tickwork.scheduler import cron
from tickwork.sql.vocabulary import AgentStatus, Overlap, SkipReason


@dataclass(frozen=True)
class DueSchedule:
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
    execution_id: UUID | None


@dataclass(frozen=True)
class FirePlan:
    schedule_id: UUID
    next_run: datetime
    fire_at: datetime | None
    execution_id: UUID | None
    fires: int
    skipped: list[SkippedFire] = field(default_factory=list)


class CronCache:
    """Memoizes cron math per (cron, tick time): thousands of schedules share a few crons."""

    def __init__(self) -> None:
        self._bounds: dict[tuple[str, datetime], tuple[datetime, datetime]] = {}

    def bounds(self, expression: str, tick_time: datetime) -> tuple[datetime, datetime]:
        """(latest fire at or before tick_time, first fire after it)."""
        key = (expression, tick_time)
        if key not in self._bounds:
            self._bounds[key] = (cron.latest_fire_at_or_before(expression, tick_time),
                                 cron.next_fire_after(expression, tick_time))
        return self._bounds[key]


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


def plan_fire(schedule: DueSchedule, cache: CronCache, *, new_id: Callable[[], UUID],
              missed_limit: int) -> FirePlan:
    latest, next_run = cache.bounds(schedule.cron, schedule.tick_time)
    fires = due_fires(schedule, latest, missed_limit)
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
              execution_id: UUID | None) -> FirePlan:
    skipped = [SkippedFire(at, reason, execution_id) for at in fires]
    return FirePlan(schedule.id, next_run, None, None, len(fires), skipped)
