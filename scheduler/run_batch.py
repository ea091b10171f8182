"""Run starts of many requests in one statement: the API's group commit for bursts.

A keyless run start (POST /v1/agents/{id}/runs without an Idempotency-Key) is a few inserts;
its statement's commit, its function call and its FOR SHARE of the agent cost more than the
inserts themselves, and a burst of clients paid them once per run. The API process's
RunStartBatcher gathers the starts that arrive while earlier ones are being written and writes
each tenant's gathered starts with one insert_agent_runs statement (migration 0061), one
commit, then wakes workers once. The first start of a quiet moment goes at once, alone: nothing
waits for company, only behind statements already in flight.

Each start keeps its own answer: its run, or its own refusal (no such agent, a paused agent).
A statement that Postgres refuses for what one start carried (a data or integrity error:
a constraint, a value it cannot store) is written again one start at a time, so one request's
row never fails another's. A statement whose connection was found gone before it was sent runs
once more on a fresh one (sql.pool.once_more); one lost after it was sent may have committed,
and each of its starts gets the error, as a lone start would.

A start that waited as long as a request would have waited for a pooled connection of its own
(the pool's timeout) without being sent is withdrawn and answered 503 (nothing was done, so a
retry is safe); one already in a statement waits for that statement's outcome.

Starts with an Idempotency-Key go alone through start_agent_run (scheduler/runs.py): a key's
replay reads what an earlier statement committed, which a shared statement would complicate
for no gain (keys are for retries, not bursts).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from tickwork.scheduler.agents import agent_not_found
from tickwork.scheduler.runs import API_RUN, AgentPaused, public_run
from tickwork.sql import QUERIES
from tickwork.sql.db import execute_as_tenant, once_more
from tickwork.sql.ids import new_id
from tickwork.sql.notify import Notifier

# Starts per statement: a 64-client burst fits in one; one statement's locks stay short.
MAX_STARTS_PER_STATEMENT = 128
# And their inputs' text per statement: a body may be 1 MiB, and 128 of them in one statement
# would hold 128 MiB in the API and in Postgres at once. A start larger than this goes alone.
MAX_TEXT_PER_STATEMENT = 4 * 1024 * 1024
# Statements in flight at once: one executing while another commits.
MAX_IN_FLIGHT = 2


@dataclass(slots=True, eq=False)  # a start is itself: compared by identity
class _Start:
    run_id: UUID
    element: str  # its element of the statement's runs array, as JSON text
    answer: asyncio.Future


class RunStartBatcher:
    """The API process's writer of keyless run starts (see the module's note)."""

    def __init__(self, pool: AsyncConnectionPool, notifier: Notifier, *,
                 max_starts: int = MAX_STARTS_PER_STATEMENT,
                 max_text: int = MAX_TEXT_PER_STATEMENT,
                 max_in_flight: int = MAX_IN_FLIGHT, wait_limit: float | None = None) -> None:
        """wait_limit: seconds a start may wait unsent (default: the pool's timeout, as long as
        a request would have waited for a pooled connection of its own)."""
        self._pool, self._notifier = pool, notifier
        self._max, self._max_text, self._slots = max_starts, max_text, max_in_flight
        self._wait_limit = wait_limit if wait_limit is not None else pool.timeout
        self._pending: dict[UUID, list[_Start]] = {}  # by tenant, oldest tenant first
        self._in_flight = 0
        self._writes: set[asyncio.Task] = set()
        self.statements = 0  # insert_agent_runs statements sent (tests count the batching)

    async def start(self, tenant_id: UUID, agent_id: UUID, *, run_input: dict[str, Any],
                    timeout_minutes: int) -> dict[str, Any]:
        """Queue a run of the tenant's agent (trigger run, source api); its public form once
        committed. Raises NotFound (no such agent), AgentPaused, or the statement's error."""
        run_id = new_id()
        # The input as psycopg's Jsonb would send it (json.dumps), so Postgres reads and
        # refuses exactly what a lone start would have sent.
        element = (f'{{"id":"{run_id}","agent_id":"{agent_id}",'
                   f'"timeout_minutes":{int(timeout_minutes)},"input":{json.dumps(run_input)}}}')
        answer = asyncio.get_running_loop().create_future()
        mine = _Start(run_id, element, answer)
        self._pending.setdefault(tenant_id, []).append(mine)
        self._kick()
        try:
            async with asyncio.timeout(self._wait_limit):
                row = await asyncio.shield(answer)
        except TimeoutError:
            if self._withdraw(tenant_id, mine):  # never sent: nothing was done
                raise PoolTimeout(f"the run start waited {self._wait_limit:g} s for a "
                                  "statement and was not sent") from None
            row = await answer  # in a statement already: its outcome is this start's
        if row["agent_status"] is None:
            raise agent_not_found(agent_id)
        if row["id"] is None:
            raise AgentPaused(agent_id)
        return public_run(row)

    @property
    def waiting(self) -> int:
        """Starts handed over and not yet in a statement."""
        return sum(len(starts) for starts in self._pending.values())

    def _withdraw(self, tenant_id: UUID, start: _Start) -> bool:
        """Take a start that is still waiting out of the queue; False once it is in a
        statement."""
        waiting = self._pending.get(tenant_id, [])
        if start not in waiting:
            return False
        waiting.remove(start)
        if not waiting:
            del self._pending[tenant_id]
        return True

    async def drain(self) -> None:
        """Until every start handed over so far is written (or has failed)."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def _kick(self) -> None:
        while self._pending and self._in_flight < self._slots:
            tenant_id = next(iter(self._pending))
            starts = self._pending.pop(tenant_id)
            taken = self._fitting(starts)
            if taken < len(starts):  # the rest waits its turn behind other tenants
                self._pending[tenant_id] = starts[taken:]
                starts = starts[:taken]
            self._in_flight += 1
            # A context of its own: the statement is no request's, so no request's statement
            # watch (sql.pool.watching, the API's OnceMore) counts it.
            task = asyncio.get_running_loop().create_task(
                self._write(tenant_id, starts), context=contextvars.Context())
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    def _fitting(self, starts: list[_Start]) -> int:
        """How many of the first starts go in one statement (always at least one)."""
        text = 0
        for count, start in enumerate(starts[:self._max]):
            text += len(start.element)
            if text > self._max_text and count > 0:
                return count
        return min(len(starts), self._max)

    async def _write(self, tenant_id: UUID, starts: list[_Start]) -> None:
        try:
            try:
                await self._written(tenant_id, starts)
            except (psycopg.DataError, psycopg.IntegrityError):
                if len(starts) == 1:
                    raise
                for start in starts:  # one start's input must not fail the others
                    try:
                        await self._written(tenant_id, [start])
                    except Exception as exc:
                        _fail([start], exc)
        except Exception as exc:
            _fail(starts, exc)
        finally:
            self._in_flight -= 1
            self._kick()

    async def _written(self, tenant_id: UUID, starts: list[_Start]) -> None:
        params = {**API_RUN, "runs": "[" + ",".join(start.element for start in starts) + "]"}

        async def statement() -> list[dict[str, Any]]:
            async with self._pool.connection() as conn:
                self.statements += 1
                cursor = await execute_as_tenant(conn, tenant_id, QUERIES["insert_agent_runs"],
                                                 params)
                return await cursor.fetchall()

        rows = await once_more(statement, name="insert_agent_runs")
        found = {row["request_id"]: row for row in rows}
        if any(row["id"] is not None for row in rows):
            self._notifier.tasks_queued("run")  # committed: the implicit transaction ended
        for start in starts:
            if not start.answer.done():  # a request whose client hung up is cancelled
                start.answer.set_result(found[start.run_id])


def _fail(starts: list[_Start], exc: BaseException) -> None:
    for start in starts:
        if not start.answer.done():
            start.answer.set_exception(exc)
