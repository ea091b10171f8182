"""The run journal: each run's writer (RunJournal), the process's one batching writer that
lands every run's events and verdicts (JournalWriter), and the reader.

A run has one writer at a time (the worker holding its run token), which numbers events
itself: seq 1 is run_start (written with the claim), and every later event takes the next
number. Every append fences: a run's events land only while its execution is running with its
token (a share lock on the row), so an append after the sweep's verdict writes nothing, and the
sweep's terminal event, numbered max(seq) + 1 under its own row lock, always comes last.

Many runs, one statement: a worker holds thousands of runs in flight, and every commit that
wakes tails (NOTIFY) takes Postgres's one notify-queue lock through its WAL flush, so commits
of one run each queue behind each other. The process's JournalWriter therefore writes the
pending events of many runs, and the verdicts of the runs that end, in one statement
(insert_journal_batch), one commit, and then wakes those runs' tails through the process's
Notifier (sql/notify.py: after the commit, never inside it). It is a group commit: while one
batch is in flight the next gathers.

Visible as it happens: an emitted event does not wait for the run's next explicit flush (a
turn can be a long model call or a slow tool). The first emit into an idle buffer asks the
writer for a background write after a short linger (so the events of one burst share one
statement); an explicit flush or a finish goes in the next batch without lingering. A run is
in at most one statement at a time and each takes everything it has buffered, so its batches
land in seq order. A fence found in the background is kept and raised at the run's next
flush, finish, suspend or release. A pooled connection is taken only for the statement itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable
from uuid import UUID

import orjson
import psycopg
from psycopg import AsyncConnection
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES, failpoints
from tickwork.sql.db import HOT_PATH, reconnecting
from tickwork.sql.lifecycle import release_run
from tickwork.sql.notify import Notifier
from tickwork.sql.vocabulary import EventType, FinalStatus, Outcome, check_event_type

# Emission -> background write: latency is counted from the emission, so an event waiting here
# counts. Long enough that a burst (content_delta, tool_start, tool_complete ...) is one append;
# a turn's step_start goes alone either way (the model call follows it), and many runs still
# share each statement (the group commit). 0.05 made the tail's p99 (bench/tail.py) > 100 ms.
LINGER_SECONDS = 0.02
# Runs per statement: large enough that thousands of runs ending together take a few commits,
# small enough that one statement's locks and rows stay short.
MAX_RUNS_PER_BATCH = 256
# Statements in flight at once: one executing while another commits (they serialize on the
# notify lock at commit, not before it).
MAX_IN_FLIGHT = 2


class RunFenced(Exception):
    """The run is no longer ours to write: the sweep judged it, or it finished elsewhere."""


@dataclass(slots=True)
class PendingEvent:
    seq: int
    parent_seq: int | None
    type: EventType
    payload_json: str  # the payload as stored: encoded once, at emit (redacted by the caller's)


@dataclass(frozen=True)
class Verdict:
    """How a run ended, written with its last events in the same statement."""
    status: FinalStatus
    outcome: Outcome | None
    reason: str | None
    usage: dict[str, int] | None  # the run's whole usage; None leaves the column as it is
    answer: str | None = None  # the run's final answer as shown (redacted by the caller)


@dataclass(frozen=True)
class Landed:
    """What one run's part of a batch found: whether the run was still ours (running with its
    token), whether its verdict was recorded, and whether a person asked it to stop."""
    running: bool
    finished: bool
    cancel_requested: bool


_FENCED = Landed(running=False, finished=False, cancel_requested=False)


@dataclass
class _Item:
    """One run's part of a batch: what it had buffered when the batch was formed (the first
    `count` events), its verdict if it is ending, and who waits for the write."""
    journal: RunJournal
    count: int
    verdict: Verdict | None
    waiters: list[asyncio.Future]
    encoded: str


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str | None) -> str | None:
    """Text Postgres can store (NUL and lone UTF-16 surrogates become U+FFFD): a run's failure
    reason can quote anything an exception said."""
    return None if text is None else _UNSTORABLE.sub("\ufffd", text)


def storable(value: Any) -> Any:
    """A JSON-like value whose every string and key is storable_text."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    return value


def plain_json(payload: Any) -> str:
    """A payload's JSON text as stored, unredacted (RunJournal's default; the worker passes
    its redacting encoder, worker.redact.journal_json)."""
    try:
        return orjson.dumps(payload).decode()
    except TypeError:  # a lone surrogate, a key that is not text, an integer past 64 bits
        return json.dumps(storable(payload), ensure_ascii=False, separators=(",", ":"))


def _event_json(event: PendingEvent) -> str:
    # The payload is already JSON text; the type is a vocabulary word (check_event_type).
    parent = "null" if event.parent_seq is None else int(event.parent_seq)
    return (f'{{"seq":{int(event.seq)},"parent_seq":{parent},"type":"{event.type}",'
            f'"payload":{event.payload_json}}}')


def _encode(journal: RunJournal, events: list[PendingEvent], verdict: Verdict | None) -> str:
    """One run's object of the batch that insert_journal_batch reads with jsonb_to_recordset.
    The whole batch goes as one JSON text (dumping a typed array per column, element by
    element, was the largest share of the worker's CPU per run), built from the payloads'
    texts, so no payload is encoded twice."""
    run: dict[str, Any] = {"id": journal.id_text, "run_token": journal.token_text,
                           "finish": verdict is not None}
    if verdict is not None:
        run.update(status=verdict.status, outcome=verdict.outcome, reason=verdict.reason,
                   usage=verdict.usage, answer=verdict.answer)
    head = orjson.dumps(run).decode()
    return f'{head[:-1]},"events":[{",".join(_event_json(event) for event in events)}]}}'


@reconnecting
async def write_batch(pool: AsyncConnectionPool, runs: list[str]) -> dict[str, Landed]:
    """One insert_journal_batch statement for the runs (each one's JSON object): what each
    run's part found. A run missing from the answer was fenced. Retried while Postgres
    restarts: the events are idempotent and the fence refuses a second verdict."""
    async with pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(QUERIES["insert_journal_batch"],
                             {"runs": "[" + ",".join(runs) + "]"}, **HOT_PATH)
        # Keyed by the id's text: plain tuples and no uuid per run on the hot path.
        return {run_id: Landed(True, finished, cancel_requested)
                for run_id, finished, cancel_requested in await cursor.fetchall()}


class JournalWriter:
    """The process's one writer of journals: batches the background appends, explicit flushes
    and verdicts of every run into shared statements (see the module's docstring). It needs no
    closing: its task ends whenever nothing is left to write."""

    def __init__(self, pool: AsyncConnectionPool, *, notifier: Notifier | None = None,
                 linger_seconds: float = LINGER_SECONDS, max_runs: int = MAX_RUNS_PER_BATCH,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        """notifier: the process's (the runs' claims wake tails through it too); None makes one."""
        self._pool, self._linger, self._max = pool, linger_seconds, max_runs
        self.notifier = notifier or Notifier(pool)
        self._slots = asyncio.Semaphore(max_in_flight)
        # Runs with something to write: now (a flush or a finish waits), or once their
        # linger is over (insertion order is due order, the linger being one constant).
        self._urgent: dict[RunJournal, None] = {}
        self._later: dict[RunJournal, float] = {}
        self._wake = asyncio.Event()  # a run was added, or a write ended
        self._landed = asyncio.Event()  # a write ended (background_idle waits on it)
        self._task: asyncio.Task | None = None
        self._writes: set[asyncio.Task] = set()
        self.statements = 0  # statements written (tests count the batching with it)

    def soon(self, journal: RunJournal) -> None:
        """A background write of the run's buffer after the linger (no-op when already due)."""
        if journal not in self._urgent and journal not in self._later:
            self._later[journal] = time.monotonic() + self._linger
            self._kick()

    def now(self, journal: RunJournal) -> asyncio.Future:
        """The run's buffer (and verdict, if set) in the next batch; the future is done once
        it is written (its result is what the run's part found)."""
        waiter = asyncio.get_running_loop().create_future()
        journal._waiters.append(waiter)
        self._later.pop(journal, None)
        self._urgent[journal] = None
        self._kick()
        return waiter

    def forget(self, journal: RunJournal) -> None:
        """The run writes its buffer itself (suspend, release): drop it from the queue."""
        self._urgent.pop(journal, None)
        self._later.pop(journal, None)

    def pending(self, journal: RunJournal) -> bool:
        return journal in self._urgent or journal in self._later or journal._busy is not None

    async def landed(self) -> None:
        """Until the next write ends."""
        await self._landed.wait()

    async def close(self) -> None:
        """Write what is queued now (nothing is dropped) and send its wake-ups, then stop."""
        for journal in list(self._later):
            self._urgent[journal] = None
        self._later.clear()
        self._kick()
        while self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)
        await self.notifier.drain()

    def _kick(self) -> None:
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._urgent or self._later or self._writes:
            self._wake.clear()
            if not self._slots.locked():
                batch = self._take()
                if batch:
                    await self._slots.acquire()  # free: does not wait
                    self._writes.add(asyncio.get_running_loop().create_task(self._write(batch)))
                    continue
            # Nothing to write now: wait for a new run, a write's end (a slot, or a run that
            # was in flight), or the end of the next linger.
            timeout = None
            if self._later:
                due = next(iter(self._later.values())) - time.monotonic()
                timeout = due if due > 0 else None  # due but in flight: a write's end wakes
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _take(self) -> list[_Item]:
        """The runs to write now, up to a batch, once one is urgent or its linger is over:
        then every queued run goes (a group commit: a run whose linger is not over yet only
        lands sooner). A run already in a statement stays queued for the next."""
        batch: list[_Item] = []
        if not self._urgent and not (
                self._later and next(iter(self._later.values())) <= time.monotonic()):
            return batch
        for queue in (self._urgent, self._later):
            for journal in list(queue):
                if len(batch) >= self._max:
                    return batch
                if journal._busy is None:
                    del queue[journal]
                    self._add(batch, journal)
        return batch

    def _add(self, batch: list[_Item], journal: RunJournal) -> None:
        waiters, journal._waiters = journal._waiters, []
        verdict, journal._verdict = journal._verdict, None
        events = list(journal._pending)
        if journal._fenced or journal._exclusive or (not events and verdict is None):
            for waiter in waiters:  # nothing to write: the run learns its state from itself
                if not waiter.done():
                    waiter.set_result(None)
            return
        try:
            encoded = _encode(journal, events, verdict)
        except Exception as exc:  # this run's own payload; the others are written
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        journal._busy = asyncio.get_running_loop().create_future()
        batch.append(_Item(journal, len(events), verdict, waiters, encoded))

    async def _write(self, batch: list[_Item]) -> None:
        """Write batches while runs are due: the next batch is taken as soon as one lands, in
        this task, rather than one event-loop round later (with thousands of runs ready, a
        round of the loop is long)."""
        try:
            while batch:
                try:
                    await self._write_isolated(batch)
                finally:
                    for item in batch:
                        busy, item.journal._busy = item.journal._busy, None
                        if busy is not None and not busy.done():
                            busy.set_result(None)
                    self._landed.set()
                    self._landed = asyncio.Event()
                batch = self._take()
        finally:
            self._writes.discard(asyncio.current_task())
            self._slots.release()
            self._wake.set()

    async def _write_isolated(self, batch: list[_Item]) -> None:
        """Write the batch; if Postgres refuses it for a reason other than a restart, write
        each run alone, so that one run's bad event does not fail the others."""
        try:
            found = await write_batch(self._pool, [item.encoded for item in batch])
            self.statements += 1
        except psycopg.Error as exc:
            if len(batch) == 1 or isinstance(exc, psycopg.OperationalError):
                return self._failed(batch, exc)
            for item in batch:
                await self._write_isolated([item])
            return
        except Exception as exc:  # every waiter learns what went wrong
            return self._failed(batch, exc)
        # Committed: wake the tails of the runs it reached.
        self.notifier.runs_changed(item.journal.id_text for item in batch
                                   if item.journal.id_text in found)
        for item in batch:
            landed = found.get(item.journal.id_text, _FENCED)
            item.journal._landed(item.count, landed)
            for waiter in item.waiters:
                if not waiter.done():
                    waiter.set_result(landed)

    def _failed(self, batch: list[_Item], exc: BaseException) -> None:
        """The events stay buffered for the run's next flush, which retries and reports."""
        for item in batch:
            for waiter in item.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)


class RunJournal:
    def __init__(self, pool: AsyncConnectionPool, execution_id: UUID, run_token: UUID, *,
                 next_seq: int, payload_json: Callable[[Any], str] = plain_json,
                 writer: JournalWriter | None = None,
                 linger_seconds: float | None = LINGER_SECONDS,
                 shown: Callable[[Any], Any] | None = None) -> None:
        """payload_json: a payload's stored JSON text (the worker's redacts secrets).
        writer: the process's JournalWriter; None gives the run a writer of its own.
        linger_seconds: None turns the background write off (explicit writes only).
        shown: what the run's reason, an approval's arguments and a saved state become before
        they are stored (the worker's scrubs the tenant secrets the run was handed)."""
        self._pool, self.execution_id, self.run_token = pool, execution_id, run_token
        self.id_text, self.token_text = str(execution_id), str(run_token)  # once, not per batch
        self._next_seq, self._payload_json = next_seq, payload_json
        self._writer = writer or JournalWriter(pool, linger_seconds=linger_seconds or 0.0)
        self._background = linger_seconds is not None
        self._pending: list[PendingEvent] = []
        self.cancel_requested = False  # learned with every append
        self._waiters: list[asyncio.Future] = []  # for the writer's next batch with this run
        self._verdict: Verdict | None = None  # set by finish, taken by the writer
        self._busy: asyncio.Future | None = None  # done when this run's statement in flight ends
        self._exclusive = False  # suspend or release writes the buffer in its own transaction
        self._fenced = False  # found by a background write; raised at the run's next write
        self._shown = shown or (lambda value: value)

    def emit(self, type: EventType, payload: dict[str, Any], parent: int | None = None) -> int:
        """Buffer an event (secrets redacted before it is ever stored) and make sure a write
        is coming within the linger; return its seq."""
        check_event_type(type)  # a typo fails here, not as a CHECK that drops the batch
        seq = self._next_seq
        self._next_seq += 1
        self._pending.append(PendingEvent(seq, parent, type, self._payload_json(payload)))
        if self._background and not self._fenced and not self._exclusive:
            try:  # (no with-statement: this runs for every event)
                self._writer.soon(self)
            except RuntimeError:  # no event loop (a pure unit test)
                pass
        return seq

    def _landed(self, count: int, landed: Landed) -> None:
        """The writer's report for this run's part of a batch (the first count events)."""
        if not landed.running:
            self._fenced = True
            self._pending = []
            return
        del self._pending[:count]
        self.cancel_requested = landed.cancel_requested

    def _raise_if_fenced(self) -> None:
        if self._fenced:
            self._pending = []
            raise RunFenced(f"execution {self.execution_id} is no longer running")

    async def flush(self) -> None:
        """Append the buffered events (in the writer's next batch); raise RunFenced if the
        run is no longer ours. Also learns whether a person asked the run to stop."""
        self._raise_if_fenced()
        if self._pending:
            await self._writer.now(self)
        self._raise_if_fenced()

    async def background_idle(self) -> None:
        """Until no write of this run is queued or in flight (tests use it to let a
        background write land; a run's own writes never need it)."""
        while self._writer.pending(self):
            await self._writer.landed()

    async def finish(self, *, status: FinalStatus, outcome: Outcome | None,
                     reason: str | None = None, usage: dict[str, int] | None = None,
                     answer: str | None = None) -> None:
        """Append what is buffered (the terminal event included) and record the verdict in
        the same statement, batched with other runs; raise RunFenced if the sweep got there
        first. usage is the run's whole total ({"input_tokens", "output_tokens",
        "model_calls"}); None leaves the stored usage. answer is the run's final answer as it
        may be shown (the caller redacts it), stored on the run."""
        await failpoints.hit("run.before_complete_commit")
        self._raise_if_fenced()
        self._verdict = Verdict(status, outcome, self._stored_text(reason), usage,
                                self._stored_text(answer))
        landed = await self._writer.now(self)
        if landed is None or not landed.finished:
            self._fenced = True
            self._raise_if_fenced()
        self._pending = []

    def _stored_text(self, text: str | None) -> str | None:
        """A run's reason as stored: through the run's payload encoder, like every event (the
        worker's redacts secrets), so the column says what the run_complete event says. A
        judge's verdict, an exception's message or a stop reason can quote anything."""
        if text is None:
            return None
        return storable_text(str(orjson.loads(self._payload_json(text))))

    @contextlib.asynccontextmanager
    async def _alone(self):
        """The run writes its buffer in its own transaction: out of the writer's queue, after
        its statement in flight (if any) has landed."""
        self._exclusive = True
        self._writer.forget(self)
        try:
            while self._busy is not None:
                await asyncio.shield(self._busy)
            self._raise_if_fenced()
            yield
        finally:
            self._exclusive = False

    async def suspend(self, *, state: dict[str, Any], version: int, approval_id: str,
                      tool_call_id: str, tool: str, arguments: dict[str, Any],
                      usage: dict[str, int] | None = None) -> None:
        """Save the run's state, create its approval and end the execution as suspended
        (completed, breadcrumb 'suspended', no terminal event), in one transaction. usage is
        the run's total so far; None leaves the stored usage."""
        async with self._alone():
            await self._suspend(state=state, version=version, approval_id=approval_id,
                                tool_call_id=tool_call_id, tool=tool, arguments=arguments,
                                usage=usage)

    @reconnecting
    async def _suspend(self, *, state: dict[str, Any], version: int, approval_id: str,
                       tool_call_id: str, tool: str, arguments: dict[str, Any],
                       usage: dict[str, int] | None) -> None:
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await self._append_still_ours(conn)
                await failpoints.hit("approval.after_pause_before_state_commit")
                cursor = await conn.execute(QUERIES["update_execution_suspended"], {
                    "execution_id": self.execution_id, "run_token": self.run_token,
                    "version": version, "state": Jsonb(self._shown(state)),
                    "approval_id": approval_id, "tool_call_id": tool_call_id, "tool": tool,
                    "arguments": Jsonb(self._shown(arguments)),
                    "usage": None if usage is None else Jsonb(usage)})
                if await cursor.fetchone() is None:
                    raise RunFenced(f"execution {self.execution_id} is no longer running")
        self._pending = []
        self._writer.notifier.runs_changed([self.execution_id])  # approval_required, committed

    async def park(self, *, state: dict[str, Any], version: int, wait_seconds: float,
                   usage: dict[str, int] | None = None) -> None:
        """Save the run's state and park it until its model may answer again (running,
        breadcrumb 'parked', no worker, an unpark task in ``wait_seconds``), with what is
        buffered (its provider_wait event), in one transaction; RunFenced if it was no longer
        ours. usage is the run's total so far."""
        async with self._alone():
            await self._park(state, version, wait_seconds, usage)

    @reconnecting
    async def _park(self, state: dict[str, Any], version: int, wait_seconds: float,
                    usage: dict[str, int] | None) -> None:
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await self._append_still_ours(conn)
                cursor = await conn.execute(QUERIES["update_execution_parked"], {
                    "execution_id": self.execution_id, "run_token": self.run_token,
                    "version": version, "state": Jsonb(self._shown(state)),
                    "wait_seconds": wait_seconds,
                    "usage": None if usage is None else Jsonb(usage)})
                if await cursor.fetchone() is None:
                    raise RunFenced(f"execution {self.execution_id} is no longer running")
        self._pending = []
        self._writer.notifier.runs_changed([self.execution_id])  # provider_wait, committed

    async def release(self, approval_id: str | None = None,
                      saved_state: dict[str, Any] | None = None) -> dict[str, Any]:
        """The worker is going away with this run unfinished: write what is buffered and hand
        the run on (sql.lifecycle.release_run) in one transaction; raise RunFenced if it was no
        longer ours. Returns what release_run did."""
        async with self._alone():
            return await self._release(approval_id, saved_state)

    @reconnecting
    async def _release(self, approval_id: str | None,
                       saved_state: dict[str, Any] | None) -> dict[str, Any]:
        async with self._pool.connection() as conn:
            async with conn.transaction():
                if self._pending:
                    await self._append(conn)
                released = await release_run(conn, self.execution_id, self.run_token,
                                             approval_id=approval_id,
                                             saved_state=self._shown(saved_state))
        self._pending = []
        if released is None:
            raise RunFenced(f"execution {self.execution_id} is no longer running")
        return released

    async def _append_still_ours(self, conn: AsyncConnection) -> None:
        """In the caller's transaction: lock the run while it is still running under this
        token (RunFenced if not), then append what is buffered."""
        cursor = await conn.execute(QUERIES["lock_running_execution"], {
            "execution_id": self.execution_id, "run_token": self.run_token})
        if await cursor.fetchone() is None:
            self._pending = []
            raise RunFenced(f"execution {self.execution_id} is no longer running")
        await self._append(conn)

    async def _append(self, conn: AsyncConnection) -> None:
        # The same statement as the writer's, inside the caller's transaction. The buffer is
        # cleared only after the commit, so a retry after a lost connection appends the same
        # events again, idempotently.
        await conn.execute(QUERIES["insert_journal_batch"],
                           {"runs": "[" + _encode(self, self._pending, None) + "]"})


async def events_after(conn: AsyncConnection, execution_id: UUID, after: int,
                       limit: int = 1000) -> list[dict[str, Any]]:
    cursor = await conn.execute(QUERIES["list_run_events"], {
        "execution_id": execution_id, "after": after, "limit": limit})
    return await cursor.fetchall()


async def events_after_each(conn: AsyncConnection, afters: dict[UUID, int],
                            limit: int = 1000) -> dict[UUID, list[dict[str, Any]]]:
    """Each run's events after its own seq (at most ``limit`` per run), in one statement; a run
    with nothing new is absent from the answer."""
    cursor = await conn.execute(QUERIES["list_run_events_of_runs"], {
        "execution_ids": list(afters), "afters": list(afters.values()), "limit": limit})
    found: dict[UUID, list[dict[str, Any]]] = {}
    for row in await cursor.fetchall():
        found.setdefault(row.pop("execution_id"), []).append(row)
    return found
