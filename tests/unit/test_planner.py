from datetime import datetime, timedelta, timezone
from itertools import count
from uuid import UUID

from tickwork.scheduler.planner import CronCache, DueSchedule, plan_fire

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
_ids = count(1)


def new_id() -> UUID:
    return UUID(int=next(_ids))


def due(cron="* * * * *", next_run=T0, tick=T0, overlap="allow", agent="active", unfinished=None):
    return DueSchedule(id=UUID(int=999), cron=cron, next_run=next_run, overlap=overlap,
                       agent_status=agent, unfinished_execution_id=unfinished, tick_time=tick)


def plan(schedule, limit=1440):
    return plan_fire(schedule, CronCache(), new_id=new_id, missed_limit=limit)


def test_an_on_time_fire_runs_once_and_advances_next_run():
    p = plan(due())
    assert (p.fire_at, p.fires, p.skipped) == (T0, 1, [])
    assert p.next_run == T0 + timedelta(minutes=1)


def test_missed_windows_coalesce_into_the_latest_fire_and_record_the_others():
    p = plan(due(tick=T0 + timedelta(minutes=4, seconds=30)))
    assert p.fire_at == T0 + timedelta(minutes=4)
    assert p.fires == 5
    assert [s.scheduled_for for s in p.skipped] == [T0 + timedelta(minutes=m) for m in range(4)]
    assert {s.reason for s in p.skipped} == {"coalesced"}
    assert {s.execution_id for s in p.skipped} == {p.execution_id}
    assert p.next_run == T0 + timedelta(minutes=5)


def test_overlap_skip_records_the_fire_against_the_unfinished_run():
    running = UUID(int=7)
    p = plan(due(overlap="skip", unfinished=running))
    assert p.fire_at is None and p.execution_id is None
    assert [(s.scheduled_for, s.reason, s.execution_id) for s in p.skipped] == [
        (T0, "overlap", running)]
    assert p.next_run == T0 + timedelta(minutes=1)


def test_overlap_allow_fires_even_with_an_unfinished_run():
    assert plan(due(overlap="allow", unfinished=UUID(int=7))).fire_at == T0


def test_an_inactive_agent_skips_the_fire_and_says_why():
    p = plan(due(agent="paused"))
    assert p.fire_at is None
    assert [s.reason for s in p.skipped] == ["agent_inactive"]


def test_the_record_of_a_long_outage_is_bounded_but_the_latest_fire_still_runs():
    p = plan(due(tick=T0 + timedelta(days=3)), limit=100)
    assert p.fire_at == T0 + timedelta(days=3)
    assert len(p.skipped) == 99 and p.fires == 100


def test_a_tick_before_the_next_fire_changes_nothing_but_next_run_stays_in_the_future():
    p = plan(due(cron="0 9 * * *", next_run=T0, tick=T0 - timedelta(minutes=5)))
    assert p.fire_at is None and p.skipped == []
    assert p.next_run == T0
