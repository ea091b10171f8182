from datetime import datetime, timedelta, timezone
from itertools import count
from uuid import UUID

import random

from tickwork.scheduler import cron
from tickwork.scheduler.planner import CronCache, DueSchedule, plan_batch, plan_fire

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


def mixed_batch(size: int, seed: int = 7) -> list[DueSchedule]:
    """Due schedules as a claim returns them (by next_run): few crons, some sharing a next_run,
    some late (coalescing), paused agents, unfinished overlap='skip' runs, one not yet due."""
    rnd = random.Random(seed)
    crons = ["* * * * *", "*/5 * * * *", "0 * * * *", "0 9 * * *", "30 8 * * *"]
    tick = T0 + timedelta(minutes=20, seconds=5)
    batch = []
    for n in range(size):
        expression = rnd.choice(crons)
        late = rnd.choice([0, 0, 0, 5, 20])
        next_run = cron.latest_fire_at_or_before(expression, tick - timedelta(minutes=late))
        if n == 3:
            next_run = tick + timedelta(minutes=1)  # claimed, yet not due: nothing fires
        batch.append(DueSchedule(
            id=UUID(int=10_000 + n), cron=expression, next_run=next_run,
            overlap=rnd.choice(["skip", "allow"]),
            agent_status=rnd.choice(["active", "active", "active", "paused", "draft"]),
            unfinished_execution_id=rnd.choice([None, None, UUID(int=5)]), tick_time=tick))
    return sorted(batch, key=lambda s: s.next_run)


def test_a_batch_is_planned_exactly_as_each_schedule_alone_with_ids_minted_in_claim_order():
    batch = mixed_batch(300)
    one_by_one_ids, batch_ids = count(1), count(1)
    alone = [plan_fire(s, CronCache(), new_id=lambda: UUID(int=next(one_by_one_ids)),
                       missed_limit=10) for s in batch]
    together = plan_batch(batch, CronCache(), new_id=lambda: UUID(int=next(batch_ids)),
                          missed_limit=10)
    assert together == alone  # same order, fires, next_run, coalesced and skipped records
    assert [p.schedule_id for p in together] == [s.id for s in batch]
    minted = [p.execution_id for p in together if p.execution_id is not None]
    assert minted == sorted(minted) and len(set(minted)) == len(minted)
    reasons = {s.reason for p in together for s in p.skipped}
    assert reasons == {"coalesced", "agent_inactive", "overlap"}  # the batch covers each path


def test_cron_math_runs_once_per_group_of_schedules_sharing_a_cron_and_next_run(monkeypatch):
    calls = {"fires_between": 0, "latest_fire_at_or_before": 0, "next_fire_after": 0}
    for name in calls:
        real = getattr(cron, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(cron, name, counted)
    tick = T0 + timedelta(minutes=3)
    batch = [due(cron=c, next_run=T0, tick=tick) for c in ("* * * * *", "*/3 * * * *")
             for _ in range(500)]
    plans = plan_batch(batch, CronCache(), new_id=new_id, missed_limit=10)
    assert [p.fires for p in plans] == [4] * 500 + [2] * 500
    assert calls == {"fires_between": 2, "latest_fire_at_or_before": 2, "next_fire_after": 2}


def test_a_group_shares_its_fires_but_each_schedule_gets_its_own_execution_and_records():
    tick = T0 + timedelta(minutes=2)
    batch = [due(next_run=T0, tick=tick), due(next_run=T0, tick=tick, agent="paused"),
             due(next_run=T0, tick=tick)]
    first, paused, last = plan_batch(batch, CronCache(), new_id=new_id, missed_limit=10)
    assert first.execution_id != last.execution_id
    assert {s.execution_id for s in first.skipped} == {first.execution_id}
    assert {s.execution_id for s in last.skipped} == {last.execution_id}
    assert [s.reason for s in paused.skipped] == ["agent_inactive"] * 3
    assert first.fire_at == last.fire_at == tick and paused.fire_at is None
