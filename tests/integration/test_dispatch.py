"""The tick's dispatch against a real Postgres: exact counts, injected time."""

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import psycopg.rows
import pytest

from tickwork.scheduler.dispatcher import dispatch_due, dispatch_once
from tickwork.scheduler.tick import run_tick
from tickwork.sql import failpoints
from tickwork.sql.db import connect, open_pool
from tests.factories import count, make_agent, make_schedules, make_tenant, many_agents

UTC = timezone.utc
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def minutes(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


def every_minute_schedules(db_url: str, n: int, **kwargs) -> list:
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agents = many_agents(conn, tenant, n)
        ids = []
        for agent in agents:
            ids += make_schedules(conn, tenant, agent, [("* * * * *", T0)], **kwargs)
        return ids


def sql_count(db_url: str, sql: str, params: tuple = ()) -> int:
    with psycopg.connect(db_url) as conn:
        return count(conn, sql, params)


async def test_two_dispatchers_claim_each_due_schedule_once(db_url):
    every_minute_schedules(db_url, 200)

    async def drain(name: str) -> list:
        conn = await connect(db_url, application_name=f"tickwork-test-{name}")
        batches = []
        while not batches or batches[-1].claimed:
            batches.append(await dispatch_once(conn, now=T0, limit=10, missed_limit=10))
        await conn.close()
        return batches

    a, b = await asyncio.gather(drain("a"), drain("b"))
    assert sum(r.created for r in a + b) == 200
    assert sql_count(db_url, "SELECT count(*) FROM executions") == 200
    assert sql_count(db_url, "SELECT count(DISTINCT schedule_id) FROM executions") == 200
    assert sql_count(db_url, "SELECT count(*) FROM queue_tasks") == 200


async def test_two_lanes_hold_a_batch_each_at_once_and_fire_every_due_schedule_once(db_url):
    """dispatch_due keeps LANES (2) batches in flight: both wait before their commits at once,
    the third ten is left unlocked meanwhile, and in the end every schedule fired once."""
    every_minute_schedules(db_url, 30)
    with psycopg.connect(db_url, autocommit=True) as conn:  # held batches outlast the suite's 2 s
        conn.execute(f"ALTER DATABASE {conn.info.dbname}"
                     " SET idle_in_transaction_session_timeout = 0")
    pool = await open_pool(db_url, application_name="tickwork-test-lanes", max_size=2)
    failpoints.arm("tick.after_insert_before_commit", "block:batch")
    try:
        tick = asyncio.create_task(dispatch_due(pool, now=T0, batch_size=10, missed_limit=10))
        await asyncio.wait_for(failpoints.wait_reached("batch"), 30)
        await asyncio.wait_for(_until_unlocked_due(db_url, 10), 30)  # one lane: stays at 20
        failpoints.release("batch")
        result = await asyncio.wait_for(tick, 30)
    finally:
        failpoints.disarm_all()
        await pool.close()
    assert (result.claimed, result.created) == (30, 30)
    assert sql_count(db_url, "SELECT count(DISTINCT schedule_id) FROM executions") == 30
    assert sql_count(db_url, "SELECT count(*) FROM executions") == 30
    assert sql_count(db_url, "SELECT count(*) FROM schedules WHERE next_run <= %s", (T0,)) == 0


async def _until_unlocked_due(db_url: str, wanted: int) -> None:
    """Until exactly ``wanted`` due schedules can be locked by someone else (the rest are held
    by the tick's batches); each look locks them only for its own rolled-back transaction."""
    with psycopg.connect(db_url) as conn:
        while True:
            free = count(conn, "SELECT count(*) FROM (SELECT id FROM schedules WHERE next_run <= %s"
                               " FOR UPDATE SKIP LOCKED) s", (T0,))
            conn.rollback()
            if free == wanted:
                return
            await asyncio.sleep(0.01)  # a lock taken is not announced: look again soon


async def test_every_execution_has_a_queue_task_named_by_its_id(db_url, pool):
    every_minute_schedules(db_url, 30)
    await dispatch_due(pool, now=T0, batch_size=7, missed_limit=10)
    assert sql_count(db_url, "SELECT count(*) FROM executions e JOIN queue_tasks q"
                             " ON q.name = e.id::text AND q.execution_id = e.id") == 30


async def test_a_late_tick_coalesces_missed_fires_and_records_each_one(db_url, pool, settings):
    every_minute_schedules(db_url, 100)
    for minute in (1, 2, 3):
        await run_tick(pool, settings, now=minutes(minute) - timedelta(minutes=1))
    outcome = await run_tick(pool, settings, now=minutes(7) + timedelta(seconds=20))
    assert outcome.dispatch.created == 100
    assert sql_count(db_url, "SELECT count(*) FROM executions WHERE scheduled_for = %s",
                     (minutes(7),)) == 100
    assert sql_count(db_url, "SELECT count(*) FROM executions WHERE scheduled_for = %s AND"
                             " fires = 5", (minutes(7),)) == 100
    assert sql_count(db_url, "SELECT count(*) FROM executions WHERE scheduled_for > %s AND"
                             " scheduled_for < %s", (minutes(2), minutes(7))) == 0
    assert sql_count(db_url, "SELECT count(*) FROM skipped_fires WHERE reason = 'coalesced'"
                             " AND scheduled_for BETWEEN %s AND %s", (minutes(3), minutes(6))) == 400
    assert sql_count(db_url, "SELECT count(*) FROM schedules WHERE next_run = %s",
                     (minutes(8),)) == 100


async def test_a_clock_going_backwards_fires_nothing_twice(db_url, pool, settings):
    every_minute_schedules(db_url, 20)
    first = await run_tick(pool, settings, now=minutes(10))
    assert first.dispatch.created == 20
    for moment in (minutes(5), minutes(10)):
        again = await run_tick(pool, settings, now=moment)
        assert again.dispatch.created == 0 and again.ok
    assert sql_count(db_url, "SELECT count(*) FROM executions") == 20
    assert sql_count(db_url, "SELECT count(*) FROM schedules WHERE next_run = %s",
                     (minutes(11),)) == 20


async def test_overlap_skip_records_the_fire_while_the_last_run_is_unfinished(db_url, pool, settings):
    every_minute_schedules(db_url, 1, overlap="skip")
    await run_tick(pool, settings, now=minutes(0))
    await run_tick(pool, settings, now=minutes(1))
    assert sql_count(db_url, "SELECT count(*) FROM executions") == 1
    assert sql_count(db_url, "SELECT count(*) FROM skipped_fires f JOIN executions e"
                             " ON e.id = f.execution_id WHERE f.reason = 'overlap'"
                             " AND f.scheduled_for = %s", (minutes(1),)) == 1
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE executions SET status = 'completed', outcome = 'done'")
    await run_tick(pool, settings, now=minutes(2))
    assert sql_count(db_url, "SELECT count(*) FROM executions WHERE scheduled_for = %s",
                     (minutes(2),)) == 1


async def test_overlap_allow_fires_beside_an_unfinished_run(db_url, pool, settings):
    every_minute_schedules(db_url, 1, overlap="allow")
    for minute in range(3):
        await run_tick(pool, settings, now=minutes(minute))
    assert sql_count(db_url, "SELECT count(*) FROM executions WHERE status = 'queued'") == 3


async def test_a_paused_agent_skips_its_fires_and_says_so(db_url, pool, settings):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant, status="paused")
        make_schedules(conn, tenant, agent, [("* * * * *", T0)])
    await run_tick(pool, settings, now=T0)
    assert sql_count(db_url, "SELECT count(*) FROM executions") == 0
    assert sql_count(db_url, "SELECT count(*) FROM skipped_fires WHERE reason = 'agent_inactive'") == 1


async def test_a_paused_schedule_is_not_due(db_url, pool, settings):
    every_minute_schedules(db_url, 3)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE schedules SET status = 'paused'")
    assert (await run_tick(pool, settings, now=T0)).dispatch.claimed == 0


async def test_a_duplicate_queue_task_for_the_same_execution_is_dropped(db_url, pool, settings):
    every_minute_schedules(db_url, 1)
    await run_tick(pool, settings, now=T0)
    with psycopg.connect(db_url) as conn:
        inserted = conn.execute("INSERT INTO queue_tasks (name, kind, execution_id)"
                                " SELECT id::text, 'run', id FROM executions"
                                " ON CONFLICT (name) DO NOTHING").rowcount
    assert inserted == 0
    assert sql_count(db_url, "SELECT count(*) FROM queue_tasks") == 1


async def test_the_unique_index_refuses_a_second_origin_execution_for_a_fire(db_url, pool, settings):
    every_minute_schedules(db_url, 1)
    await run_tick(pool, settings, now=T0)
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type,"
                     " trigger_source, scheduled_for) SELECT gen_random_uuid(), tenant_id,"
                     " agent_id, schedule_id, 'schedule', 'cron', scheduled_for FROM executions")


async def test_workers_are_woken_by_notify_when_the_tick_commits(db_url, pool, settings):
    every_minute_schedules(db_url, 2)
    listener = await connect(db_url, application_name="tickwork-test-listener")
    await listener.execute("LISTEN tickwork_tasks")
    await run_tick(pool, settings, now=T0)
    notice = await anext(listener.notifies(timeout=10))
    assert notice.channel == "tickwork_tasks"
    await listener.close()


async def test_a_failed_tick_reports_why_and_leaves_nothing_half_written(db_url, pool, settings, api):
    every_minute_schedules(db_url, 5)
    with psycopg.connect(db_url) as conn:  # a planted fault: every execution insert now fails
        conn.execute("ALTER TABLE executions ADD CONSTRAINT planted_fault CHECK (false) NOT VALID")
    response = await api.post("/v1/tick", json={"at": "2026-03-01T09:00:00Z"},
                              headers={"Authorization": f"Bearer {api.tokens['operator']}"})
    assert response.status_code == 200
    assert response.json()["ok"] is False and "planted_fault" in response.json()["error"]
    assert sql_count(db_url, "SELECT count(*) FROM schedules WHERE next_run = %s", (T0,)) == 5
    assert sql_count(db_url, "SELECT count(*) FROM queue_tasks") == 0
    assert sql_count(db_url, "SELECT count(*) FROM skipped_fires") == 0


async def test_the_tick_endpoint_runs_the_same_tick(db_url, api):
    every_minute_schedules(db_url, 4)
    response = await api.post("/v1/tick", json={"at": "2026-03-01T09:00:00Z"},
                              headers={"Authorization": f"Bearer {api.tokens['operator']}"})
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["dispatch"]["created"] == 4
    assert body["dispatch"]["tick_time"].startswith("2026-03-01T09:00:00")


def _plan_nodes(node: dict) -> list[dict]:
    return [node] + [n for child in node.get("Plans", []) for n in _plan_nodes(child)]


def _explain(conn: psycopg.Connection, query: str, params: dict) -> list[dict]:
    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()[0]
    return _plan_nodes(plan[0]["Plan"])


async def test_the_tick_reads_only_due_schedules_whatever_the_number_not_due(db_url):
    """Work per tick must not grow with schedules that are not due: both statements of a batch
    reach schedules through an index, and the due scan reads exactly the due rows from the
    partial index on next_run, with 20,000 schedules due later and 3 due now."""
    from tickwork.scheduler.dispatcher import batch_params
    from tickwork.scheduler.planner import CronCache, DueSchedule, plan_batch
    from tickwork.sql import QUERIES
    from tickwork.sql.ids import new_id

    due_ids = every_minute_schedules(db_url, 3)
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agents = many_agents(conn, tenant, 14)
        # 14 agents x 1,439 daily crons at minutes 1..1439 after T0 (none due at T0)
        conn.execute(
            "INSERT INTO schedules (id, tenant_id, agent_id, cron, next_run)"
            " SELECT gen_random_uuid(), %s, a, (m %% 60) || ' ' || (m / 60) || ' * * *',"
            "        %s + m * interval '1 minute'"
            "   FROM unnest(%s::uuid[]) AS a, generate_series(1, 1439) AS m", (tenant, T0, agents))
        conn.commit()
        conn.execute("ANALYZE schedules")
        conn.commit()
        assert count(conn, "SELECT count(*) FROM schedules") == 3 + 14 * 1439

        claim = {"now": T0, "limit": 1000}
        nodes = _explain(conn, QUERIES["claim_due_schedules"], claim)
        on_schedules = [n for n in nodes if n.get("Relation Name") == "schedules"]
        assert len(on_schedules) == 1 and on_schedules[0]["Actual Rows"] == 3
        # an index scan, or a bitmap heap scan fed by one: either way through the partial index
        indexes = {n["Index Name"] for n in [on_schedules[0]] + _plan_nodes(on_schedules[0])
                   if "Index Name" in n}
        assert indexes == {"schedules_due_idx"}
        conn.rollback()

        rows = conn.cursor(row_factory=psycopg.rows.args_row(DueSchedule)).execute(
            QUERIES["claim_due_schedules"], claim).fetchall()
        plans = plan_batch(rows, CronCache(), new_id=new_id, missed_limit=10)
        assert sorted(p.schedule_id for p in plans) == sorted(due_ids)
        nodes = _explain(conn, QUERIES["update_claimed_schedules"], batch_params(plans))
        scans = [n for n in nodes
                 if n.get("Relation Name") == "schedules" and n["Node Type"].endswith("Scan")]
        assert scans and all(n["Node Type"] in ("Index Scan", "Bitmap Heap Scan") for n in scans)
        assert all(n["Actual Rows"] * n.get("Actual Loops", 1) <= 3 for n in scans)
        conn.rollback()


async def test_a_session_time_zone_other_than_utc_fires_utc_crons_at_their_utc_time(db_url):
    """Cron is UTC: a database (or a role, or a pooler) whose TimeZone is Asia/Kolkata hands the
    tick timestamps at +05:30, and the tick must still fire '0 9 * * *' at 09:00 UTC, record it
    at 09:00 UTC and move next_run to 09:00 UTC the next day."""

    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        make_schedules(conn, tenant, agent, [("0 9 * * *", T0), ("30 3 * * *", T0)])
        conn.execute(f"ALTER DATABASE {conn.info.dbname} SET TimeZone = 'Asia/Kolkata'")
    pool = await open_pool(db_url, application_name="tickwork-test-kolkata", max_size=2)
    try:
        async with pool.connection() as conn:
            zone = await (await conn.execute("SHOW TimeZone")).fetchone()
        assert zone["TimeZone"] == "Asia/Kolkata"
        result = await dispatch_due(pool, now=T0 + timedelta(seconds=30), batch_size=10,
                                    missed_limit=10)
    finally:
        await pool.close()
    assert (result.claimed, result.created, result.skipped_fires) == (2, 1, 0)
    assert sql_count(db_url, "SELECT count(*) FROM executions WHERE scheduled_for = %s",
                     (T0,)) == 1
    with psycopg.connect(db_url) as conn:
        next_runs = dict(conn.execute("SELECT cron, next_run FROM schedules").fetchall())
    assert next_runs == {"0 9 * * *": T0 + timedelta(days=1),
                         "30 3 * * *": datetime(2026, 3, 2, 3, 30, tzinfo=UTC)}
