"""Local tools: declared once here (LOCAL_TOOLS), run inside the worker, never metered.

``update_plan`` and ``task_complete`` are bookkeeping the stop gate reads; ``read_file`` and
``query_file`` reach results that were offloaded (worker/tools/offload.py) because they were
too large for the message history. Each returns a JSON-able value; bad input raises
ToolInputError, whose sentence goes back to the model so it can correct the call.

LOCAL_TOOLS is the one declaration of each local tool (name, class, description, arguments,
handler): the catalog (worker/tools/registry.py), the toolbox and the walls all read it.

No transaction is held anywhere here: the stored result is fetched with one autocommit read,
and SQL over it runs in an in-memory SQLite database in a child process, with no Postgres
involved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal
from uuid import UUID

from psycopg import AsyncConnection
from pydantic import BaseModel, ConfigDict

from tickwork.sql.vocabulary import ToolClass
from tickwork.worker.tools.offload import OFFLOAD_THRESHOLD_CHARS, load_result, render_result
from tickwork.worker.tools.sandbox import QueryLimits, run_query
from tickwork.worker.tools.sqlbox import QueryError, check_select


class ToolInputError(ValueError):
    """The model's arguments cannot be acted on; the message says why and what to do."""


@dataclass(frozen=True)
class LocalContext:
    """What a local tool receives besides its arguments, from the run's toolbox."""

    conn: Any  # one statement per pooled connection (sql.db.PerStatement)
    execution_id: UUID
    plan: dict[str, Any]  # the run's plan state, which update_plan replaces
    max_chars: int  # the offload threshold: read_file's reply must render within it
    query_limits: QueryLimits
    # load_tools: binds the named tools for the rest of the run, returns their schemas
    # (worker/tool_index.py); None where the run sends every schema anyway.
    load_tools: Callable[[Any], dict[str, Any]] | None = None
    # run_python's: the run's sandbox (worker/tools/python_sandbox.py), and the call's harness
    # id and tool_start seq, under which the calls its code makes are named and journaled.
    code: Any = None
    call_id: str = "code"
    parent_seq: int = 0


# Their arguments are declared so that the model sees them and so that it can pass nothing
# else (no limits of its own choosing).
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanStep(_Strict):
    title: str
    status: Literal["pending", "in_progress", "completed"]


class UpdatePlanArguments(_Strict):
    steps: list[PlanStep]


class TaskCompleteArguments(_Strict):
    summary: str = ""


class ReadFileArguments(_Strict):
    file_ref: str
    offset: int = 0
    limit: int = 4000


class QueryFileArguments(_Strict):
    file_ref: str
    sql: str


class LoadToolsArguments(_Strict):
    names: list[str]


class RunPythonArguments(_Strict):
    code: str


@dataclass(frozen=True)
class LocalTool:
    """One local tool, declared once."""

    name: str
    tool_class: ToolClass
    description: str
    arguments: type[BaseModel]  # validates what the model passes; its schema is what it sees
    run: Callable[..., Awaitable[Any]]  # run(context: LocalContext, **arguments)
    query_loop: bool = False  # met by the query-loop wall (worker/walls.py), keyed by SQL shape


PLAN_STATUSES = ("pending", "in_progress", "completed")
MAX_PLAN_STEPS = 50
MAX_STEP_TITLE = 300


async def update_plan(plan_state: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Replace the run's plan; the stop gate refuses to stop while a step is not completed."""
    if not isinstance(steps, list) or len(steps) > MAX_PLAN_STEPS:
        raise ToolInputError(f"steps must be a list of at most {MAX_PLAN_STEPS} objects "
                             'like {"title": "…", "status": "pending"}')
    plan = [_plan_step(number, step) for number, step in enumerate(steps, start=1)]
    plan_state["steps"] = plan
    return {"ok": True, "open_steps": [s["title"] for s in plan if s["status"] != "completed"]}


def _plan_step(number: int, step: Any) -> dict[str, str]:
    if not isinstance(step, dict):
        raise ToolInputError(f'step {number} must be an object with "title" and "status"')
    title, status = step.get("title"), step.get("status")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_STEP_TITLE:
        raise ToolInputError(f"step {number} needs a title: text of 1 to {MAX_STEP_TITLE} "
                             "characters")
    if status not in PLAN_STATUSES:
        raise ToolInputError(f"step {number} ({title.strip()!r}) has status {status!r}; "
                             f"use one of {', '.join(PLAN_STATUSES)}")
    return {"title": title.strip(), "status": status}


async def load_tools(context: LocalContext, names: list[str]) -> dict[str, Any]:
    """Bind the named tools' schemas for the rest of the run, and return them."""
    if context.load_tools is None:  # every schema is sent already
        return {"loaded": [], "note": "every tool of this agent is already loaded"}
    return context.load_tools(names)


async def task_complete(summary: str = "") -> dict[str, Any]:
    """Bookkeeping only: whether the run may stop is the gate's decision, not this call's."""
    if not isinstance(summary, str):
        raise ToolInputError("summary must be text")
    return {"ok": True}


async def read_file(conn: AsyncConnection, execution_id: UUID, file_ref: str, offset: int = 0,
                    limit: int = 4000, *,
                    max_chars: int = OFFLOAD_THRESHOLD_CHARS) -> dict[str, Any]:
    """A slice of a stored result's text. The slice is shortened so the whole reply renders
    within max_chars (pass the deployment's offload threshold): a reply that were itself
    offloaded would send the model in circles."""
    offset, limit = _whole(offset, "offset", 0), _whole(limit, "limit", 1)
    text = render_result((await _stored(conn, execution_id, file_ref))["content"])
    return text_slice(text, file_ref.strip(), offset, limit, max_chars=max_chars)


def text_slice(text: str, file_ref: str, offset: int, limit: int, *,
               max_chars: int = OFFLOAD_THRESHOLD_CHARS) -> dict[str, Any]:
    """read_file's reply: up to limit characters from offset, fewer if the reply (where JSON
    escaping lengthens the text) would otherwise render longer than max_chars."""
    if offset > len(text):
        raise ToolInputError(f"offset {offset} is past the end: {file_ref} has {len(text)} "
                             "characters")
    end = min(offset + limit, len(text))
    while True:
        reply = {"file_ref": file_ref, "offset": offset, "text": text[offset:end],
                 "total_chars": len(text), "next_offset": end if end < len(text) else None}
        over = len(render_result(reply)) - max_chars
        if over <= 0 or end - offset <= 1:
            return reply
        end = max(offset + 1, end - over)


async def query_file(conn: AsyncConnection, execution_id: UUID, file_ref: str, sql: str, *,
                     limits: QueryLimits = QueryLimits()) -> dict[str, Any]:
    """Run one read-only SELECT over a stored result, seen as the table ``result``, in a child
    process that is killed at the time limit (worker/tools/sandbox.py)."""
    try:
        check_select(sql)
        row = await _stored(conn, execution_id, file_ref)
        return await run_query(render_result(row["content"]), sql, limits)
    except QueryError as exc:
        raise ToolInputError(str(exc)) from None


async def _stored(conn: AsyncConnection, execution_id: UUID, file_ref: Any) -> dict[str, Any]:
    row = None
    if isinstance(file_ref, str):
        row = await load_result(conn, execution_id=execution_id, file_ref=file_ref.strip())
    if row is None:
        raise ToolInputError(f"no such file in this run: {str(file_ref)[:80]!r}; use a file_ref "
                             "returned by an offloaded result of this run")
    return row


MAX_CODE_CHARS = 100_000


async def run_python(context: LocalContext, code: str) -> dict[str, Any]:
    """Run a cell in the run's sandbox: stdout, the last expression's value, or the error."""
    if not isinstance(code, str) or not code.strip() or len(code) > MAX_CODE_CHARS:
        raise ToolInputError(f"code must be Python source of 1 to {MAX_CODE_CHARS} characters")
    if context.code is None:
        raise ToolInputError("run_python is not available in this run")
    return await context.code.run(code, parent=context.parent_seq, call_id=context.call_id)


def _whole(value: Any, name: str, minimum: int) -> int:
    # Models send numbers as 800, 800.0 or "800"; all mean the same offset.
    try:
        number = int(value) if not isinstance(value, bool) and float(value) == int(value) else None
    except (TypeError, ValueError, OverflowError):
        number = None
    if number is None or number < minimum:
        raise ToolInputError(f"{name} must be a whole number of at least {minimum}")
    return number


LOCAL_TOOLS: tuple[LocalTool, ...] = (
    LocalTool("update_plan", "write", "Record the plan: steps with title and status.",
              UpdatePlanArguments, lambda ctx, **arguments: update_plan(ctx.plan, **arguments)),
    LocalTool("task_complete", "write", "Declare the task complete.", TaskCompleteArguments,
              lambda ctx, **arguments: task_complete(**arguments)),
    LocalTool("read_file", "read", "Read a stored tool result by its file reference.",
              ReadFileArguments, lambda ctx, **arguments: read_file(
                  ctx.conn, ctx.execution_id, max_chars=ctx.max_chars, **arguments)),
    LocalTool("query_file", "read", "Run one SQL SELECT over a stored tool result, seen as a "
              "table named result.", QueryFileArguments, lambda ctx, **arguments: query_file(
                  ctx.conn, ctx.execution_id, limits=ctx.query_limits, **arguments),
              query_loop=True),
    LocalTool("load_tools", "read", "Load the parameters of tools listed by name in the system "
              "prompt, all you need in one call; then call them.", LoadToolsArguments,
              lambda ctx, **arguments: load_tools(ctx, **arguments)),
    LocalTool("run_python", "write", "Run Python in a sandbox kept for the run (variables "
              "persist; stdout and the last expression's value come back; no network, files only "
              "in /scratch). In it, tools.call(name, **arguments) calls your tools, each call "
              "metered like a direct one: use it for loops over many items.",
              RunPythonArguments, lambda ctx, **arguments: run_python(ctx, **arguments)),
)
# The local tools the query-loop wall meters (worker/walls.py); every other one is never metered.
QUERY_LOOP_TOOLS = frozenset(tool.name for tool in LOCAL_TOOLS if tool.query_loop)
