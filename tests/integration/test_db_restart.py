"""A database restart costs no request, no tick and no claim.

Pooled connections the server hung up on are replaced at checkout, and each statement looks
again right before it is sent, neither with a round trip (sql/pool.py); what found its
connection gone before sending anything, or may be repeated whatever it did, runs once more
on a fresh connection (once_more; the API's OnceMore).

Real restarts: a Postgres of the tests' own (tickwork.embedded, as tests/conftest.py starts
one), stopped fast or immediate and started again, under a real `tickwork api` process, the
HTTP tick, and a real `tickwork worker`; the shared server is never restarted. A connection
killed between checkout and its first statement is made exact with the db.after_checkout
failpoint on the suite's server (pg_terminate_backend of the test database's own sessions).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.integration.api_process import ApiProcess, tokens_for
from tickwork.embedded import _pg, start_embedded
from tickwork.scheduler.serialize import utc_text
from tickwork.scheduler.tick import run_tick
from tickwork.sql import failpoints
from tickwork.sql.db import connect_kwargs, open_pool
from tickwork.sql.migrate import migrate
from tickwork.sql.pool import ATTEMPTS, LostBeforeStatement, once_more, retried
from tickwork.worker.claim import claim_queued_runs
from tickwork.worker.claim_once_more import claim_queued_runs_once_more
from tickwork.worker.tools.publish import publish_catalog
from tests.factories import create_agent, make_agent, make_schedules, make_tenant
from tests.integration.workers import WorkerProcess, scalar, until

MODES = ("fast", "immediate")


def terminate_backends(db_url: str, application_name: str) -> int:
    """Kill every session of ``application_name`` in the test database and wait until each
    backend is gone (pg_terminate_backend's timeout argument waits for it)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (application_name,)).fetchone()[0]
    return killed


async def hold_all(pool, count: int) -> list[int]:
    """Check out ``count`` connections at once (so each is a different one) and run a
    statement on each: the backend pids that answered."""
    conns = [await pool.getconn() for _ in range(count)]
    try:
        return [(await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone())["pid"]
                for conn in conns]
    finally:
        for conn in conns:
            await pool.putconn(conn)


# --- a Postgres of our own, restarted for real ----------------------------------------------------

class OwnServer:
    """An embedded Postgres for this module, with a migrated template; a database per test."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tickwork-restart-", dir="/tmp"))
        self.root.chmod(0o755)  # our own folder: the unprivileged server user must traverse it
        self.server = start_embedded(self.root)
        self.template = self.server.url_for("tickwork_restart_template")
        self._admin("CREATE DATABASE tickwork_restart_template")
        migrate(self.template)
        publish_catalog(self.template)
        self._databases = 0

    def _admin(self, statement: str) -> None:
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            conn.execute(statement)

    def database(self) -> str:
        self._databases += 1
        name = f"tickwork_restart_{self._databases}"
        self._admin(f"CREATE DATABASE {name} TEMPLATE tickwork_restart_template")
        return self.server.url_for(name)

    def restart(self, mode: str) -> float:
        """Stop the server (-m fast: every session gets its FATAL goodbye; -m immediate: the
        backends are killed, and the start recovers from the crash) and start it again on the
        same port. Returns the seconds it was away."""
        started = time.perf_counter()
        _pg(self.root, "pg_ctl", "stop", "-w", "-t", "30", "-m", mode,
            "-D", str(self.server.data_dir))
        port = self.server.port
        self.server = start_embedded(self.root)
        assert self.server.port == port  # the processes' URL still points at it
        return time.perf_counter() - started

    def close(self) -> None:
        self.server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def own_server():
    server = OwnServer()
    try:
        yield server
    finally:
        server.close()


def client(api: ApiProcess, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=api.base_url, timeout=120,
                             headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize("mode", MODES)
async def test_every_pooled_connection_dead_at_once_and_the_first_request_on_each_is_answered(
        own_server, mode):
    url = own_server.database()
    tokens = await tokens_for(url)
    api = ApiProcess(url, own_server.root, TICKWORK_POOL_MIN_SIZE="6",
                     TICKWORK_POOL_MAX_SIZE="6")
    try:
        await api.ready()
        async with client(api, tokens["admin"]) as http:
            agent = (await create_agent(http))["id"]
            assert scalar(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                               " 'tickwork-api' AND datname = current_database()") == 6  # pool
            own_server.restart(mode)  # all six pooled sessions die together
            answers = await asyncio.gather(
                *[http.get("/v1/agents") for _ in range(3)],
                *[http.post(f"/v1/agents/{agent}/runs", json={"input": {}}) for _ in range(3)])
        assert [r.status_code for r in answers] == [200] * 3 + [202] * 3
        assert scalar(url, "SELECT count(*) FROM executions") == 3
    finally:
        assert api.stop() == 0
    # The checkout replaced every dead connection: no statement met one, none was retried
    # (the log is the process's own: it saw the restart, its tail listener lost its session).
    log = api.log()
    assert "tail_listener_lost" in log
    assert "database_error" not in log and "retried_on_fresh_connection" not in log


@pytest.mark.parametrize("mode", MODES)
async def test_requests_in_flight_through_a_restart_are_all_answered_and_each_key_makes_one_run(
        own_server, mode):
    url = own_server.database()
    tokens = await tokens_for(url)
    api = ApiProcess(url, own_server.root, TICKWORK_POOL_MIN_SIZE="4")
    answered: list[tuple[str, int, str | None]] = []  # (what, status, key)
    try:
        await api.ready()
        async with client(api, tokens["admin"]) as http:
            agent = (await create_agent(http))["id"]
            warm, restarted = asyncio.Event(), asyncio.Event()

            async def reads(n: int) -> None:
                after = 0
                while after < 15:
                    response = await http.get("/v1/runs", params={"limit": 5})
                    answered.append(("read", response.status_code, None))
                    after += restarted.is_set()
                    if len(answered) >= 20:
                        warm.set()

            async def keyed_starts(n: int) -> None:
                after, i = 0, 0
                while after < 15:
                    i += 1
                    key = f"loop{n}-{i}"
                    response = await http.post(f"/v1/agents/{agent}/runs", json={"input": {}},
                                               headers={"Idempotency-Key": key})
                    answered.append((response.json().get("id"), response.status_code, key))
                    after += restarted.is_set()

            loops = [asyncio.create_task(reads(n)) for n in range(2)] + [
                asyncio.create_task(keyed_starts(n)) for n in range(2)]
            await warm.wait()
            await asyncio.to_thread(own_server.restart, mode)
            restarted.set()
            try:
                await asyncio.gather(*loops)
            except httpx.TransportError as exc:
                raise AssertionError(f"{exc!r}; the API's log:\n{api.log()[-30000:]}") from exc
    finally:
        assert api.stop() == 0
    statuses = {status for _, status, _ in answered}
    assert statuses <= {200, 202}, ([a for a in answered if a[1] not in (200, 202)],
                                    api.log()[-20000:])
    starts = {key: run_id for run_id, _, key in answered if key}
    with psycopg.connect(url) as conn:
        made = dict(conn.execute("SELECT idempotency_key, id::text FROM executions").fetchall())
    assert made == starts  # every key answered made exactly one run, the one it was told of


@pytest.mark.parametrize("mode", MODES)
async def test_the_http_tick_after_a_restart_creates_each_due_execution_once(own_server, mode):
    url = own_server.database()
    tokens = await tokens_for(url)
    api = ApiProcess(url, own_server.root, TICKWORK_POOL_MIN_SIZE="3")
    at = (datetime.now(timezone.utc) + timedelta(hours=2)).replace(minute=0, second=30,
                                                                   microsecond=0)
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    try:
        await api.ready()
        async with client(api, tokens["admin"]) as http:
            agent = (await create_agent(http))["id"]
            for cron in ("* * * * *", "*/5 * * * *", "0 * * * *"):
                response = await http.post("/v1/schedules", json={"agent_id": agent, "cron": cron})
                assert response.status_code == 201, response.text
        async with client(api, tokens["operator"]) as http:
            # Every pooled connection used, by a tick an hour back: nothing is due then, so it
            # cannot fire a schedule whose first minute came while this test set up (which
            # would leave that schedule's run unfinished and the tick below skipping it).
            before = (await http.post("/v1/tick", json={"at": utc_text(an_hour_ago)})).json()
            assert (before["ok"], before["dispatch"]["created"]) == (True, 0)
            own_server.restart(mode)
            first = (await http.post("/v1/tick", json={"at": utc_text(at)})).json()
            again = (await http.post("/v1/tick", json={"at": utc_text(at)})).json()
    finally:
        assert api.stop() == 0
    assert (first["ok"], first["error"], first["dispatch"]["created"]) == (True, None, 3)
    assert (again["ok"], again["dispatch"]["created"]) == (True, 0)
    assert scalar(url, "SELECT count(*) FROM executions") == 3


@pytest.mark.parametrize("mode", MODES)
async def test_a_worker_whose_pooled_connections_died_claims_each_run_once(own_server, mode):
    url = own_server.database()
    with psycopg.connect(url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
    worker = WorkerProcess(url, concurrency=4, TICKWORK_POOL_MIN_SIZE="4")
    try:
        await until(url, "SELECT count(*) >= 4 FROM pg_stat_activity WHERE application_name ="
                         " 'tickwork-worker' AND datname = current_database()")
        own_server.restart(mode)
        with psycopg.connect(url) as conn:
            for _ in range(6):
                conn.execute(
                    "WITH run AS (INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                    " trigger_source, scheduled_for, input) VALUES (gen_random_uuid(), %s, %s,"
                    " 'run', 'api', now(), '{\"script\": [{\"text\": \"done\"}]}')"
                    " RETURNING id) INSERT INTO queue_tasks (name, kind, execution_id)"
                    " SELECT id::text, 'run', id FROM run", (tenant, agent))
            conn.execute("NOTIFY tickwork_tasks")
        await until(url, "SELECT count(*) = 6 FROM executions WHERE status = 'completed'",
                    timeout=120)
    finally:
        assert worker.terminate() == 0
    assert scalar(url, "SELECT count(*) FROM executions") == 6  # no retry was needed
    assert scalar(url, "SELECT count(*) FROM execution_claims") == 6
    assert scalar(url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == 6
    assert scalar(url, "SELECT count(*) FROM run_events WHERE type = 'run_complete'") == 6


# --- a connection killed between checkout and its first statement ---------------------------------

@contextmanager
def checkout_gate():
    """Arm db.after_checkout: the next checkout stops right after its test until released."""
    failpoints.arm("db.after_checkout", "block:after_checkout")
    try:
        yield
    finally:
        failpoints.disarm_all()


async def kill_at_the_gate(db_url: str, times: int = 1) -> None:
    """Once a checkout waits at the gate, kill every pooled session (the one checked out too:
    it passed its checkout test alive) and let the checkout go on to its first statement;
    ``times`` over: each checkout in turn (the first, then each fresh one its retry takes)."""
    for n in range(1, times + 1):
        gate = "after_checkout" if n == 1 else f"after_checkout_{n}"
        await failpoints.wait_reached(gate)
        assert terminate_backends(db_url, "tickwork-test") >= 1
        failpoints.arm("db.after_checkout",
                       f"block:after_checkout_{n + 1}" if n < times else "sleep:0")
        failpoints.release(gate)


async def test_a_run_start_whose_connection_died_after_checkout_runs_once_on_a_fresh_one(
        api, db_url):
    agent = (await create_agent(api))["id"]
    before = dict(retried)
    with checkout_gate():
        start = asyncio.create_task(api.post(f"/v1/agents/{agent}/runs", json={"input": {}}))
        await kill_at_the_gate(db_url)
        response = await start
    # Not repeatable (no key), but nothing of it had been sent: run once more, made once.
    assert response.status_code == 202, response.text
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1
    assert retried["unsent"] == before["unsent"] + 1


async def test_a_run_start_whose_fresh_connection_died_too_runs_once_on_a_third(api, db_url):
    # A restart's goodbyes reach the pool's sessions some milliseconds apart: the retry's
    # fresh connection may be the next to go. Each attempt that sent nothing is run again.
    agent = (await create_agent(api))["id"]
    before = dict(retried)
    with checkout_gate():
        start = asyncio.create_task(api.post(f"/v1/agents/{agent}/runs", json={"input": {}}))
        await kill_at_the_gate(db_url, times=2)
        response = await start
    assert response.status_code == 202, response.text
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1
    assert retried["unsent"] == before["unsent"] + 2


async def test_a_run_start_lost_on_every_attempt_is_a_503_and_makes_nothing(api, db_url):
    agent = (await create_agent(api))["id"]
    with checkout_gate():
        start = asyncio.create_task(api.post(f"/v1/agents/{agent}/runs", json={"input": {}}))
        await kill_at_the_gate(db_url, times=ATTEMPTS)
        response = await start
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable"
    assert scalar(db_url, "SELECT count(*) FROM executions") == 0


async def test_a_tick_whose_connection_died_before_its_first_statement_runs_and_fires_once(
        pool, db_url, settings):
    at = datetime(2027, 3, 1, 9, 0, 30, tzinfo=timezone.utc)
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        make_schedules(conn, tenant, make_agent(conn, tenant),
                       [("* * * * *", at - timedelta(seconds=30)),
                        ("0 9 * * *", at - timedelta(seconds=30))])
    with checkout_gate():
        tick = asyncio.create_task(run_tick(pool, settings, now=at))
        await kill_at_the_gate(db_url)
        outcome = await tick
    assert (outcome.ok, outcome.error, outcome.dispatch.created) == (True, None, 2)
    assert scalar(db_url, "SELECT count(*) FROM executions") == 2
    assert (await run_tick(pool, settings, now=at)).dispatch.created == 0


def queued_run(db_url: str):
    """A run queued for a worker, as the API queues one: its execution and its task."""
    with psycopg.connect(db_url) as conn:
        tenant = make_tenant(conn)
        agent = make_agent(conn, tenant)
        run = conn.execute("INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
                           " trigger_source, scheduled_for) VALUES (gen_random_uuid(), %s, %s,"
                           " 'run', 'api', now()) RETURNING id", (tenant, agent)).fetchone()[0]
        conn.execute("INSERT INTO queue_tasks (name, kind, execution_id) VALUES (%s, 'run', %s)",
                     (str(run), run))
    return run


async def test_a_claim_whose_connection_died_after_checkout_claims_the_run_once(pool, db_url):
    run = queued_run(db_url)
    with checkout_gate():
        claim = asyncio.create_task(claim_queued_runs_once_more(pool, limit=4, worker_id="test"))
        await kill_at_the_gate(db_url)
        assert [c.id for c in await claim] == [run]
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == 1
    assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = 'run_start'") == 1
    assert await claim_queued_runs(pool, limit=4, worker_id="test") == []


async def test_without_the_wrapper_that_claim_fails_before_sending_and_claims_nothing(
        pool, db_url):
    # What the wrapper is for (worker/runner.py claims through it): without it the
    # statement is refused before it is sent, so the run is still queued for the next poll.
    run = queued_run(db_url)
    with checkout_gate():
        claim = asyncio.create_task(claim_queued_runs(pool, limit=4, worker_id="test"))
        await kill_at_the_gate(db_url)
        with pytest.raises(LostBeforeStatement):
            await claim
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == 0
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run,)) == "queued"


async def test_a_statement_lost_after_it_was_sent_is_run_again_only_when_repeatable(pool, db_url):
    # It may have committed: an operation that is not safe to repeat is never run twice; one
    # that is (a read) runs once more and answers.
    calls = {"unsafe": 0, "read": 0}

    def killed_in_flight(kind: str):
        async def operation():
            calls[kind] += 1
            async with pool.connection() as conn:
                if calls[kind] == 1:
                    pid = conn.info.backend_pid
                    killer = asyncio.create_task(kill_while_running(db_url, pid))
                    try:
                        await conn.execute("SELECT pg_sleep(30)")
                    finally:
                        await killer
                return (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"]
        return operation

    with pytest.raises(psycopg.OperationalError) as lost:
        await once_more(killed_in_flight("unsafe"))
    assert not isinstance(lost.value, LostBeforeStatement)
    assert calls["unsafe"] == 1
    assert await once_more(killed_in_flight("read"), repeatable=True) == 1
    assert calls["read"] == 2


async def test_a_read_lost_in_flight_on_two_connections_in_a_row_answers_on_a_third(
        pool, db_url):
    calls = 0

    async def read() -> int:
        nonlocal calls
        calls += 1
        async with pool.connection() as conn:
            if calls < 3:
                killer = asyncio.create_task(kill_while_running(db_url, conn.info.backend_pid))
                try:
                    await conn.execute("SELECT pg_sleep(30)")
                finally:
                    await killer
            return (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"]

    assert await once_more(read, repeatable=True) == 1
    assert calls == 3


async def kill_while_running(db_url: str, pid: int) -> None:
    """Terminate backend ``pid`` once it is running its statement (pg_stat_activity says so)."""
    while scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state ="
                         " 'active'", (pid,)) == 0:
        await asyncio.sleep(0.01)
    terminate_backends_by_pid(db_url, pid)


def terminate_backends_by_pid(db_url: str, pid: int) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]


# --- the checkout test, with pg_terminate_backend on the suite's server ---------------------------

async def test_every_pooled_connection_killed_is_replaced_before_its_next_statement(db_url):
    pool = await open_pool(db_url, application_name="tickwork-test-restart", min_size=3,
                           max_size=3)
    try:
        before = await hold_all(pool, 3)
        assert terminate_backends(db_url, "tickwork-test-restart") == 3
        after = await hold_all(pool, 3)  # no statement fails
        assert pool.replaced_dead == 3
        assert not set(before) & set(after)
        assert await hold_all(pool, 3)  # the fresh ones stay: nothing more replaced
        assert pool.replaced_dead == 3
    finally:
        await pool.close()


async def test_a_plain_pool_without_the_checkout_test_fails_the_first_statement(db_url):
    """What the pool fixes: psycopg_pool without a check hands out the dead connection."""
    pool = AsyncConnectionPool(db_url, min_size=1, max_size=1, open=False,
                               kwargs=connect_kwargs("tickwork-test-plain"))
    await pool.open(wait=True)
    try:
        await hold_all(pool, 1)
        assert terminate_backends(db_url, "tickwork-test-plain") == 1
        with pytest.raises(psycopg.OperationalError):
            await hold_all(pool, 1)
    finally:
        await pool.close()


async def test_the_first_api_requests_after_a_restart_succeed(api, pool, db_url):
    assert (await api.get("/v1/agents")).status_code == 200
    await hold_all(pool, 4)  # four pooled connections for the requests below to meet
    assert terminate_backends(db_url, "tickwork-test") >= 4
    statuses = [(await api.get("/v1/agents")).status_code for _ in range(6)]
    assert statuses == [200] * 6
    assert pool.replaced_dead >= 1


async def test_a_tick_and_a_worker_claim_after_their_connections_were_killed_succeed(
        pool, db_url, settings):
    await hold_all(pool, 4)
    assert terminate_backends(db_url, "tickwork-test") >= 4
    outcome = await run_tick(pool, settings)
    assert (outcome.ok, outcome.error) == (True, None)
    assert terminate_backends(db_url, "tickwork-test") >= 1
    assert await claim_queued_runs(pool, limit=4, worker_id="test") == []
    assert pool.replaced_dead >= 2
