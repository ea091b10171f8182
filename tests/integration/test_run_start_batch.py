"""Keyless run starts written together (scheduler/run_batch.py), with real concurrent requests
and real row locks: starts that arrive while statements are in flight share the next one, and
each still gets exactly its own run or its own refusal, scoped to its own tenant.

To make the sharing exact rather than likely, a test holds the agent's row lock in an
uncommitted transaction: the first starts' statements wait on it (both statements the batcher
keeps in flight), every later start gathers behind them, and the lock's release lets the
gathered starts go in one statement."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Iterator

import psycopg
import pytest

from tests.factories import create_agent
from tests.integration.test_run_start_locking import until_waiting
from tickwork.scheduler.run_batch import MAX_IN_FLIGHT, RunStartBatcher

UNKNOWN = "0190a000-0000-7000-8000-000000000000"
WAITING_SESSIONS = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = 'tickwork-test'
   AND wait_event_type = 'Lock'
"""


@contextmanager
def holding(db_url: str, agent_id: str,
            change: str = "name = name") -> Iterator[psycopg.Connection]:
    """The agent's row locked by an uncommitted UPDATE (rolled back at the end unless the test
    commits it): a run start's FOR SHARE waits for it."""
    with psycopg.connect(db_url, application_name="tickwork-test-holder") as conn:
        conn.execute(f"UPDATE agents SET {change} WHERE id = %s", (agent_id,))
        yield conn


async def gathered(api, db_url: str, blockers: list[asyncio.Task], waiting: int) -> None:
    """Until the blockers' statements wait on the held lock and ``waiting`` starts wait behind
    them in the batcher."""
    batcher = api.app.state.run_starts
    with psycopg.connect(db_url, autocommit=True) as watch:
        await until_waiting(watch, "tickwork-test", *blockers)
        async with asyncio.timeout(10):
            while (watch.execute(WAITING_SESSIONS).fetchone()[0] < MAX_IN_FLIGHT
                   or batcher.waiting < waiting):
                await asyncio.sleep(0.01)


def start(api, agent_id: str, body: dict | None = None, **kwargs) -> asyncio.Task:
    return asyncio.create_task(api.post(f"/v1/agents/{agent_id}/runs", json=body or {}, **kwargs))


async def blocked(api, agent_id: str) -> list[asyncio.Task]:
    """MAX_IN_FLIGHT starts of the held agent, each in a statement of its own, waiting."""
    batcher = api.app.state.run_starts
    tasks = []
    for n in range(MAX_IN_FLIGHT):
        sent = batcher.statements
        tasks.append(start(api, agent_id, {"input": {"blocker": n}}))
        async with asyncio.timeout(10):
            while batcher.statements == sent:  # alone in its statement: nothing else waits
                await asyncio.sleep(0.005)
    return tasks


def queued(conn: psycopg.Connection, run_ids: list[str]) -> dict[str, tuple]:
    """Each named run's (agent, tenant, input, its queue tasks) as stored."""
    rows = conn.execute(
        "SELECT e.id::text, e.agent_id::text, e.tenant_id::text, e.input,"
        " (SELECT count(*) FROM queue_tasks q WHERE q.execution_id = e.id AND q.name = e.id::text)"
        " FROM executions e WHERE e.id = ANY(%s::uuid[])", (run_ids,)).fetchall()
    return {row[0]: row[1:] for row in rows}


async def test_starts_that_arrive_together_share_one_statement_and_each_gets_its_own_run(
        api, db_url):
    agent = await create_agent(api, "burst")
    batcher = api.app.state.run_starts
    with holding(db_url, agent["id"]) as holder:
        blockers = await blocked(api, agent["id"])
        before = batcher.statements
        burst = [start(api, agent["id"], {"input": {"n": n}}) for n in range(40)]
        await gathered(api, db_url, blockers, 40)
        holder.rollback()
        answers = await asyncio.gather(*burst)
        await asyncio.gather(*blockers)
    assert [a.status_code for a in answers] == [202] * 40, [a.text for a in answers]
    assert batcher.statements - before == 1  # the 40 gathered starts: one statement
    runs = [a.json() for a in answers]
    assert [run["input"] for run in runs] == [{"n": n} for n in range(40)]
    assert len({run["id"] for run in runs}) == 40
    with psycopg.connect(db_url) as conn:
        stored = queued(conn, [run["id"] for run in runs])
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == 40 + MAX_IN_FLIGHT
        assert conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 40 + MAX_IN_FLIGHT
    for run in runs:  # each answer is its own stored run, with one queue task named by its id
        agent_id, _tenant, stored_input, tasks = stored[run["id"]]
        assert (agent_id, stored_input, tasks) == (agent["id"], run["input"], 1)
        assert (run["status"], run["trigger_type"], run["trigger_source"]) == (
            "queued", "run", "api")


async def test_each_start_of_a_shared_statement_gets_its_own_refusal(api, db_url):
    agent = await create_agent(api, "active")
    paused = await create_agent(api, "paused", status="paused")
    theirs = await create_agent(api, "globex's",
                                headers={"Authorization": f"Bearer {api.tokens['globex']}"})
    batcher = api.app.state.run_starts
    with holding(db_url, agent["id"]) as holder:
        blockers = await blocked(api, agent["id"])
        before = batcher.statements
        mixed = [start(api, agent["id"]), start(api, paused["id"]), start(api, UNKNOWN),
                 start(api, theirs["id"]), start(api, agent["id"])]
        await gathered(api, db_url, blockers, len(mixed))
        holder.rollback()
        answers = await asyncio.gather(*mixed)
        await asyncio.gather(*blockers)
    assert batcher.statements - before == 1
    assert [a.status_code for a in answers] == [202, 409, 404, 404, 202], [a.text for a in answers]
    # Each refusal says what a start written alone says (a keyed start goes alone).
    for answer, agent_id in zip(answers[1:4], (paused["id"], UNKNOWN, theirs["id"])):
        alone = await api.post(f"/v1/agents/{agent_id}/runs", json={},
                               headers={"Idempotency-Key": f"alone-{agent_id}"})
        assert (answer.status_code, answer.json()) == (alone.status_code, alone.json())
    with psycopg.connect(db_url) as conn:
        agents = conn.execute(
            "SELECT agent_id::text, count(*) FROM executions GROUP BY 1").fetchall()
    assert dict(agents) == {agent["id"]: 2 + MAX_IN_FLIGHT}


async def test_a_start_that_postgres_refuses_fails_alone(api, db_url):
    """RunIn already refuses what jsonb cannot store (NaN, lone surrogates, NUL), so a
    constraint added here stands for any refusal of one start's row: its statement fails, and
    its starts are written again one by one."""
    agent = await create_agent(api, "one-refused")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE executions ADD CONSTRAINT test_refuses_some_inputs"
                     " CHECK (NOT input ? 'refuse')")
    batcher = api.app.state.run_starts
    with holding(db_url, agent["id"]) as holder:
        blockers = await blocked(api, agent["id"])
        before = batcher.statements
        mixed = [start(api, agent["id"], {"input": {"n": 1}}),
                 start(api, agent["id"], {"input": {"refuse": True}}),
                 start(api, agent["id"], {"input": {"n": 2}})]
        await gathered(api, db_url, blockers, len(mixed))
        holder.rollback()
        answers = await asyncio.gather(*mixed)
        await asyncio.gather(*blockers)
    assert batcher.statements - before == 1 + 3  # the shared one, then each start alone
    alone = await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {"refuse": True}},
                           headers={"Idempotency-Key": "alone"})
    assert alone.status_code >= 400, alone.text
    assert [a.status_code for a in answers] == [202, alone.status_code, 202]
    assert answers[1].json() == alone.json()
    with psycopg.connect(db_url) as conn:
        inputs = [row[0] for row in conn.execute(
            "SELECT input FROM executions WHERE NOT input ? 'blocker' ORDER BY id")]
        assert conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 2 + MAX_IN_FLIGHT
    assert inputs == [{"n": 1}, {"n": 2}]
    assert batcher.waiting == 0


async def test_each_tenant_s_starts_go_in_statements_scoped_to_that_tenant(api, db_url):
    ours = await create_agent(api, "acme's")
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    theirs = await create_agent(api, "globex's", headers=globex)
    batcher = api.app.state.run_starts
    with holding(db_url, ours["id"]) as holder:
        blockers = await blocked(api, ours["id"])
        before = batcher.statements
        mixed = [start(api, ours["id"]) if n % 2 else start(api, theirs["id"], headers=globex)
                 for n in range(10)]
        await gathered(api, db_url, blockers, len(mixed))
        holder.rollback()
        answers = await asyncio.gather(*mixed)
        await asyncio.gather(*blockers)
    assert [a.status_code for a in answers] == [202] * 10
    assert batcher.statements - before == 2  # one per tenant
    with psycopg.connect(db_url) as conn:
        stored = queued(conn, [a.json()["id"] for a in answers])
        tenant_of = dict(conn.execute("SELECT id::text, tenant_id::text FROM agents").fetchall())
    for n, answer in enumerate(answers):
        agent_id, tenant_id, _input, tasks = stored[answer.json()["id"]]
        assert agent_id == (ours["id"] if n % 2 else theirs["id"])
        assert (tenant_id, tasks) == (tenant_of[agent_id], 1)


@pytest.mark.parametrize("outcome", ["committed", "rolled back"])
async def test_gathered_starts_wait_for_a_pause_in_flight_and_see_how_it_ended(
        api, db_url, outcome):
    agent = await create_agent(api, "paused-under-a-burst")
    with holding(db_url, agent["id"], "status = 'paused'") as pause:
        blockers = await blocked(api, agent["id"])
        burst = [start(api, agent["id"]) for _ in range(6)]
        await gathered(api, db_url, blockers, len(burst))
        pause.commit() if outcome == "committed" else pause.rollback()
        answers = await asyncio.gather(*blockers, *burst)
    expected = 409 if outcome == "committed" else 202
    assert [a.status_code for a in answers] == [expected] * 8, [a.text for a in answers]
    with psycopg.connect(db_url) as conn:
        runs = conn.execute("SELECT count(*) FROM executions").fetchone()[0]
        tasks = conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0]
    assert (runs, tasks) == ((0, 0) if outcome == "committed" else (8, 8))


async def test_a_statement_holds_a_bounded_text_and_a_start_past_it_goes_alone(
        api, db_url, pool):
    """Under a 3.5 kB bound, starts of ~1.1 kB go three to a statement, and a 5 kB start
    among them goes in a statement of its own, and is made."""
    batcher = api.app.state.run_starts = RunStartBatcher(pool, api.app.state.notifier,
                                                         max_text=3500)
    agent = await create_agent(api, "bounded")
    inputs = [{"n": n, "pad": "x" * 1000} for n in range(3)] + [{"n": 3, "pad": "y" * 5000}] + [
        {"n": n, "pad": "x" * 1000} for n in range(4, 7)]
    with holding(db_url, agent["id"]) as holder:
        blockers = await blocked(api, agent["id"])
        before = batcher.statements
        burst = [start(api, agent["id"], {"input": run_input}) for run_input in inputs]
        await gathered(api, db_url, blockers, len(burst))
        holder.rollback()
        answers = await asyncio.gather(*burst)
        await asyncio.gather(*blockers)
    assert [a.status_code for a in answers] == [202] * 7, [a.text for a in answers]
    assert batcher.statements - before == 3  # three small, the large one, three small
    assert [a.json()["input"] for a in answers] == inputs
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 7 + MAX_IN_FLIGHT


async def test_a_start_that_waits_unsent_past_the_limit_is_refused_and_makes_nothing(
        api, db_url, pool):
    """Both statements wait on a held lock; a third start waits unsent. Past the wait limit it
    is withdrawn and answered 503 (nothing done, so a retry is safe); the starts already in a
    statement wait for it and are made."""
    batcher = api.app.state.run_starts = RunStartBatcher(pool, api.app.state.notifier,
                                                         wait_limit=0.5)
    agent = await create_agent(api, "held-long")
    with holding(db_url, agent["id"]) as holder:
        blockers = await blocked(api, agent["id"])
        late = await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {"late": True}})
        assert not any(blocker.done() for blocker in blockers)
        holder.rollback()
        made = await asyncio.gather(*blockers)
    assert late.status_code == 503, late.text
    assert late.json()["error"] == "database_unavailable"
    assert [answer.status_code for answer in made] == [202] * MAX_IN_FLIGHT
    assert batcher.waiting == 0
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions WHERE input ? 'late'"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == MAX_IN_FLIGHT
