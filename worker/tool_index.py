"""Tool names first, schemas when needed (the token-efficiency seed's move 3).

A model call carries the schemas of the local tools and of the tools the run has loaded; the
system prompt lists every other tool of the agent by name with the first line of its
description (the first 50, then "(+N more)"). The local tool ``load_tools(names)`` returns the
schemas of all the named tools in one call and binds them for the rest of the run (the names
are kept in the run's state, so a resumed or retried run has them bound too).

A call to a tool of the agent that was never loaded still runs (its arguments are checked
against its schema like any call); loading is what lets the model see how to call it.
"""

from __future__ import annotations

from typing import Any, Iterable

from tickwork.worker.model import ToolSchema, canonical_name, wire_name
from tickwork.worker.tools.local import ToolInputError
from tickwork.worker.tools.registry import ToolSpec

LISTED = 50  # tools named in the prompt; past it, "(+N more)"
MAX_LOAD = 50  # names one load_tools call may ask for
DESCRIPTION_CHARS = 120


def first_line(description: str) -> str:
    line = (description or "").strip().splitlines()[0] if (description or "").strip() else ""
    return line if len(line) <= DESCRIPTION_CHARS else line[:DESCRIPTION_CHARS - 1] + "…"


def bound_schemas(specs: dict[str, ToolSpec], loaded: Iterable[str]) -> list[ToolSchema]:
    """What a model call carries: the local tools, then the loaded ones in the order loaded."""
    chosen = [s for s in specs.values() if s.is_local]
    chosen += [specs[name] for name in loaded if name in specs and not specs[name].is_local]
    return [ToolSchema(s.key, s.description, s.parameters) for s in chosen]


def index_text(specs: dict[str, ToolSpec], loaded: Iterable[str]) -> str | None:
    """The prompt's list of the agent's tools whose schemas are not sent; None when none."""
    bound = set(loaded)
    waiting = [s for s in specs.values() if not s.is_local and s.key not in bound]
    if not waiting:
        return None
    lines = [f"- {wire_name(s.key)}: {first_line(s.description)}" for s in waiting[:LISTED]]
    if len(waiting) > LISTED:
        lines.append(f"(+{len(waiting) - LISTED} more)")
    return ("Tools you can use (call load_tools with the names you need, all at once, to get "
            "their parameters; then call them):\n" + "\n".join(lines))


def load(specs: dict[str, ToolSpec], loaded: list[str], names: Any) -> dict[str, Any]:
    """load_tools: bind the named tools (appended to ``loaded``) and return their schemas."""
    if (not isinstance(names, list) or not names or len(names) > MAX_LOAD
            or not all(isinstance(n, str) for n in names)):
        raise ToolInputError(f"names must be a list of 1 to {MAX_LOAD} tool names, e.g. "
                             '["demo__get_record"]')
    schemas, unknown = [], []
    for raw in names:
        spec = specs.get(canonical_name(raw))
        if spec is None:
            unknown.append(raw[:100])
            continue
        if spec.is_local:  # always bound
            continue
        if spec.key not in loaded:
            loaded.append(spec.key)
        schemas.append({"name": wire_name(spec.key), "description": spec.description,
                        "parameters": spec.parameters})
    answer: dict[str, Any] = {"loaded": schemas}
    if unknown:
        answer["unknown"] = unknown
        answer["hint"] = "these are not tools of this agent; the system prompt lists the ones it has"
    return answer
