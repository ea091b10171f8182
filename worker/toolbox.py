"""Running one tool call of a tool the agent has: check its arguments, run it, offload big
results. (Calls of tools the agent does not have are refused before they get here.)

Every agent has the local tools (worker/tools/local.py LOCAL_TOOLS) whether or not it lists
them: an offloaded result tells the model to use read_file/query_file, and the
plan is how the stop gate is steered. Arguments that do not fit give a result that says
plainly the call did NOT execute and what to do instead; a tool that raises returns its error
type and message; a vendor tool that does not finish within the per-call timeout is stopped
and the model is told it may or may not have had an effect.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from uuid import UUID

from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from tickwork.sql.db import PerStatement
from tickwork.worker.model import ToolCall, ToolSchema, canonical_name
from tickwork.worker.tools import local
from tickwork.worker.tools.offload import maybe_offload
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.secrets import RunSecrets
from tickwork.worker.tool_index import bound_schemas, index_text, load
from tickwork.worker.tools.sandbox import QueryLimits


@dataclass
class ToolContext:
    """What a vendor tool receives besides its arguments (the public face for plugin authors:
    ``tickwork.ToolContext``).

    - ``tenant_id``: the tenant whose run made the call; act for this tenant only.
    - ``execution_id``: the run (this attempt of it).
    - ``idempotency_key``: one per call, the same in every attempt of the run's chain: pass it
      to a vendor that deduplicates, so a call made again after a crash has one effect.
    - ``conn`` runs each statement on a pooled connection taken for that statement only
      (sql.db.PerStatement): no connection is held while the tool waits on anything else;
      ``pool`` is there for a tool that needs a transaction."""

    conn: Any
    execution_id: UUID
    idempotency_key: str
    pool: AsyncConnectionPool | None = None
    tenant_id: UUID | None = None
    # ``await ctx.secret(name)``: the tenant's secret of that name (set with `tickwork secret
    # set NAME`); every text the run shows afterwards is scrubbed of its value.
    secret: Callable[[str], Awaitable[str]] | None = None


@dataclass
class ToolOutcome:
    text: str  # what the model sees
    ok: bool
    duration_ms: float = 0.0


def refusal(tool: str, why: str, instead: str) -> str:
    return json.dumps({"error": f"The call to {tool} did NOT execute: {why}.",
                       "what_to_do": instead})


@dataclass(frozen=True)
class ToolSet:
    """The tools of agents that list the same keys: the listed ones the catalog has, and
    every local tool, by canonical name, with their schemas for the model. Worked out once
    per list of keys (RunDeps.toolset), not once per run."""

    specs: dict[str, ToolSpec]
    schemas: list[ToolSchema]

    @classmethod
    def of(cls, catalog: dict[str, ToolSpec], agent_tools: list[str]) -> ToolSet:
        listed = {canonical_name(k): catalog[k] for k in agent_tools if k in catalog}
        local = {canonical_name(k): s for k, s in catalog.items() if s.is_local}
        specs = {**listed, **{k: s for k, s in local.items() if k not in listed}}
        return cls(specs, [ToolSchema(s.key, s.description, s.parameters)
                           for s in specs.values()])


class ToolBox:
    def __init__(self, tools: ToolSet, *,
                 pool: AsyncConnectionPool, execution_id: UUID, plan: dict[str, Any],
                 offload_threshold: int, preview_chars: int,
                 redact: Callable[[Any], Any], tool_timeout: float = 60.0,
                 query_limits: QueryLimits | None = None, chain_root: UUID | None = None,
                 tenant_id: UUID | None = None, secrets: RunSecrets | None = None,
                 loaded: list[str] | None = None, code: Any = None) -> None:
        self._tools = tools
        self._specs = tools.specs
        self._timeout = tool_timeout
        self._query_limits = query_limits or QueryLimits()
        self._pool, self._execution_id, self._plan = pool, execution_id, plan
        # The run chain's first attempt: its id keys the offloaded results every attempt can
        # read and the idempotency keys vendors see (worker/continuation.py).
        self._root = chain_root or execution_id
        self._tenant_id = tenant_id
        self._secrets = secrets
        # Names first (worker/tool_index.py): the run's loaded tools, kept in its state; None
        # sends every schema on every call.
        self._loaded = loaded
        self._code = code  # the run's Python sandbox, for run_python (worker/tools/python_sandbox.py)
        self._threshold, self._preview, self._redact = offload_threshold, preview_chars, redact

    def schemas(self) -> list[ToolSchema]:
        """The schemas a model call carries: every tool's, or (names first) the local tools'
        and the loaded ones'."""
        if self._loaded is None:
            return self._tools.schemas  # shared by every run of the same tools: read only
        return bound_schemas(self._specs, self._loaded)

    def tool_index(self) -> str | None:
        """The system prompt's list of the tools whose schemas are not sent (names first)."""
        return None if self._loaded is None else index_text(self._specs, self._loaded)

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(canonical_name(name))

    @property
    def pool(self) -> AsyncConnectionPool:
        """The worker's pool (an approved call's cancel fence connects beside it)."""
        return self._pool

    async def call(self, call: ToolCall, spec: ToolSpec, *, step: int,
                   parent: int | None = None) -> ToolOutcome:
        """Run a call of a tool this agent has (the caller refuses unknown tools first)."""
        started = time.perf_counter()
        try:
            arguments = self._validated(spec, call.arguments)
        except ValueError as exc:
            return ToolOutcome(refusal(spec.key, f"the arguments do not fit ({exc})",
                                       "call it again with arguments matching its schema"), False)
        outcome = await self._run(spec, arguments, call.id, step if parent is None else parent)
        outcome.duration_ms = round((time.perf_counter() - started) * 1000, 1)
        return outcome

    def _validated(self, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        if "_raw" in arguments:
            raise ValueError("they are not valid JSON")
        try:
            return spec.arguments.model_validate(arguments).model_dump()
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"{'.'.join(map(str, first['loc'])) or 'arguments'}: {first['msg']}")

    async def _run(self, spec: ToolSpec, arguments: dict[str, Any], call_id: str,
                   parent: int = 0) -> ToolOutcome:
        # A connection per statement, never for the whole call: a vendor's wait or
        # query_file's child process (up to its time limit) holds none.
        conn = PerStatement(self._pool)
        try:
            value = await self._invoke(spec, arguments, conn, call_id, parent)
            # Redacting takes time that grows with the result: in a thread, off the event loop.
            shown = await asyncio.to_thread(self._shown, value)
            text = await maybe_offload(conn, execution_id=self._root, tool=spec.key,
                                       value=shown, threshold=self._threshold,
                                       preview_chars=self._preview)
        except local.ToolInputError as exc:
            return ToolOutcome(json.dumps({"error": str(exc)}), False)
        except Exception as exc:  # a tool's failure is the model's information, not a crash
            message = self._shown(f"{type(exc).__name__}: {exc}")
            return ToolOutcome(json.dumps({"error": message}), False)
        return ToolOutcome(text, True)

    def _load(self, names: Any) -> dict[str, Any] | None:
        if self._loaded is None:
            return {"loaded": [], "note": "every tool of this agent is already loaded"}
        return load(self._specs, self._loaded, names)

    def _shown(self, value: Any) -> Any:
        """A tool's result or error as stored and sent: redacted, and scrubbed of the tenant
        secrets the run was handed."""
        scrubbed = self._secrets.scrub(value) if self._secrets is not None else value
        return self._redact(scrubbed)

    async def _invoke(self, spec: ToolSpec, arguments: dict[str, Any], conn: Any,
                      call_id: str, parent: int = 0) -> Any:
        if spec.is_local:  # run here, in the worker, never metered (worker/tools/local.py)
            return await spec.function(local.LocalContext(
                conn, self._root, self._plan, max_chars=self._threshold,
                query_limits=self._query_limits, load_tools=self._load, code=self._code,
                call_id=call_id, parent_seq=parent), **arguments)
        # One key per call, the same in every attempt of the chain: a vendor can deduplicate
        # a call that a retry makes again because its result was never recorded.
        context = ToolContext(conn, self._execution_id, f"{self._root}:{call_id}", self._pool,
                              tenant_id=self._tenant_id,
                              secret=self._secrets.get if self._secrets else None)
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the call's result
            # when the run is cancelled just as the call finishes, and the cancel is lost.
            async with asyncio.timeout(self._timeout):
                return await spec.function(context, **arguments)
        except TimeoutError:
            raise local.ToolInputError(
                f"The call to {spec.key} was stopped after {self._timeout:g} s without "
                "finishing. It may or may not have had an effect: check before repeating it, "
                "or continue without it.") from None
