"""Per-run wiring: what a worker gives every run (RunDeps), and the agent loop one run gets
from it (its toolbox, walls, call policy and stop-gate settings)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from psycopg_pool import AsyncConnectionPool

from tickwork.sql.journal import JournalWriter, RunJournal
from tickwork.worker.agent_loop import Loop
from tickwork.worker.calls import CallPolicy
from tickwork.worker.code_calls import code_bridge
from tickwork.worker.claim import AgentDefinition, ClaimedRun
from tickwork.worker.compaction import ContextLimits
from tickwork.worker.continuation import Chain, call_prefix
from tickwork.worker.model import ModelProvider
from tickwork.worker.redact import redact
from tickwork.sql.sealed import SecretBox
from tickwork.worker.secrets import RunSecrets
from tickwork.worker.run_queries import cancel_requested, store_result, stored_result
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.state import RunState
from tickwork.worker.stop_gate import GateSettings
from tickwork.worker.toolbox import ToolBox, ToolSet
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.tools.python_sandbox import PythonSandbox, SandboxLimits
from tickwork.worker.tools.sandbox import QueryLimits
from tickwork.worker.walls import WallSettings

# Tool lists a worker keeps worked out at once (agents' lists come and go; a miss costs time)
MAX_TOOLSETS = 1024


@dataclass
class RunDeps:
    pool: AsyncConnectionPool
    provider: ModelProvider
    catalog: dict[str, ToolSpec]
    settings: WorkerSettings
    worker_id: str
    journal_writer: JournalWriter  # the process's one writer (its notifier wakes tails too)
    _toolsets: dict[tuple[str, ...], ToolSet] = field(default_factory=dict, repr=False)
    _secret_box: SecretBox | None = field(default=None, repr=False)

    def secret_box(self) -> SecretBox:
        """The keys that open tenants' secrets, read when a tool first asks for one (a worker
        without TICKWORK_SECRET_KEY runs every other tool; a tool asking is told why not)."""
        if self._secret_box is None:
            self._secret_box = SecretBox.from_settings()
        return self._secret_box

    def toolset(self, tools: list[str]) -> ToolSet:
        """The tools of an agent listing these keys, worked out once per list of keys."""
        key = tuple(tools)
        found = self._toolsets.get(key)
        if found is None:
            if len(self._toolsets) >= MAX_TOOLSETS:  # agents' lists come and go: stay bounded
                self._toolsets.clear()
            found = self._toolsets[key] = ToolSet.of(self.catalog, tools)
        return found

    @cached_property
    def walls(self) -> WallSettings:
        s = self.settings
        return WallSettings(per_tool=s.per_tool_cap, aggregate=s.aggregate_cap,
                            delivery=s.delivery_reserve, query_loop=s.query_loop_cap,
                            hard_cap=s.hard_cap)

    @cached_property
    def gate(self) -> GateSettings:
        return GateSettings(continuation_units=self.settings.continuation_units,
                            judge_window=self.settings.judge_window)

    @cached_property
    def context_limits(self) -> ContextLimits:
        return self.settings.context_limits()

    @cached_property
    def sandbox_limits(self) -> SandboxLimits:
        s = self.settings
        return SandboxLimits(wall_seconds=s.python_wall_seconds, cpu_seconds=s.python_cpu_seconds,
                             memory_mb=s.python_memory_mb, max_processes=s.python_max_processes,
                             max_output_chars=s.python_max_output_chars,
                             scratch_mb=s.python_scratch_mb)

    @cached_property
    def query_limits(self) -> QueryLimits:
        return QueryLimits(time_limit_s=self.settings.query_file_time_limit_seconds,
                           memory_mb=self.settings.query_file_memory_mb,
                           max_answer_bytes=self.settings.query_file_max_answer_bytes)


class UnknownModelAlias(Exception):
    def __init__(self, alias: str, known: frozenset[str]) -> None:
        super().__init__(f"the agent's model {alias!r} is not an alias this worker routes "
                         f"(TICKWORK_MODELS routes {', '.join(sorted(known))}); set the agent's "
                         "model to one of them, or route the alias")


def agent_walls(agent: AgentDefinition, deps: RunDeps) -> WallSettings:
    """The deployment's walls, with the agent's own hard cap when it has one."""
    if agent.max_tool_calls is None:
        return deps.walls
    return replace(deps.walls, hard_cap=agent.max_tool_calls,
                   hard_cap_setting="the agent's max_tool_calls")


def agent_model(agent: AgentDefinition, deps: RunDeps) -> str:
    """The alias the agent's turns use: its own (which the worker must route), else default."""
    if agent.model is None:
        return "default"
    known = getattr(deps.provider, "aliases", None)  # a Router knows its aliases
    if known is not None and agent.model not in known:
        raise UnknownModelAlias(agent.model, known)
    return agent.model


def build_loop(run: ClaimedRun, agent: AgentDefinition, state: RunState, journal: RunJournal,
               deps: RunDeps, chain: Chain | None = None,
               secrets: RunSecrets | None = None,
               sandbox: PythonSandbox | None = None) -> Loop:
    """The agent's own settings (model, max_tool_calls, token_budget) over the deployment's."""
    s, pool = deps.settings, deps.pool
    budget, budget_setting = ((s.token_budget, "the deployment's TICKWORK_TOKEN_BUDGET")
                              if agent.token_budget is None
                              else (agent.token_budget, "the agent's token_budget"))
    # The tool-call store is the chain's: a call an earlier attempt completed is replayed.
    root = (chain or Chain.alone(run.id)).root
    toolbox = ToolBox(deps.toolset(agent.tools), pool=pool, execution_id=run.id,
                      plan=state.plan, offload_threshold=s.offload_threshold_chars,
                      preview_chars=s.offload_preview_chars, redact=redact,
                      tool_timeout=s.tool_timeout_seconds, query_limits=deps.query_limits,
                      chain_root=root, tenant_id=run.tenant_id, secrets=secrets, code=sandbox,
                      loaded=state.loaded_tools if s.tool_schemas_on_demand else None)
    policy = CallPolicy(walls=agent_walls(agent, deps), auto_approve=frozenset(agent.auto_approve),
                        stored_result=lambda call_id: stored_result(pool, root, call_id),
                        store_result=lambda call_id, text, ok: store_result(
                            pool, root, call_id, text, ok))
    if sandbox is not None:  # tools.call from code: ordinary calls of this run (worker/code_calls.py)
        sandbox.bridge = code_bridge(state, toolbox, journal, policy)
        sandbox.cancelled = lambda: cancel_requested(pool, run.id)
    return Loop(run_input=run.input, provider=deps.provider, toolbox=toolbox,
                journal=journal, policy=policy,
                gate=deps.gate,
                max_turns=s.max_model_turns,
                cancel_requested=lambda: _cancel_requested(journal),
                token_budget=budget, token_budget_setting=budget_setting,
                keep_turns=s.context_keep_turns, context=deps.context_limits,
                model=agent_model(agent, deps), call_prefix=call_prefix(run.attempt))


async def _cancel_requested(journal: RunJournal) -> bool:
    """A person's stop request, as the journal learned it with its last append (no query of
    its own: the run checks at every turn boundary for free)."""
    return journal.cancel_requested
