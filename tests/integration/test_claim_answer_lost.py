"""A claim whose answer never reaches the worker (worker/claim_once_more.py).

A claim lost after it was sent may have committed: it is never sent again, and the runs it
started are asked for by the claim's own id and taken over at once. Without that they would stay
running with nobody at work on them until their deadline. A claim that did not commit leaves its
tasks queued for the next claim. Either way each run is claimed, started and finished once.
Around the claim: its runs are delivered as soon as it answers, so a lease that fails after it
does not strand them; and a worker that stops gives up a claim still out when its grace period
ends (one stuck on a row lock here), which rolls back and leaves its task queued. A network cut
leaves the claim running on a server that stays up: its backend is ended before the question,
so the claim cannot commit behind the worker's back.
"""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.factories import queue_runs_at_once, scripted_agent
from tests.integration.test_roles import granted  # noqa: F401 (a fixture)
from tests.integration.workers import all_done, claim_row_held, running_worker, scalar, until
from tickwork.sql import failpoints
from tickwork.sql.db import open_pool

WAITING_CLAIM = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND"
                 " wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                 " AND query LIKE '%%The one statement that starts fresh runs%%'")


def once_each(db_url: str, runs: int) -> None:
    for event in ("run_start", "run_complete"):
        assert scalar(db_url, "SELECT count(*) FROM run_events WHERE type = %s", (event,)) == runs
    assert scalar(db_url, "SELECT count(*) FROM execution_claims") == runs
    assert scalar(db_url, "SELECT count(DISTINCT execution_id) FROM run_events") == runs


async def test_the_runs_of_a_committed_claim_whose_answer_was_lost_are_taken_over_at_once(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    queue_runs_at_once(db_url, agent, 5)
    failpoints.arm("claim.after_commit", "lose")  # every claim's answer is lost on its way back
    try:
        async with running_worker(pool, db_url, concurrency=8):
            # Their deadline is minutes away: finished now means taken over, not swept.
            await until(db_url, all_done(5))
    finally:
        failpoints.disarm_all()
    once_each(db_url, 5)
    assert scalar(db_url, "SELECT count(*) FROM executions WHERE attempt > 1") == 0


async def test_a_claim_killed_before_it_committed_leaves_its_tasks_for_the_next_claim(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    [first] = queue_runs_at_once(db_url, agent, 1, age="1 hour")
    queue_runs_at_once(db_url, agent, 3)
    # The claim that picks the first run waits on an uncommitted claim row of it ...
    with claim_row_held(db_url, first) as release:
        async with running_worker(pool, db_url, concurrency=8):
            await until(db_url, f"SELECT count(*) = 1 FROM ({WAITING_CLAIM}) waiting")
            # ... and its connection is killed there: it rolls back, claiming nothing.
            with psycopg.connect(db_url, autocommit=True) as conn:
                [(pid,)] = conn.execute(WAITING_CLAIM).fetchall()
                assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]
            release()
            await until(db_url, all_done(4))
    once_each(db_url, 4)
    assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 0


async def test_a_claims_runs_are_delivered_even_when_the_lease_after_it_fails(api, pool, db_url):
    agent = await scripted_agent(api, [])
    [run] = queue_runs_at_once(db_url, agent, 1)
    with psycopg.connect(db_url) as conn:
        # A resume task is ready, and leasing it fails (a planted fault): the claim takes the
        # run and leaves a slot free, so the lease that follows it goes out, and fails.
        conn.execute("INSERT INTO queue_tasks (name, kind, execution_id)"
                     " VALUES ('planted-resume', 'resume', %s)", (run,))
        conn.execute("ALTER TABLE queue_tasks ADD CONSTRAINT planted_fault"
                     " CHECK (lease_expires_at IS NULL) NOT VALID")
    async with running_worker(pool, db_url, concurrency=2):
        # Its deadline is minutes away: finished now means delivered, not swept.
        await until(db_url, all_done(1))
    once_each(db_url, 1)


async def test_a_stopping_worker_gives_up_a_claim_stuck_on_a_row_lock_after_its_grace_period(
        api, pool, db_url):
    agent = await scripted_agent(api, [])
    [held] = queue_runs_at_once(db_url, agent, 1)
    with claim_row_held(db_url, held) as release:
        # running_worker waits 60 s for the stop: a worker that waited for its claim fails it.
        async with running_worker(pool, db_url, concurrency=2, shutdown_grace_seconds=1):
            await until(db_url, f"SELECT count(*) = 1 FROM ({WAITING_CLAIM}) waiting")
        # Stopped: the claim was cancelled in the server and rolled back, claiming nothing.
        assert scalar(db_url, f"SELECT count(*) FROM ({WAITING_CLAIM}) waiting") == 0
        assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (held,)) == "queued"
        assert scalar(db_url, "SELECT count(*) FROM queue_tasks") == 1
        release()
    async with running_worker(pool, db_url, concurrency=2):
        await until(db_url, all_done(1))
    once_each(db_url, 1)


class CuttableRelay:
    """A TCP relay to Postgres whose client sides can be cut while its server sides stay open:
    a network cut the server does not see, so its backends go on with what they were sent."""

    def __init__(self, db_url: str) -> None:
        self._server_at = conninfo_to_dict(db_url)
        self._clients: list[asyncio.StreamWriter] = []
        self._servers: list[asyncio.StreamWriter] = []
        self._listening: asyncio.Server | None = None

    async def start(self) -> None:
        self._listening = await asyncio.start_server(self._relay, "127.0.0.1", 0)

    def url(self, db_url: str) -> str:
        return make_conninfo(db_url, host="127.0.0.1",
                             port=self._listening.sockets[0].getsockname()[1])

    def cut(self) -> None:
        for client in self._clients:
            client.transport.abort()

    async def close(self) -> None:
        self._listening.close()
        for writer in self._clients + self._servers:
            writer.transport.abort()

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter):
        server_in, server_out = await asyncio.open_connection(
            self._server_at.get("host", "127.0.0.1"), int(self._server_at.get("port", 5432)))
        self._clients.append(client_out)
        self._servers.append(server_out)
        # Each direction ends on its own; neither closes the other side (the cut is one-sided).
        await asyncio.gather(_pipe(client_in, server_out), _pipe(server_in, client_out),
                             return_exceptions=True)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while data := await source.read(65536):
        sink.write(data)
        await sink.drain()


@contextlib.asynccontextmanager
async def relayed_pool(db_url: str):
    relay = CuttableRelay(db_url)
    await relay.start()
    pool = await open_pool(relay.url(db_url), application_name="tickwork-test-relayed",
                           max_size=4)
    try:
        yield relay, pool
    finally:
        await pool.close()
        await relay.close()


async def test_a_claim_cut_off_by_the_network_cannot_commit_behind_the_workers_back(
        api, db_url, granted):  # noqa: F811 (the fixture)
    agent = await scripted_agent(api, [])
    [held] = queue_runs_at_once(db_url, agent, 1)
    # The worker as it is deployed: its own role, which may end only its own backends.
    async with relayed_pool(granted["tickwork_worker"]) as (relay, pool):
        with claim_row_held(db_url, held) as release:
            async with running_worker(pool, db_url, concurrency=2):
                await until(db_url, f"SELECT count(*) = 1 FROM ({WAITING_CLAIM}) waiting")
                [claim_backend] = scalar(db_url, f"SELECT array_agg(pid) FROM ({WAITING_CLAIM}) w")
                relay.cut()  # the worker's connections drop; the server keeps its ends open
                # The worker asks what its lost claim did, having ended the claim's backend:
                # the claim rolled back while it waited, and its task is still queued.
                await until(db_url, "SELECT NOT EXISTS (SELECT FROM pg_stat_activity"
                                    " WHERE pid = %s)", (claim_backend,))
                assert scalar(db_url, "SELECT status FROM executions WHERE id = %s",
                              (held,)) == "queued"
                release()  # a claim still waiting in the server would now commit, unseen
                # Its deadline is minutes away: finished now means claimed again, not swept.
                await until(db_url, all_done(1))
    once_each(db_url, 1)
