"""The journal writer batches across runs (sql/journal.py JournalWriter): many runs' appends
and verdicts share statements, and every journal promise holds per run inside a shared batch:
each event lands exactly once, in seq order, with no gaps; a run the sweep fenced writes
nothing while its batch-mates land; one run's refused event fails nobody else; every run in a
batch wakes its tails once, by its own id.

Runs are queued in SQL and claimed as a worker claims them; the test plays the worker's part
with real concurrent tasks on one writer.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from tickwork.scheduler.sweep import sweep_stale
from tickwork.sql.ids import new_id
from tickwork.sql.journal import JournalWriter, RunFenced, RunJournal
from tickwork.sql.notify import parse_run_ids
from tickwork.worker.claim import claim_queued_runs

# Runs queued at one commit, as a burst of fires queues them (bench/inflight.py does the same).
ENQUEUE = """
WITH inserted AS (
    INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,
                            scheduled_for, max_attempts, timeout_minutes, input)
    SELECT gen_random_uuid(), %(tenant_id)s, %(agent_id)s, 'run', 'api', now(), 1, 5, '{}'
      FROM generate_series(1, %(runs)s)
    RETURNING id
)
INSERT INTO queue_tasks (name, kind, execution_id) SELECT id::text, 'run', id FROM inserted
"""


async def claimed_journals(pool, runs: int, writer: JournalWriter) -> list[RunJournal]:
    tenant_id, agent_id = new_id(), new_id()
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'batching')", (tenant_id,))
        await conn.execute("INSERT INTO agents (id, tenant_id, name, instructions) "
                           "VALUES (%s, %s, 'batching', 'Answer.')", (agent_id, tenant_id))
        await conn.execute(ENQUEUE, {"tenant_id": tenant_id, "agent_id": agent_id, "runs": runs})
    claimed = await claim_queued_runs(pool, limit=runs, worker_id="test")
    assert len(claimed) == runs
    return [RunJournal(pool, run.id, run.run_token, next_seq=run.next_seq, writer=writer)
            for run in claimed]


async def journal_of(pool, journal: RunJournal) -> list[tuple[int, str, dict]]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT seq, type, payload FROM run_events WHERE execution_id = %s ORDER BY seq",
            (journal.execution_id,))
        return [(row["seq"], row["type"], row["payload"]) for row in await cursor.fetchall()]


async def status_of(pool, journal: RunJournal) -> tuple[str, str | None]:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT status, outcome FROM executions WHERE id = %s",
                                    (journal.execution_id,))
        row = await cursor.fetchone()
        return row["status"], row["outcome"]


async def play(journal: RunJournal, parts: int, run_index: int) -> None:
    """A run's part: events between background writes and explicit flushes, then its end."""
    for i in range(parts):
        journal.emit("content_delta", {"text": f"run {run_index} part {i}"}, parent=1)
        if i % 3 == 0:
            await asyncio.sleep(0)  # the other runs emit meanwhile
        if i % 10 == 9:
            await journal.flush()
    journal.emit("run_complete", {"status": "completed", "outcome": "done"}, parent=1)
    await journal.finish(status="completed", outcome="done")


async def test_concurrent_runs_share_statements_and_each_journal_lands_once_in_order(pool):
    writer = JournalWriter(pool)
    runs, parts = 30, 25
    journals = await claimed_journals(pool, runs, writer)
    await asyncio.gather(*(play(journal, parts, i) for i, journal in enumerate(journals)))
    for i, journal in enumerate(journals):
        stored = await journal_of(pool, journal)
        assert [seq for seq, _, _ in stored] == list(range(1, parts + 3))  # no gap, no repeat
        assert [payload["text"] for _, _, payload in stored[1:-1]] == [
            f"run {i} part {n}" for n in range(parts)]
        assert stored[-1][1] == "run_complete"
        assert await status_of(pool, journal) == ("completed", "done")
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) AS n FROM run_events")
        assert (await cursor.fetchone())["n"] == runs * (parts + 2)
    # Each run made three explicit flushes and a finish (120 writes of their own, besides the
    # background ones); shared statements are far fewer.
    assert 0 < writer.statements < runs * 4


async def test_runs_ending_together_are_finished_by_one_statement(pool):
    writer = JournalWriter(pool)
    journals = await claimed_journals(pool, 12, writer)
    for journal in journals:
        journal.emit("run_complete", {"status": "completed", "outcome": "done"}, parent=1)
    await asyncio.gather(*(journal.finish(status="completed", outcome="done")
                           for journal in journals))
    assert writer.statements == 1
    for journal in journals:
        assert [t for _, t, _ in await journal_of(pool, journal)] == ["run_start", "run_complete"]
        assert await status_of(pool, journal) == ("completed", "done")


async def test_background_appends_of_many_runs_go_in_one_statement(pool):
    writer = JournalWriter(pool)
    journals = await claimed_journals(pool, 20, writer)
    for journal in journals:  # no flush: the background writes them, together
        journal.emit("step_start", {"turn": 1}, parent=1)
    for journal in journals:
        await journal.background_idle()
    assert writer.statements == 1
    for journal in journals:
        assert [t for _, t, _ in await journal_of(pool, journal)] == ["run_start", "step_start"]
        assert not journal._pending


async def test_a_fenced_run_writes_nothing_while_its_batch_mates_land(pool):
    writer = JournalWriter(pool)
    journals = await claimed_journals(pool, 6, writer)
    fenced = journals[2]
    async with pool.connection() as conn:  # the sweep judges one run as timed out
        cursor = await conn.execute("SELECT deadline FROM executions WHERE id = %s",
                                    (fenced.execution_id,))
        deadline = (await cursor.fetchone())["deadline"]
        await conn.execute("UPDATE executions SET deadline = deadline + interval '1 hour' "
                           "WHERE id <> %s", (fenced.execution_id,))
    assert (await sweep_stale(pool, now=deadline + timedelta(seconds=1), batch_size=10)).failed == 1
    for journal in journals:
        journal.emit("content_delta", {"text": "late"}, parent=1)
        journal.emit("run_complete", {"status": "completed", "outcome": "done"}, parent=1)
    results = await asyncio.gather(*(journal.finish(status="completed", outcome="done")
                                     for journal in journals), return_exceptions=True)
    assert writer.statements == 1
    assert isinstance(results[2], RunFenced)
    assert [r for i, r in enumerate(results) if i != 2] == [None] * 5
    assert [t for _, t, _ in await journal_of(pool, fenced)] == ["run_start", "run_complete"]
    assert (await status_of(pool, fenced))[1] == "timed_out"  # the sweep's verdict stands
    for journal in journals[:2] + journals[3:]:
        assert [t for _, t, _ in await journal_of(pool, journal)] == [
            "run_start", "content_delta", "run_complete"]
        assert await status_of(pool, journal) == ("completed", "done")


async def test_one_runs_refused_event_fails_only_that_run(pool):
    writer = JournalWriter(pool)
    journals = await claimed_journals(pool, 5, writer)
    bad = journals[1]
    for journal in journals:  # jsonb refuses \u0000: the whole shared statement fails once
        text = "nul \x00 here" if journal is bad else "fine"
        journal.emit("content_delta", {"text": text}, parent=1)
        journal.emit("run_complete", {"status": "completed", "outcome": "done"}, parent=1)
    results = await asyncio.gather(*(journal.finish(status="completed", outcome="done")
                                     for journal in journals), return_exceptions=True)
    assert isinstance(results[1], psycopg.Error)
    assert [r for i, r in enumerate(results) if i != 1] == [None] * 4
    assert await status_of(pool, bad) == ("running", None)  # nothing of it was written
    assert [t for _, t, _ in await journal_of(pool, bad)] == ["run_start"]
    for journal in journals[:1] + journals[2:]:
        assert await status_of(pool, journal) == ("completed", "done")


async def test_every_run_in_a_batch_wakes_its_tails_once_after_the_commit(pool, db_url):
    writer = JournalWriter(pool)
    journals = await claimed_journals(pool, 8, writer)
    await writer.notifier.drain()  # the claims' own wake-ups are not this test's
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as listener:
        await listener.execute("LISTEN tickwork_events")
        for journal in journals:
            journal.emit("step_start", {"turn": 1}, parent=1)
            journal.emit("content_delta", {"text": "a"}, parent=2)
        sent_before = writer.notifier.statements
        await asyncio.gather(*(journal.flush() for journal in journals))
        await writer.notifier.drain()
        assert writer.statements == 1
        assert writer.notifier.statements == sent_before + 1  # one NOTIFY statement, after it
        await listener.execute("SELECT 1")  # the notifications arrive before its answer
        woken = []
        async with asyncio.timeout(10):
            async for note in listener.notifies():
                woken += [str(run_id) for run_id in parse_run_ids(note.payload)]
                if len(woken) >= len(journals):
                    break
    assert sorted(woken) == sorted(str(journal.execution_id) for journal in journals)


@pytest.mark.parametrize("close_first", [True, False])
async def test_a_flush_or_the_writers_close_does_not_wait_for_the_linger(pool, close_first):
    writer = JournalWriter(pool, linger_seconds=60)  # the linger would outlast the test
    [journal] = await claimed_journals(pool, 1, writer)
    journal.emit("step_start", {"turn": 1}, parent=1)
    if close_first:
        await writer.close()
    else:
        await journal.flush()
    assert [t for _, t, _ in await journal_of(pool, journal)] == ["run_start", "step_start"]


async def test_a_failure_reason_holding_what_postgres_cannot_store_is_stored_readable(pool):
    writer = JournalWriter(pool)
    [journal, other] = await claimed_journals(pool, 2, writer)
    journal.emit("run_complete", {"status": "failed", "reason": "a\x00b\ud800c"}, parent=1)
    other.emit("run_complete", {"status": "completed"}, parent=1)
    await asyncio.gather(
        journal.finish(status="failed", outcome="failed", reason="boom: a\x00b\ud800c"),
        other.finish(status="completed", outcome="done"))
    assert writer.statements == 1  # one statement for both: nothing was refused
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT reason FROM executions WHERE id = %s",
                                    (journal.execution_id,))
        assert (await cursor.fetchone())["reason"] == "boom: a\ufffdb\ufffdc"
    assert (await journal_of(pool, journal))[-1][2]["reason"] == "a\ufffdb\ufffdc"
