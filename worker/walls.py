"""The four walls, the hard cap and the turn warning: budgets that stop a runaway agent.

No single limit catches every runaway, because each loop shape is invisible to some key. So
four soft walls key on four different things (DESIGN.md, "The four walls and the hard stop"):

* per tool name, arguments ignored: one tool hammered with ever-different arguments;
* aggregate (soft), by call identity across external tools: many tools each under their cap;
  past it a new identity is refused once and an identical repeat goes through, so a needed
  call proceeds on its confirmed retry while an enumerating loop (never repeating) stays out;
* delivery reserve for send-class tools: reading can never starve the final delivery;
* query loop, by (file_ref, SQL shape): the same query with rotating literals.

Walls refuse (the model reads the refusal and re-plans); only the hard cap ends a run. Only
external tools are metered; local tools never are, except that ``query_file`` passes the
query-loop wall. Every limit is a per-deployment setting. A limit of 0 on a wall refuses every
call it covers; only ``hard_cap`` uses 0 to mean "disabled".

Pure: the caller holds the Meter in the run state, asks ``check_call`` before a tool call and
tells ``record_call`` what was decided; ``metered`` does both for the event loop, where a
query's SQL is refused past its length limit before anything parses it and its shape is
worked out once, in a thread (parsing SQL costs time that grows faster than the SQL).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from tickwork.worker.model import ToolCall, canonical_name
from tickwork.worker.sql_shape import sql_shape
from tickwork.worker.tools.local import QUERY_LOOP_TOOLS
from tickwork.worker.tools.sqlguard import MAX_SQL_LENGTH
from tickwork.worker.tools.sqlbox import too_long
from tickwork.worker.tools.registry import ToolSpec


@dataclass(frozen=True)
class WallSettings:
    per_tool: int = 40  # per tool name, arguments ignored
    aggregate: int = 40  # soft, across external tools by call identity
    delivery: int = 5  # send-class reserve, exempt from the aggregate
    query_loop: int = 10  # per (file_ref, sql shape) of query_file
    hard_cap: int = 100  # attempted external calls, executed or refused; 0 disables
    # Who set the hard cap, named in the hard-stop message so the user knows what to raise:
    # the deployment (TICKWORK_HARD_CAP) or the agent's own max_tool_calls.
    hard_cap_setting: str = "the deployment's TICKWORK_HARD_CAP"


@dataclass
class Meter:
    """What a run has spent. Serializable, so a paused run resumes with its budgets."""

    per_tool: dict[str, int] = field(default_factory=dict)  # executed, per canonical name
    aggregate: int = 0  # executed non-send external calls
    refused_identities: list[str] = field(default_factory=list)  # refused once by the aggregate
    deliveries: int = 0  # executed send-class calls
    queries: dict[str, int] = field(default_factory=dict)  # executed query_file per shape key
    external_attempts: int = 0  # external calls attempted, executed or refused

    def to_state(self) -> dict[str, Any]:
        return {"per_tool": dict(self.per_tool), "aggregate": self.aggregate,
                "refused_identities": list(self.refused_identities),
                "deliveries": self.deliveries, "queries": dict(self.queries),
                "external_attempts": self.external_attempts}

    @classmethod
    def from_state(cls, state: dict[str, Any] | None) -> Meter:
        """A meter from ``to_state()``; missing keys (or no state) start at zero."""
        state = state or {}
        return cls(dict(state.get("per_tool", {})), int(state.get("aggregate", 0)),
                   list(state.get("refused_identities", [])), int(state.get("deliveries", 0)),
                   dict(state.get("queries", {})), int(state.get("external_attempts", 0)))


@dataclass(frozen=True)
class Allow:
    pass


@dataclass(frozen=True)
class Refuse:
    wall: str  # "per_tool" | "aggregate" | "delivery" | "query_loop" | "sql_length"
    message: str  # what the model sees as the tool result


def call_identity(name: str, arguments: dict[str, Any]) -> str:
    """One identity per call: the canonical tool name and its arguments as canonical JSON
    (sorted keys, compact), so spelling or key order cannot make a repeat look new."""
    body = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return f"{canonical_name(name)} {body}"


def query_key(arguments: dict[str, Any]) -> str:
    """The query-loop key: the file queried and the shape of the SQL run over it."""
    arguments = arguments or {}
    return f"{arguments.get('file_ref', '')} {sql_shape(str(arguments.get('sql', '')))}"


def _is_query(spec: ToolSpec) -> bool:
    return spec.is_local and spec.key in QUERY_LOOP_TOOLS


def _sql_length(arguments: dict[str, Any]) -> int:
    sql = (arguments or {}).get("sql", "")
    return len(sql) if isinstance(sql, str) else 0  # not text: query_file's own check says so


async def metered(call: ToolCall, spec: ToolSpec, meter: Meter,
                  settings: WallSettings) -> Allow | Refuse:
    """``check_call`` then ``record_call``, for a caller on the event loop: a query's shape is
    worked out once and in a thread, and only for SQL within its length limit."""
    key = None
    if _is_query(spec) and _sql_length(call.arguments) <= MAX_SQL_LENGTH:
        key = await asyncio.to_thread(query_key, call.arguments)
    decision = check_call(call, spec, meter, settings, query=key)
    record_call(call, spec, meter, decision, query=key)
    return decision


def check_call(call: ToolCall, spec: ToolSpec, meter: Meter, settings: WallSettings, *,
               query: str | None = None) -> Allow | Refuse:
    """Whether this call may run now. Does not change the meter (``record_call`` does).

    Order: the per-tool wall, then the delivery reserve (send-class) or the aggregate (every
    other external tool). ``query_file`` meets only the SQL length limit and the query-loop
    wall (``query``: its ``query_key`` if already worked out); other local tools are always
    allowed."""
    if _is_query(spec):
        return _check_query(call, meter, settings, query)
    if spec.is_local:
        return Allow()
    name = canonical_name(call.name)
    used = meter.per_tool.get(name, 0)
    if used >= settings.per_tool:
        return Refuse("per_tool", (
            f"This call to {name} did NOT execute: the per-tool limit is {settings.per_tool} "
            f"calls per tool in a run, and you have called {name} {used} times in this run. "
            "Work with what you have or use a different approach."))
    if spec.tool_class == "send":
        return _check_delivery(name, meter, settings)
    return _check_aggregate(call, meter, settings)


def _check_delivery(name: str, meter: Meter, settings: WallSettings) -> Allow | Refuse:
    if meter.deliveries < settings.delivery:
        return Allow()
    return Refuse("delivery", (
        f"This call to {name} did NOT execute: this run has already sent {meter.deliveries} "
        f"messages, and the delivery limit is {settings.delivery}. No more sends are allowed; "
        "give your final answer in your reply instead."))


def _check_aggregate(call: ToolCall, meter: Meter, settings: WallSettings) -> Allow | Refuse:
    # Past the soft cap, an identity refused before goes through: that is the confirmed
    # retry. A loop that enumerates never repeats an identity, so it is never confirmed.
    if meter.aggregate < settings.aggregate or \
            call_identity(call.name, call.arguments) in meter.refused_identities:
        return Allow()
    return Refuse("aggregate", (
        f"This call to {canonical_name(call.name)} did NOT execute: this run has made "
        f"{meter.aggregate} tool calls, which reaches the soft limit of {settings.aggregate} "
        "(aggregate wall). If this exact call is truly necessary, repeat it unchanged and it "
        "will run; otherwise answer with what you have."))


def _check_query(call: ToolCall, meter: Meter, settings: WallSettings,
                 query: str | None) -> Allow | Refuse:
    length = _sql_length(call.arguments)
    if length > MAX_SQL_LENGTH:  # before any parsing: its shape would cost minutes to work out
        return Refuse("sql_length", f"This query did NOT execute: {too_long(length)}.")
    runs = meter.queries.get(query if query is not None else query_key(call.arguments), 0)
    if runs < settings.query_loop:
        return Allow()
    file_ref = (call.arguments or {}).get("file_ref", "")
    return Refuse("query_loop", (
        f"This query did NOT execute: you have run this query shape on {file_ref} {runs} "
        f"times with different values, and the query-loop limit is {settings.query_loop}. "
        "Query once for all values instead (e.g. GROUP BY or IN (...))."))


def record_call(call: ToolCall, spec: ToolSpec, meter: Meter, decision: Allow | Refuse, *,
                query: str | None = None) -> None:
    """Update the meter after ``check_call`` decided (``query``: the one it was given). Every
    external call counts as an attempt (refused ones too: a loop refused forever must still
    reach the hard cap); the wall counters move only for calls that were allowed to run."""
    allowed = isinstance(decision, Allow)
    if _is_query(spec):
        if allowed:
            key = query if query is not None else query_key(call.arguments)
            meter.queries[key] = meter.queries.get(key, 0) + 1
        return
    if spec.is_local:
        return
    meter.external_attempts += 1
    if not allowed:
        identity = call_identity(call.name, call.arguments)
        if decision.wall == "aggregate" and identity not in meter.refused_identities:
            meter.refused_identities.append(identity)
        return
    name = canonical_name(call.name)
    meter.per_tool[name] = meter.per_tool.get(name, 0) + 1
    if spec.tool_class == "send":
        meter.deliveries += 1  # the reserve: sends never draw on the aggregate
    else:
        meter.aggregate += 1


def hard_cap_reached(meter: Meter, settings: WallSettings) -> bool:
    """True once the run has attempted ``hard_cap`` external calls; never when it is 0."""
    return settings.hard_cap > 0 and meter.external_attempts >= settings.hard_cap


def hard_stop_message(meter: Meter, settings: WallSettings, gathered: str) -> str:
    """The terminal assistant message at the hard cap, written for the user: how many calls,
    the limit and why it exists, what was gathered, and what to do next (naming the setting
    that set the limit)."""
    return (f"I stopped after {meter.external_attempts} tool calls — this run hit its hard "
            f"limit of {settings.hard_cap} tool calls, which guards against a runaway loop. "
            f"{_gathered(gathered)} If the task genuinely needs more tool calls, break it into "
            f"smaller runs or raise {settings.hard_cap_setting}.")


def token_stop_message(used: int, budget: int, gathered: str,
                       setting: str = "the deployment's TICKWORK_TOKEN_BUDGET") -> str:
    """The terminal assistant message when the run's token budget is spent, written for the
    user like the hard cap's: what it cost, the limit, what was gathered, what to do next
    (naming the setting that set the budget)."""
    return (f"I stopped after using {used} tokens — this run hit its token budget of {budget} "
            f"tokens, which caps what one run may cost. {_gathered(gathered)} If the task "
            f"genuinely needs more, break it into smaller runs or raise the token budget "
            f"({setting}).")


def turns_stop_message(turns: int, gathered: str) -> str:
    """The terminal assistant message when the run has taken as many model turns as the
    deployment allows (a model that only talks, without tool calls to meter)."""
    return (f"I stopped after {turns} model turns — this run hit the limit of model turns a "
            f"run may take, which guards against a runaway conversation. {_gathered(gathered)} "
            "If the task genuinely needs more turns, break it into smaller runs or raise the "
            "deployment's TICKWORK_MAX_MODEL_TURNS.")


def _gathered(gathered: str) -> str:
    summary = gathered.strip().rstrip(".") if gathered else ""
    return (f"What I gathered so far: {summary}." if summary
            else "I had not gathered anything I could summarise yet.")


def turn_warning(model_turns: int, every: int = 50) -> str | None:
    """A warning at every ``every`` model turns (50, 100, 150 …), else None. It gates nothing:
    it lets a still-reasoning agent wrap up on its own terms. ``every`` <= 0 disables it."""
    if every <= 0 or model_turns <= 0 or model_turns % every:
        return None
    return (f"This run has now taken {model_turns} turns. This is a reminder, not a limit: if "
            "you already have what the task needs, wrap up and give your final answer; "
            "otherwise continue, and avoid repeating work you have already done.")
