"""Real scheduler processes racing, crashing and running under other time zones.

The expected fires come from croniter directly (a reference evaluator), never from tickwork's
own planner; ticks are stepped in lockstep (a barrier per minute) with injected time.
"""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta, timezone

import psycopg
from croniter import croniter

from tickwork.sql.ids import new_id
from tests.factories import count, make_tenant
from tests.integration.drivers import Driver, tick_all

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def first_fire_from(cron: str, moment: datetime) -> datetime:
    return croniter(cron, moment - timedelta(minutes=1)).get_next(datetime)


def reference_fires(cron: str, first: datetime, last: datetime) -> list[datetime]:
    moment = first_fire_from(cron, first)
    fires = []
    while moment <= last:
        fires.append(moment)
        moment = croniter(cron, moment).get_next(datetime)
    return fires


def load_schedules(db_url: str, crons: list[str], start: datetime) -> None:
    """One agent per schedule, next_run = the reference's first fire at or after start."""
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agents = [(new_id(), tenant, f"agent-{i}") for i in range(len(crons))]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO agents (id, tenant_id, name) VALUES (%s, %s, %s)", agents)
            cur.executemany(
                "INSERT INTO schedules (id, tenant_id, agent_id, cron, next_run, overlap)"
                " VALUES (%s, %s, %s, %s, %s, 'allow')",
                [(new_id(), tenant, agent[0], cron, first_fire_from(cron, start))
                 for agent, cron in zip(agents, crons)])


def mixed_crons(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    crons = []
    for i in range(n):
        kind = i % 10
        if kind < 6:
            crons.append("* * * * *")
        elif kind < 8:
            crons.append("*/5 * * * *")
        elif kind < 9:
            crons.append("0 * * * *")
        else:
            crons.append(f"{rng.randrange(60)}/{rng.choice([2, 3, 7])} * * * *")
    return crons


def fires_per_slot(db_url: str) -> dict[datetime, int]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT scheduled_for, count(*) FROM executions"
                            " WHERE retry_of IS NULL GROUP BY 1").fetchall()
    return {slot: n for slot, n in rows}


def expected_per_slot(crons: list[str], first: datetime, last: datetime) -> dict[datetime, int]:
    expected: dict[datetime, int] = {}
    for cron in set(crons):
        for fire in reference_fires(cron, first, last):
            expected[fire] = expected.get(fire, 0) + crons.count(cron)
    return expected


async def test_four_scheduler_processes_and_sixteen_tick_calls_fire_each_slot_exactly_once(db_url, api):
    crons = mixed_crons(2000)
    load_schedules(db_url, crons, T0)
    drivers = [Driver(db_url) for _ in range(4)]
    minutes = 6
    try:
        for k in range(minutes):
            at = T0 + timedelta(minutes=k)
            for driver in drivers:
                driver.send(at)
            calls = [api.post("/v1/tick", json={"at": at.isoformat().replace("+00:00", "Z")},
                              headers={"Authorization": f"Bearer {api.tokens['operator']}"})
                     for _ in range(16)]
            responses = await asyncio.gather(*calls)
            answers = await asyncio.gather(*[asyncio.to_thread(d.read) for d in drivers])
            assert all(r.status_code == 200 and r.json()["ok"] for r in responses)
            assert all(a["ok"] for a in answers)
    finally:
        assert all(d.close() == 0 for d in drivers)
    last = T0 + timedelta(minutes=minutes - 1)
    assert fires_per_slot(db_url) == expected_per_slot(crons, T0, last)
    with psycopg.connect(db_url) as conn:
        assert count(conn, "SELECT count(*) FROM (SELECT 1 FROM executions WHERE retry_of IS NULL"
                           " GROUP BY schedule_id, scheduled_for HAVING count(*) > 1) d") == 0
        assert count(conn, "SELECT count(*) FROM executions e WHERE NOT EXISTS"
                           " (SELECT 1 FROM queue_tasks q WHERE q.name = e.id::text)") == 0
        next_runs = conn.execute("SELECT cron, next_run FROM schedules").fetchall()
    for cron, next_run in next_runs:
        assert next_run == croniter(cron, last).get_next(datetime)


def test_a_scheduler_that_crashes_before_commit_leaves_no_trace_and_the_next_tick_fires(db_url):
    load_schedules(db_url, ["* * * * *", "*/5 * * * *", "0 * * * *"], T0)
    crasher = Driver(db_url, TICKWORK_FAILPOINTS="tick.after_insert_before_commit=exit")
    crasher.send(T0)
    assert crasher.read() is None and crasher.close() == 86  # os._exit inside the transaction
    with psycopg.connect(db_url) as conn:
        assert count(conn, "SELECT count(*) FROM executions") == 0
        assert count(conn, "SELECT count(*) FROM queue_tasks") == 0
        assert count(conn, "SELECT count(*) FROM schedules WHERE next_run = %s", (T0,)) == 3
    healthy = Driver(db_url)
    assert tick_all([healthy], T0)[0]["created"] == 3
    assert healthy.close() == 0


def test_a_scheduler_that_crashes_after_commit_has_already_queued_its_runs(db_url):
    load_schedules(db_url, ["* * * * *", "*/5 * * * *"], T0)
    crasher = Driver(db_url, TICKWORK_FAILPOINTS="tick.after_commit_before_dispatch=exit")
    crasher.send(T0)
    assert crasher.read() is None and crasher.close() == 86
    with psycopg.connect(db_url) as conn:
        # The task row is written in the execution's own transaction: nothing is left undispatched.
        assert count(conn, "SELECT count(*) FROM executions e JOIN queue_tasks q"
                           " ON q.name = e.id::text") == 2
    healthy = Driver(db_url)
    assert tick_all([healthy], T0)[0]["created"] == 0
    assert healthy.close() == 0


def test_the_process_time_zone_changes_nothing_across_dst_changes(db_url):
    """R5d: the same ticks through both 2026 European/US DST changes under three process TZs."""
    crons = ["* * * * *", "30 1 * * *", "0 2 * * *"]
    results = []
    for zone in ("Europe/Berlin", "America/New_York", ""):
        with psycopg.connect(db_url) as conn:
            conn.execute("TRUNCATE executions, queue_tasks, skipped_fires, schedules, agents,"
                         " tenants CASCADE")
        start = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)
        load_schedules(db_url, crons, start)
        driver = Driver(db_url, TZ=zone, DRIVER_BATCH="2")
        for k in range(0, 240, 1):
            assert tick_all([driver], start + timedelta(minutes=k))[0]["ok"]
        assert driver.close() == 0
        results.append(sorted((slot, n) for slot, n in fires_per_slot(db_url).items()))
    assert results[0] == results[1] == results[2]
    per_slot = dict(results[0])
    assert sum(per_slot.values()) == 240 + 1 + 1
    assert per_slot[datetime(2026, 3, 29, 1, 30, tzinfo=UTC)] == 2


def test_a_transaction_held_open_past_the_idle_timeout_is_killed(db_url):
    """The guard the suite relies on has teeth: a tick that idles 2.5 s inside its transaction
    (a planted sleep before commit) is terminated by idle_in_transaction_session_timeout = 2s."""
    load_schedules(db_url, ["* * * * *"], T0)
    slow = Driver(db_url, TICKWORK_FAILPOINTS="tick.after_insert_before_commit=sleep:2500")
    answer = tick_all([slow], T0)[0]
    slow.close()
    assert answer["ok"] is False
    with psycopg.connect(db_url) as conn:
        assert count(conn, "SELECT count(*) FROM executions") == 0
