"""An approved call and a person's cancel never overlap: a cancel committed before the call
starts means the call never runs, and a cancel that arrives while it runs commits after it.

Approve and cancel can race: the decision queues the resume, a worker takes the run back to
running, and a cancel that lands now only asks the running run to stop, at its next turn
boundary, which comes after the approved call. So before it runs the call, the resume takes a
shared session lock keyed by the run on a connection of its own (not the pool's: the call
itself may need every pooled connection) and reads whether a cancel was committed; it keeps the
lock until the call has ended. A cancel takes the same key exclusively in its transaction
(scheduler/runs.py cancel_run), so it waits for a call in progress, and a call waits for a
cancel in progress and then sees it. Approved calls are made at a person's pace: one short-lived
connection each costs nothing that matters."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.db import connect, reconnecting

_connect = reconnecting(connect)  # through a Postgres restart, as the pool's connections are


@asynccontextmanager
async def approved_call_fence(pool: AsyncConnectionPool,
                              execution_id: UUID) -> AsyncIterator[bool]:
    """Yield whether the run was cancelled; while inside, no cancel of the run can commit."""
    conn = await _connect(pool.conninfo, application_name="tickwork-worker-fence")
    try:
        params = {"execution_id": execution_id}
        await conn.execute(QUERIES["lock_approved_call_shared"], params)
        row = await (await conn.execute(QUERIES["get_execution_cancel_requested"],
                                        params)).fetchone()
        yield row is None or row["cancelled"]
    finally:
        await conn.close()  # the session lock ends with the session
