"""query_file's box: each query runs in a short-lived child process (worker/tools/sqlbox.py)
with CPU-time and memory limits, and is killed (SIGKILL) at its time limit.

A thread cannot be stopped: one SQLite function call (instr over a long string) never
reaches the progress handler, so it ran on past the limit and held the worker's shutdown. A
process can be killed, whatever it is doing. The parent only awaits pipes, so the event loop
stays free; when the awaiting task is cancelled (shutdown past its grace) the child is killed
too, so no query outlives its worker.

One fresh interpreter per call (no pool): nothing of one tenant's query survives into the next,
and a killed child needs no replacing. A call costs about 45 ms of CPU (bench/query_file.py),
small beside the model turn that asked for it.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tickwork.worker.tools.sqlbox import (MAX_ANSWER_BYTES, MAX_QUERY_ROWS, QUERY_TIME_LIMIT_S,
                                          QueryError, check_select, length_limit_for)

ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the worker package
# -I: no environment variables, user site or current folder; -S: no site-packages. The child
# imports the standard library and worker/tools/sql{box,guard,table}.py only.
CHILD = ["-I", "-S", "-B", "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
         "from worker.tools.sqlbox import main; sys.exit(main(sys.argv))", ROOT]
KILL_MARGIN_S = 0.5  # past the time limit, for the child to stop itself and say so
# The child keeps its answer within max_answer_bytes of JSON; past this margin over it, the
# parent stops reading (a backstop: the child is ours, but its reply is read on the loop).
ANSWER_MARGIN_BYTES = 2**20


@dataclass(frozen=True)
class QueryLimits:
    """Per-deployment limits of one query_file call (WorkerSettings.query_file_*).
    load_time_limit_s bounds starting the child and loading the stored result, before the
    query's own time limit starts."""

    time_limit_s: float = QUERY_TIME_LIMIT_S
    memory_mb: int = 512
    max_rows: int = MAX_QUERY_ROWS
    load_time_limit_s: float = 10.0
    max_answer_bytes: int = MAX_ANSWER_BYTES

    @property
    def cpu_seconds(self) -> int:
        # A backstop if the parent is gone or stalled: the whole child's CPU, loading included.
        return math.ceil(self.load_time_limit_s + self.time_limit_s) + 1


async def run_query(stored_text: str, sql: str, limits: QueryLimits = QueryLimits()) -> dict:
    """The answer of one SELECT over a stored result's JSON text, computed in a child process.
    Raises QueryError with a sentence (``stopped`` says which limit, if one did)."""
    check_select(sql)  # refused without starting a process
    data = stored_text.encode()
    header = {"sql": sql, "max_rows": limits.max_rows, "time_limit_s": limits.time_limit_s,
              "length_limit": length_limit_for(len(data)),
              "heap_limit": limits.memory_mb * 2**20 // 2,
              "max_answer_bytes": limits.max_answer_bytes}
    child = await asyncio.create_subprocess_exec(
        sys.executable, *CHILD, str(limits.cpu_seconds),
        str(limits.memory_mb * 2**20), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        reply = await _converse(child, json.dumps(header).encode() + b"\n" + data, limits)
    finally:
        if child.returncode is None:  # timed out, or the awaiting task was cancelled
            child.kill()
            await child.wait()
    return _answer(reply, child.returncode, limits)


async def _converse(child: asyncio.subprocess.Process, request: bytes,
                    limits: QueryLimits) -> bytes:
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the inner result when the
    # caller is cancelled just as it finishes, so a cancelled call went on running its query.
    try:
        async with asyncio.timeout(limits.load_time_limit_s):
            first = await _load(child, request)
    except TimeoutError:
        raise QueryError(f"loading the stored result took longer than "
                         f"{limits.load_time_limit_s:g} s and was stopped; read it in slices "
                         "with read_file instead", "time") from None
    if first != b"ready\n":  # the child stopped before the query: its reply, or nothing
        return first + await _read_all(child, limits.max_answer_bytes + ANSWER_MARGIN_BYTES)
    try:
        async with asyncio.timeout(limits.time_limit_s + KILL_MARGIN_S):
            reply = await _read_all(child, limits.max_answer_bytes + ANSWER_MARGIN_BYTES)
    except TimeoutError:
        raise QueryError(f"the query ran longer than {limits.time_limit_s:g} s and was stopped "
                         "(its process was killed); filter, aggregate or add a LIMIT, and avoid "
                         "functions over very long strings", "time") from None
    await child.wait()
    return reply


async def _load(child: asyncio.subprocess.Process, request: bytes) -> bytes:
    assert child.stdin and child.stdout
    try:
        child.stdin.write(request)
        await child.stdin.drain()
        child.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child stopped early (out of memory); its exit status says why
    return await child.stdout.readline()


async def _read_all(child: asyncio.subprocess.Process, limit: int) -> bytes:
    assert child.stdout
    parts, size = [], 0
    while chunk := await child.stdout.read(2**16):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise QueryError(f"the answer is larger than {limit:,} bytes; select fewer rows "
                             "or shorter values (substr)")
    return b"".join(parts)


def _answer(reply: bytes, returncode: int | None, limits: QueryLimits) -> dict[str, Any]:
    try:
        message = json.loads(reply)
    except ValueError:
        raise _died(returncode, limits) from None
    if "answer" in message:
        return message["answer"]
    if message.get("stopped") == "memory":
        raise _out_of_memory(limits)
    raise QueryError(message["error"], message.get("stopped"))


def _died(returncode: int | None, limits: QueryLimits) -> QueryError:
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return QueryError(f"the query used more than {limits.cpu_seconds} s of CPU time and was "
                          "stopped; filter, aggregate or add a LIMIT", "cpu")
    if returncode is not None and returncode < 0:
        return QueryError(f"the query process was stopped by signal {-returncode}; filter, "
                          "aggregate or add a LIMIT")
    return _out_of_memory(limits)  # a child that exits without replying ran out of memory


def _out_of_memory(limits: QueryLimits) -> QueryError:
    return QueryError(f"the query needed more than {limits.memory_mb} MB of memory and was "
                      "stopped; filter, aggregate or add a LIMIT, or read the result in slices "
                      "with read_file", "memory")
