"""Retention: finished history older than the horizon goes; anything unfinished stays."""

import itertools
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from tickwork.scheduler.retention import trim_retention
from tickwork.sql.ids import new_id
from tests.factories import count, make_agent, make_tenant
from tests.integration.test_roles import granted  # noqa: F401 (a fixture)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def execution(conn, tenant, agent, *, status, finished_days_ago=None, breadcrumb=None):
    execution_id = new_id()
    finished = NOW - timedelta(days=finished_days_ago) if finished_days_ago is not None else None
    conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
                 " scheduled_for, status, breadcrumb, finished_at)"
                 " VALUES (%s, %s, %s, 'run', 'api', %s, %s, %s, %s)",
                 (execution_id, tenant, agent, NOW - timedelta(days=40), status, breadcrumb, finished))
    conn.execute("INSERT INTO run_events (execution_id, seq, type) VALUES (%s, 1, 'run_start')",
                 (execution_id,))
    return execution_id


async def test_old_finished_runs_are_deleted_with_their_journal_and_the_rest_stay(db_url, pool, settings):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        old = [execution(conn, tenant, agent, status=s, finished_days_ago=31)
               for s in ("completed", "failed", "cancelled")]
        kept = [execution(conn, tenant, agent, status="completed", finished_days_ago=29),
                execution(conn, tenant, agent, status="running"),
                execution(conn, tenant, agent, status="queued"),
                execution(conn, tenant, agent, status="completed", finished_days_ago=60,
                          breadcrumb="suspended")]
        conn.execute("INSERT INTO skipped_fires (schedule_id, scheduled_for, tenant_id, reason,"
                     " recorded_at) VALUES (%s, %s, %s, 'overlap', %s), (%s, %s, %s, 'overlap', %s)",
                     (new_id(), NOW, tenant, NOW - timedelta(days=31),
                      new_id(), NOW, tenant, NOW - timedelta(days=1)))
    deleted = await trim_retention(pool, settings, now=NOW)
    assert deleted == 3
    with psycopg.connect(db_url) as conn:
        remaining = {row[0] for row in conn.execute("SELECT id FROM executions")}
        assert remaining == set(kept)
        assert count(conn, "SELECT count(*) FROM run_events WHERE execution_id = ANY(%s)", (old,)) == 0
        assert count(conn, "SELECT count(*) FROM run_events") == 4
        assert count(conn, "SELECT count(*) FROM skipped_fires") == 1


async def test_retention_zero_keeps_everything(db_url, pool, settings):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        execution(conn, tenant, make_agent(conn, tenant), status="failed", finished_days_ago=400)
    settings.retention_days = 0
    assert await trim_retention(pool, settings, now=NOW) == 0


async def test_the_journal_gets_its_current_month_and_months_ahead_and_drops_whole_old_months(
        db_url, pool, settings):
    from datetime import datetime, timezone

    from uuid_utils.compat import uuid7

    def partitions() -> list[str]:
        with psycopg.connect(db_url) as conn:
            return sorted(r[0] for r in conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'run_events'::regclass"))

    await trim_retention(pool, settings, now=datetime(2027, 1, 20, tzinfo=timezone.utc))
    # The current month is made too (migration 0055; before it only the months ahead were):
    # the default holds none of January's rows, so January's journal is a month that goes
    # whole, as in an old database, instead of rows in the default deleted one by one.
    assert partitions() == ["run_events_2027_01", "run_events_2027_02", "run_events_2027_03",
                            "run_events_default"]
    # An id minted in February 2027 lands in February's partition.
    february = uuid7(nanoseconds=int(datetime(2027, 2, 10, tzinfo=timezone.utc).timestamp()) * 10**9)
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO run_events (execution_id, seq, type) VALUES (%s, 1, 'run_start')",
                     (february,))
        where = conn.execute("SELECT tableoid::regclass::text FROM run_events").fetchone()[0]
    assert where == "run_events_2027_02"
    # 30 days of retention on 2027-05-15: January, February (ended Mar 1) and March (ended
    # Apr 1) go, and the current month and the two ahead (May, June, July) are made.
    await trim_retention(pool, settings, now=datetime(2027, 5, 15, tzinfo=timezone.utc))
    assert partitions() == ["run_events_2027_05", "run_events_2027_06", "run_events_2027_07",
                            "run_events_default"]
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM run_events").fetchone()[0] == 0


async def test_stream_tickets_expired_over_an_hour_ago_are_forgotten(db_url, pool, settings):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        conn.execute("INSERT INTO stream_tickets (ticket_hash, tenant_id, execution_id, expires_at)"
                     " VALUES ('\\x01', %s, %s, now() - interval '2 hours'),"
                     " ('\\x02', %s, %s, now() - interval '5 minutes'),"
                     " ('\\x03', %s, %s, now() + interval '5 minutes')",
                     (tenant, new_id(), tenant, new_id(), tenant, new_id()))
    await trim_retention(pool, settings, now=None)
    with psycopg.connect(db_url) as conn:
        assert [bytes(r[0]) for r in conn.execute(
            "SELECT ticket_hash FROM stream_tickets ORDER BY 1")] == [b"\x02", b"\x03"]


async def test_a_month_holding_a_live_run_keeps_its_journal_while_other_old_months_go(db_url, pool, settings):
    from uuid_utils.compat import uuid7

    def minted(year: int, month: int):
        return uuid7(nanoseconds=int(datetime(year, month, 10, tzinfo=timezone.utc).timestamp()) * 10**9)

    await trim_retention(pool, settings, now=datetime(2027, 1, 20, tzinfo=timezone.utc))
    await trim_retention(pool, settings, now=datetime(2027, 2, 20, tzinfo=timezone.utc))
    # Runs created in February 2027: one waiting for approval, one finished. March: only a
    # finished one. April: a queued one (a run that waited long in the queue).
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        runs = {"waiting": (minted(2027, 2), "completed", "suspended"),
                "february_done": (minted(2027, 2), "completed", None),
                "march_done": (minted(2027, 3), "failed", None),
                "queued": (minted(2027, 4), "queued", None)}
        for execution_id, status, breadcrumb in runs.values():
            conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                         " trigger_source, scheduled_for, status, breadcrumb, finished_at)"
                         " VALUES (%s, %s, %s, 'run', 'api', now(), %s, %s, NULL)",
                         (execution_id, tenant, agent, status, breadcrumb))
            conn.execute("INSERT INTO run_events (execution_id, seq, type)"
                         " VALUES (%s, 1, 'run_start')", (execution_id,))
    await trim_retention(pool, settings, now=datetime(2027, 3, 20, tzinfo=timezone.utc))
    await trim_retention(pool, settings, now=datetime(2027, 4, 20, tzinfo=timezone.utc))
    # On 2027-07-15 with 30 days kept, February, March and April all ended past the horizon:
    # January, March and May go; February (a run waiting for approval) and April (a queued
    # run) stay whole; June ends after the horizon; July, the current month, is made as well
    # as August and September (0055: the current month gets its partition too).
    await trim_retention(pool, settings, now=datetime(2027, 7, 15, tzinfo=timezone.utc))
    with psycopg.connect(db_url) as conn:
        parts = sorted(r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'run_events'::regclass AND c.relname <> 'run_events_default'"))
        assert parts == ["run_events_2027_02", "run_events_2027_04", "run_events_2027_06",
                         "run_events_2027_07", "run_events_2027_08", "run_events_2027_09"]
        kept = {r[0] for r in conn.execute("SELECT execution_id FROM run_events")}
        assert kept == {runs["waiting"][0], runs["february_done"][0], runs["queued"][0]}
        # Once the waiting run ends (cancelled), the next upkeep drops its month.
        conn.execute("UPDATE executions SET status = 'cancelled', breadcrumb = NULL,"
                     " finished_at = now() WHERE id = %s", (runs["waiting"][0],))
    await trim_retention(pool, settings, now=datetime(2027, 7, 16, tzinfo=timezone.utc))
    with psycopg.connect(db_url) as conn:
        assert {r[0] for r in conn.execute("SELECT execution_id FROM run_events")} == {
            runs["queued"][0]}


HANGING = {  # what hangs off a run, and how to find a run's rows there
    "execution_claims": "execution_id", "approvals": "execution_id", "run_states": "execution_id",
    "tool_call_results": "execution_id", "tool_results": "execution_id",
    "queue_tasks": "execution_id", "run_events": "execution_id"}


def with_everything(conn, tenant, agent, **run):
    """A run (as execution() makes it) plus a claim, an approval and its resume task, a saved
    state, a tool result and a recorded tool call."""
    execution_id = execution(conn, tenant, agent, **run)
    approval = f"{execution_id}:call_1"
    conn.execute("INSERT INTO execution_claims (execution_id, worker_id) VALUES (%s, 'w')",
                 (execution_id,))
    conn.execute("INSERT INTO approvals (id, tenant_id, execution_id, tool_call_id, tool)"
                 " VALUES (%s, %s, %s, 'call_1', 'demo.send_message')",
                 (approval, tenant, execution_id))
    conn.execute("INSERT INTO queue_tasks (name, kind, execution_id) VALUES (%s, 'resume', %s)",
                 (approval, execution_id))
    conn.execute("INSERT INTO run_states (execution_id, version, state) VALUES (%s, 1, '{}')",
                 (execution_id,))
    conn.execute("INSERT INTO tool_call_results (execution_id, tool_call_id, result, ok)"
                 " VALUES (%s, 'call_1', 'ok', true)", (execution_id,))
    conn.execute("INSERT INTO tool_results (file_ref, execution_id, tool, content, chars)"
                 " VALUES (%s, %s, 'demo.get_record', '{}', 2)", (f"ref-{execution_id}", execution_id))
    return execution_id


def partition_of(conn, ids) -> set[str]:
    """The partitions holding these runs' journal rows."""
    return {r[0] for r in conn.execute("SELECT DISTINCT tableoid::regclass::text FROM run_events"
                                       " WHERE execution_id = ANY(%s)", (list(ids),))}


def this_month(conn) -> str:
    """The name of the current month's partition (by the database clock)."""
    return conn.execute("SELECT 'run_events_' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')"
                        ).fetchone()[0]


def rows_of(conn, ids) -> dict[str, int]:
    return {table: count(conn, f"SELECT count(*) FROM {table} WHERE {column} = ANY(%s)", (list(ids),))
            for table, column in HANGING.items()}


async def test_one_tick_deletes_many_batches_with_what_hangs_off_them_and_never_a_live_run(
        db_url, pool, settings):
    settings.retention_batch_size = 10
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        old = [with_everything(conn, tenant, agent, status=("completed", "failed", "cancelled")[i % 3],
                               finished_days_ago=31 + i % 5) for i in range(35)]
        live = [with_everything(conn, tenant, agent, status="running"),
                with_everything(conn, tenant, agent, status="queued"),
                with_everything(conn, tenant, agent, status="completed", finished_days_ago=90,
                                breadcrumb="suspended"),
                with_everything(conn, tenant, agent, status="completed", finished_days_ago=29)]
    # 35 runs past the horizon are four batches of 10: all go in this one tick.
    assert await trim_retention(pool, settings, now=NOW) == 35
    with psycopg.connect(db_url) as conn:
        assert {r[0] for r in conn.execute("SELECT id FROM executions")} == set(live)
        assert rows_of(conn, old) == dict.fromkeys(HANGING, 0)
        assert rows_of(conn, live) == dict.fromkeys(HANGING, len(live))
    assert await trim_retention(pool, settings, now=NOW) == 0


def stepping_clock():
    """A clock that reads 0, 1, 2 ... one step per reading: each batch ends one second on."""
    return itertools.count().__next__


def finished_runs(db_url, how_many, days_ago=40):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        for _ in range(how_many):
            execution(conn, tenant, agent, status="completed", finished_days_ago=days_ago)


async def test_a_spent_budget_stops_after_one_batch_and_the_next_tick_carries_on(
        db_url, pool, settings):
    settings.retention_batch_size = 10
    settings.retention_budget_seconds = 0
    finished_runs(db_url, 25)
    assert [await trim_retention(pool, settings, now=NOW) for _ in range(4)] == [10, 10, 5, 0]


async def test_retention_starts_no_batch_after_the_end_the_tick_gives_it_whatever_its_budget(
        db_url, pool, settings):
    settings.retention_batch_size = 10
    settings.retention_budget_seconds = 1000
    finished_runs(db_url, 45)
    # Read at 0 for the deadline, then 1 and 2 after the first two batches: at 2 it must stop.
    assert await trim_retention(pool, settings, now=NOW, clock=stepping_clock(), ends_by=2) == 20
    # The budget alone (no end given) takes every full batch, and the rest.
    assert await trim_retention(pool, settings, now=NOW, clock=stepping_clock()) == 25


async def test_a_tick_ends_its_retention_by_its_own_end_however_large_the_budget(
        db_url, pool, settings, monkeypatch):
    from tickwork.scheduler import tick

    settings.retention_batch_size = 10
    settings.retention_budget_seconds = 3600
    finished_runs(db_url, 25)
    monkeypatch.setattr(tick, "RETENTION_ENDS_BY_SECONDS", 0.0)  # the end is already here
    assert (await tick.run_tick(pool, settings, now=NOW)).retention_deleted == 10
    monkeypatch.setattr(tick, "RETENTION_ENDS_BY_SECONDS", 45.0)
    assert (await tick.run_tick(pool, settings, now=NOW)).retention_deleted == 15


async def test_the_http_ticks_retention_stops_after_its_own_short_budget(db_url, pool, settings):
    from tickwork.scheduler.retention import HTTP_TICK_BUDGET_SECONDS, upkeep_on_database_clock

    settings.retention_batch_size = 10
    settings.retention_days = 7
    settings.retention_budget_seconds = 30
    finished_runs(db_url, 25, days_ago=8)
    readings = iter([0.0, HTTP_TICK_BUDGET_SECONDS - 1, HTTP_TICK_BUDGET_SECONDS + 1, 100.0])
    # Past the HTTP tick's own budget after the second batch, well inside the settings' 30 s.
    assert await upkeep_on_database_clock(pool, settings, clock=lambda: next(readings)) == 20


async def test_the_http_ticks_retention_door_also_takes_batch_after_batch(db_url, pool, settings):
    from tickwork.scheduler.retention import upkeep_on_database_clock

    settings.retention_batch_size = 10
    settings.retention_days = 7
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        old = [with_everything(conn, tenant, agent, status="failed") for _ in range(23)]
        kept = [with_everything(conn, tenant, agent, status="running"),
                with_everything(conn, tenant, agent, status="completed")]
        # The door uses the database's clock: these finished 8 days before it.
        conn.execute("UPDATE executions SET finished_at = now() - interval '8 days'"
                     " WHERE id = ANY(%s)", (old,))
        conn.execute("UPDATE executions SET finished_at = now() - interval '6 days'"
                     " WHERE id = %s", (kept[1],))
    assert await upkeep_on_database_clock(pool, settings) == 23
    with psycopg.connect(db_url) as conn:
        assert {r[0] for r in conn.execute("SELECT id FROM executions")} == set(kept)
        # The runs' journal began in the default partition (no upkeep had run yet), which the
        # door adopts within this one tick (0055): its first call marks the default, its second
        # makes it this month's partition. The first two batches (20 runs) deleted their
        # journal rows from the default one by one; the last batch's 3 runs' rows stay in the
        # adopted month, which goes whole (0 before 0055, when every row was deleted).
        assert rows_of(conn, old) == {**dict.fromkeys(HANGING, 0), "run_events": 3}
        assert partition_of(conn, old) == {this_month(conn)}
        assert rows_of(conn, kept) == dict.fromkeys(HANGING, len(kept))


async def test_a_partition_whose_lock_is_held_is_skipped_and_dropped_by_a_later_tick(
        db_url, pool, settings):
    def partitions() -> list[str]:
        with psycopg.connect(db_url) as conn:
            return sorted(r[0] for r in conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'run_events'::regclass AND c.relname <> 'run_events_default'"))

    await trim_retention(pool, settings, now=datetime(2027, 1, 20, tzinfo=timezone.utc))
    await trim_retention(pool, settings, now=datetime(2027, 2, 20, tzinfo=timezone.utc))
    # January is there too: the current month gets its own partition (0055).
    assert partitions() == ["run_events_2027_01", "run_events_2027_02", "run_events_2027_03",
                            "run_events_2027_04"]
    # A reader of February's partition (a long query, say) holds a lock that its DROP needs.
    with psycopg.connect(db_url) as reader:
        reader.execute("LOCK TABLE run_events_2027_02 IN ACCESS SHARE MODE")
        # 2027-05-15, 30 days kept: January, February and March are past the horizon.
        # January and March go; February's drop gives up after lock_timeout instead of
        # waiting for the reader, and retention returns (a wait on the reader would never
        # end: it commits only below). May, the current month, is made with June and July.
        await trim_retention(pool, settings, now=datetime(2027, 5, 15, tzinfo=timezone.utc))
        assert partitions() == ["run_events_2027_02", "run_events_2027_04", "run_events_2027_05",
                                "run_events_2027_06", "run_events_2027_07"]
        reader.commit()
    await trim_retention(pool, settings, now=datetime(2027, 5, 15, tzinfo=timezone.utc))
    assert partitions() == ["run_events_2027_04", "run_events_2027_05", "run_events_2027_06",
                            "run_events_2027_07"]


def test_bad_retention_settings_are_refused_with_one_sentence():
    import pytest
    from pydantic import ValidationError

    from tickwork.scheduler.settings import SchedulerSettings

    for field, value, message in [
            ("retention_batch_size", 0, "retention batch size must be between 1 and 10000, not 0"),
            ("retention_budget_seconds", -1, "retention budget must be between 0 and 3600 seconds"),
            ("retention_lock_timeout_ms", 0, "retention lock timeout must be between 1 and 60000 ms")]:
        with pytest.raises(ValidationError, match=message):
            SchedulerSettings(**{field: value})


def old_one_turn_runs(conn, tenant, agent, *, old: int, recent: int) -> None:
    """``old`` runs finished 40 days before NOW and ``recent`` finished a day before it, each
    with a claim and five journal events (as a one-turn run leaves them), by COPY."""
    runs = [(new_id(), NOW - timedelta(days=40)) for _ in range(old)]
    runs += [(new_id(), NOW - timedelta(days=1)) for _ in range(recent)]
    cur = conn.cursor()
    with cur.copy("COPY executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
                  " scheduled_for, status, finished_at) FROM STDIN") as copy:
        for execution_id, finished in runs:
            copy.write_row((execution_id, tenant, agent, "run", "api", finished, "completed",
                            finished))
    with cur.copy("COPY execution_claims (execution_id, worker_id) FROM STDIN") as copy:
        for execution_id, _ in runs:
            copy.write_row((execution_id, "w"))
    with cur.copy("COPY run_events (execution_id, seq, type) FROM STDIN") as copy:
        for execution_id, _ in runs:
            for seq, kind in enumerate(("run_start", "step_start", "content_delta",
                                        "model_usage", "run_complete"), 1):
                copy.write_row((execution_id, seq, kind))


async def test_a_batch_commits_without_waiting_for_the_disk_in_its_own_transaction_only(db_url):
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        old_one_turn_runs(conn, tenant, make_agent(conn, tenant), old=3, recent=1)
    horizon = NOW - timedelta(days=30)
    with psycopg.connect(db_url) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.commit()
        # A batch that deletes runs commits asynchronously: a crash can only bring back rows
        # past the horizon, which the next tick deletes again.
        assert conn.execute("SELECT retention_delete_runs(%s, 10)", (horizon,)).fetchone()[0] == 3
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        conn.commit()
        # The next transaction on the same connection is back to the session's setting, and a
        # batch with nothing to delete leaves it alone.
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert conn.execute("SELECT retention_delete_runs(%s, 10)", (horizon,)).fetchone()[0] == 0
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        conn.commit()
        assert count(conn, "SELECT count(*) FROM executions") == 1
        assert count(conn, "SELECT count(*) FROM run_events") == 5


async def test_a_run_another_transaction_holds_is_left_for_a_later_batch_and_the_rest_go(db_url):
    # A batch deletes the runs it found and locked where it found them (migration 0042); a run
    # whose row someone else holds is skipped, not waited for, and not half deleted.
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        old_one_turn_runs(conn, tenant, make_agent(conn, tenant), old=5, recent=1)
        held = conn.execute("SELECT id FROM executions ORDER BY finished_at LIMIT 1").fetchone()[0]
    horizon = NOW - timedelta(days=30)
    with psycopg.connect(db_url) as holder, psycopg.connect(db_url) as conn:
        holder.execute("SELECT 1 FROM executions WHERE id = %s FOR UPDATE", (held,))
        assert conn.execute("SELECT retention_delete_runs(%s, 10)", (horizon,)).fetchone()[0] == 4
        conn.commit()
        assert [r[0] for r in conn.execute("SELECT id FROM executions WHERE finished_at < %s",
                                           (horizon,))] == [held]
        assert count(conn, "SELECT count(*) FROM execution_claims") == 2
        assert count(conn, "SELECT count(*) FROM run_events") == 10
        assert count(conn, "SELECT count(*) FROM run_events WHERE execution_id = %s", (held,)) == 5
        holder.commit()
        assert conn.execute("SELECT retention_delete_runs(%s, 10)", (horizon,)).fetchone()[0] == 1
        conn.commit()
        assert count(conn, "SELECT count(*) FROM executions") == 1
        assert count(conn, "SELECT count(*) FROM execution_claims") == 1
        assert count(conn, "SELECT count(*) FROM run_events") == 5


# --- migration 0055: the install month's journal is a partition too ---------------------------

def journal_partitions(conn) -> dict[str, tuple]:
    """Each partition of the journal: name -> (lower bound, upper bound); None is MINVALUE."""
    return {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT name, lower_bound, upper_bound FROM journal_partitions() WHERE NOT is_default")}


def adoption_mark(conn) -> bool | None:
    """Whether the default carries the adoption's mark: None (no), False (not yet validated),
    True (validated)."""
    row = conn.execute("SELECT convalidated FROM pg_constraint WHERE conname ="
                       " 'run_events_default_adoption'").fetchone()
    return row[0] if row else None


def manage(conn, now=None, days: int = 30) -> tuple[list, list, list]:
    """One partition upkeep in its own transaction, as trim_retention makes it."""
    with conn.transaction():
        return conn.execute("SELECT created, dropped, skipped FROM manage_journal_partitions("
                            "coalesce(%s::timestamptz, now()), 2, %s)", (now, days)).fetchone()


def append_event(conn, execution_id, seq: int = 9) -> str:
    """A journal append as the worker writes one; returns the partition it landed in."""
    conn.execute("INSERT INTO run_events (execution_id, seq, type) VALUES (%s, %s, 'step_start')",
                 (execution_id, seq))
    return conn.execute("SELECT tableoid::regclass::text FROM run_events WHERE execution_id = %s"
                        " AND seq = %s", (execution_id, seq)).fetchone()[0]


def minted_at(moment: datetime):
    from uuid_utils.compat import uuid7

    return uuid7(nanoseconds=int(moment.timestamp()) * 10**9)


async def test_a_fresh_databases_first_upkeep_gives_this_month_a_partition_so_its_runs_journal_goes_whole(
        db_url, pool, settings):
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert journal_partitions(conn) == {}
        await trim_retention(pool, settings, now=None)  # the first tick after install
        month = this_month(conn)
        assert month in journal_partitions(conn)
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        old = [execution(conn, tenant, agent, status="completed") for _ in range(4)]
        conn.execute("UPDATE executions SET finished_at = now() - interval '31 days'")
        assert partition_of(conn, old) == {month}
        assert await trim_retention(pool, settings, now=None) == 4
        # The runs are gone; their journal waits in its month, deleted by no row-by-row DELETE.
        assert rows_of(conn, old) == {**dict.fromkeys(HANGING, 0), "run_events": 4}
        assert count(conn, "SELECT count(*) FROM run_events_default") == 0
        # Once the whole month is past the horizon it is dropped, rows and all.
        later = conn.execute("SELECT date_trunc('month', now()) + interval '1 month 31 days'"
                             ).fetchone()[0]
        await trim_retention(pool, settings, now=later)
        assert month not in journal_partitions(conn)
        assert count(conn, "SELECT count(*) FROM run_events") == 0


async def test_an_upgraded_young_databases_default_becomes_this_months_partition_without_moving_a_row(
        db_url, pool, settings):
    with psycopg.connect(db_url, autocommit=True) as conn, \
            psycopg.connect(db_url, autocommit=True) as worker:
        # An install made before 0055: this month's journal is in the default partition.
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        runs = [execution(conn, tenant, agent, status="completed", finished_days_ago=1)
                for _ in range(5)]
        waiting = execution(conn, tenant, agent, status="completed", finished_days_ago=1,
                            breadcrumb="suspended")
        default_oid = count(conn, "SELECT 'run_events_default'::regclass::oid")
        assert partition_of(conn, [*runs, waiting]) == {"run_events_default"}
        month = this_month(conn)
        # First upkeep: the months ahead are made, and the default is marked (not validated).
        created, _, skipped = manage(conn)
        assert len(created) == 2 and month not in created and skipped == []
        assert adoption_mark(conn) is False
        assert append_event(worker, runs[0], 2) == "run_events_default"  # appends go on
        # Second upkeep: validated and swapped. The default table itself is now this month's
        # partition (same table, so no row moved), over everything below next month.
        created, _, skipped = manage(conn)
        assert created == [month] and skipped == []
        assert adoption_mark(conn) is None
        assert count(conn, f"SELECT '{month}'::regclass::oid") == default_oid
        lower, upper = journal_partitions(conn)[month]
        assert lower is None and upper == min(b[0] for n, b in journal_partitions(conn).items()
                                              if n != month)
        assert partition_of(conn, [*runs, waiting]) == {month}
        assert count(conn, "SELECT count(*) FROM run_events") == 7
        assert count(conn, "SELECT count(*) FROM run_events_default") == 0
        assert sorted(r[0] for r in conn.execute(
            "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " WHERE x.indrelid = %s::regclass", (month,))) == [f"{month}_pkey", f"{month}_ts_idx"]
        assert append_event(worker, runs[1], 2) == month  # the worker's appends land there now
        assert manage(conn) == ([], [], [])  # nothing more to do
        # Past the horizon the adopted month is kept while it holds a live run's journal
        # (0028's rule, with the range's real lower bound: MINVALUE), then dropped whole.
        later = conn.execute("SELECT date_trunc('month', now()) + interval '1 month 31 days'"
                             ).fetchone()[0]
        await trim_retention(pool, settings, now=later)
        assert month in journal_partitions(conn)
        conn.execute("UPDATE executions SET status = 'cancelled', breadcrumb = NULL,"
                     " finished_at = now() WHERE id = %s", (waiting,))
        await trim_retention(pool, settings, now=later)
        assert month not in journal_partitions(conn)
        assert partition_of(conn, [*runs, waiting]) == set()


async def test_a_connection_that_deleted_from_the_old_default_deletes_from_the_new_one_after_the_swap(
        db_url):
    # retention_delete_runs names run_events_default; a pooled connection that ran it before
    # the swap must not keep deleting from the renamed table (its plan is re-made by name).
    horizon = NOW - timedelta(days=30)
    with psycopg.connect(db_url, autocommit=True) as conn, \
            psycopg.connect(db_url, autocommit=True) as retention:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        execution(conn, tenant, agent, status="completed", finished_days_ago=40)
        execution(conn, tenant, agent, status="completed", finished_days_ago=1)
        assert count(retention, "SELECT retention_delete_runs(%s, 10)", (horizon,)) == 1
        assert count(conn, "SELECT count(*) FROM run_events") == 1
        manage(conn)
        manage(conn)
        assert adoption_mark(conn) is None and this_month(conn) in journal_partitions(conn)
        # A run whose id no partition covers (minted a year ahead) lands in the new default.
        stray = minted_at(datetime.now(timezone.utc) + timedelta(days=365))
        conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                     " trigger_source, scheduled_for, status, finished_at) VALUES"
                     " (%s, %s, %s, 'run', 'api', now(), 'failed', %s)",
                     (stray, tenant, agent, NOW - timedelta(days=40)))
        assert append_event(conn, stray, 1) == "run_events_default"
        assert count(retention, "SELECT retention_delete_runs(%s, 10)", (horizon,)) == 1
        assert count(conn, "SELECT count(*) FROM run_events WHERE execution_id = %s",
                     (stray,)) == 0
        assert count(conn, "SELECT count(*) FROM run_events") == 1


async def test_each_adoption_step_gives_up_on_a_held_lock_and_a_later_upkeep_finishes_it(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn, psycopg.connect(db_url) as reader:
        tenant = make_tenant(conn)
        execution(conn, tenant, make_agent(conn, tenant), status="completed", finished_days_ago=1)
        manage(conn)  # the months ahead (the default is marked in the same upkeep; undo that)
        conn.execute("ALTER TABLE run_events_default DROP CONSTRAINT run_events_default_adoption")
        # A long reader of the journal holds ACCESS SHARE on every partition: marking the
        # default (a short ACCESS EXCLUSIVE lock) waits lock_timeout, then is left for later.
        reader.execute("LOCK TABLE run_events IN ACCESS SHARE MODE")
        assert manage(conn) == ([], [], ["run_events_default"])
        assert adoption_mark(conn) is None
        reader.commit()
        manage(conn)
        assert adoption_mark(conn) is False
        # Validating waits for no reader (SHARE UPDATE EXCLUSIVE); the swap does, and gives up.
        reader.execute("LOCK TABLE run_events IN ACCESS SHARE MODE")
        assert manage(conn) == ([], [], ["run_events_default"])
        assert adoption_mark(conn) is True
        reader.commit()
        assert manage(conn) == ([this_month(conn)], [], [])


async def test_a_default_holding_rows_past_every_month_is_not_adopted_and_its_runs_journal_goes_row_by_row(
        db_url, pool, settings):
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        young = execution(conn, tenant, agent, status="completed")
        conn.execute("UPDATE executions SET finished_at = now() WHERE id = %s", (young,))
        # A run whose id a clock a year ahead minted: no partition will cover it.
        stray = minted_at(datetime.now(timezone.utc) + timedelta(days=365))
        conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                     " trigger_source, scheduled_for, status, finished_at) VALUES"
                     " (%s, %s, %s, 'run', 'api', now(), 'failed', now() - interval '40 days')",
                     (stray, tenant, agent))
        append_event(conn, stray, 1)
        for _ in range(3):
            created, _, skipped = manage(conn)
            assert skipped == [] and this_month(conn) not in created
        # Adopting would need a constraint the stray row breaks: the default stays as it is
        # (unmarked), and retention deletes its runs' rows one by one as before 0055.
        assert adoption_mark(conn) is None
        assert partition_of(conn, [young, stray]) == {"run_events_default"}
        assert await trim_retention(pool, settings, now=None) == 1
        assert count(conn, "SELECT count(*) FROM run_events WHERE execution_id = %s", (stray,)) == 0
        assert partition_of(conn, [young]) == {"run_events_default"}


async def test_a_month_whose_ids_already_sit_in_the_default_is_left_to_it_not_an_error(db_url):
    # An upkeep whose clock says October makes October to December; December's ids (this
    # month's, by the real clock) already sit in the default, so December is left alone.
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        run = execution(conn, tenant, make_agent(conn, tenant), status="running")
        real = conn.execute("SELECT date_trunc('month', now())").fetchone()[0]
        created, _, skipped = manage(conn, now=real - timedelta(days=45))
        assert this_month(conn) not in created and skipped == [] and len(created) == 2
        assert partition_of(conn, [run]) == {"run_events_default"}


async def test_months_made_after_the_adoption_never_scan_the_adopted_journal(db_url):
    # Before 0055 every month made while the default held the install month's journal scanned
    # all of it under the lock every append waits for; now that journal is a partition of its
    # own, and a new month's check reads only the (empty) default.
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        for _ in range(20):
            execution(conn, tenant, agent, status="completed", finished_days_ago=1)
        manage(conn)
        manage(conn)
        month = this_month(conn)
        assert month in journal_partitions(conn)
        next_month = conn.execute("SELECT date_trunc('month', now()) + interval '1 month'"
                                  ).fetchone()[0]
        scans = ("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = %s", (month,))
        with conn.transaction():  # the backend's pending counts move only by this transaction
            before = count(conn, *scans)
            created = conn.execute("SELECT created FROM manage_journal_partitions(%s, 2, 30)",
                                   (next_month,)).fetchone()[0]
            after = count(conn, *scans)
        assert len(created) == 1
        assert after - before == 0


async def test_the_roles_call_no_adoption_step_and_append_to_an_adopted_journal(db_url, granted):
    with psycopg.connect(db_url, autocommit=True) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        run = execution(conn, tenant, agent, status="running")
    # The HTTP tick's door adopts the default within its calls, as the API's own role.
    with psycopg.connect(granted["tickwork_api"], autocommit=True) as api:
        for _ in range(2):
            assert api.execute("SELECT retention_upkeep(7, 1000)").fetchone()[0] == 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        month = this_month(conn)
        assert journal_partitions(conn)[month][0] is None
    with psycopg.connect(granted["tickwork_worker"], autocommit=True) as worker:
        assert append_event(worker, run, 2) == month
    for role in ("tickwork_scheduler", "tickwork_worker", "tickwork_api"):
        for statement in ("SELECT journal_begin_adoption()", "SELECT journal_finish_adoption()",
                          "SELECT journal_forget_adoption()", "SELECT * FROM journal_partitions()"):
            with psycopg.connect(granted[role], autocommit=True) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
