"""Tool calls made by code in run_python's sandbox: each one an ordinary tool call.

The sandbox (worker/tools/python_sandbox.py) hands every ``tools.call(name, **arguments)`` here,
and here it goes down the same path as a call the model makes (worker/calls.py admit, then
execute, exactly as process_call does):
the walls meter it in the run's own meter (so the per-tool wall of 40 refuses the 41st call of
a loop), its class decides whether a person must approve it, its result is offloaded and
stored like any, and its journal events hang under the run_python call's tool_start.

Names: the harness names each ``{run_python call id}_{n}`` (n counting from 1 within the
cell). The run_python call's id is unique in the run chain, so these are too; and a cell run
again after a retry gives its calls the same names, so a call whose effect was recorded in the
tool-call store is replayed, not run again.

A call that needs a person is not run: code cannot wait for a decision. It is journaled as a
refusal (wall ``needs_approval``), the code gets ``tools.NeedsApproval`` with that text, and
run_python's result lists it so the model can call the tool directly, where a person approves.
"""

from __future__ import annotations

import json
from typing import Any

from tickwork.sql.journal import RunJournal
from tickwork.worker.calls import CallPolicy, NeedsApproval, admit, execute, refused
from tickwork.worker.model import Message, ToolCall, canonical_name
from tickwork.worker.state import RunState
from tickwork.worker.toolbox import ToolBox, refusal
from tickwork.worker.tools.python_sandbox import CallBridge

# Not callable from code: the kernel is busy running the cell that would call it.
NOT_FROM_CODE = frozenset({"run_python"})


def code_bridge(state: RunState, toolbox: ToolBox, journal: RunJournal,
                policy: CallPolicy) -> CallBridge:
    async def call_from_code(name: str, arguments: dict[str, Any], parent: int, call_id: str,
                             index: int) -> tuple[bool, str, bool]:
        call = ToolCall(f"{call_id}_{index}", name, arguments)
        if canonical_name(name) in NOT_FROM_CODE:
            text = refusal(name, "run_python cannot be called from its own code",
                           "do the work in this code directly")
            refused(journal, call, "not_from_code", text, parent)
            return False, text, False
        if journal.cancel_requested:  # a person stopped the run: no more effects from code
            text = refusal(name, "a person cancelled the run", "stop")
            refused(journal, call, "cancelled", text, parent)
            return False, text, False
        result = await admit(call, state, toolbox, journal, policy, parent)
        if isinstance(result, Message):  # refused: unknown tool, or a wall
            return False, result.content, False
        if isinstance(result, NeedsApproval):
            text = refusal(result.spec.key, "it needs a person's approval, which a call from "
                           "code cannot wait for", f"call {result.spec.key} directly (not from "
                           "run_python) so a person can approve it")
            refused(journal, call, "needs_approval", text, parent)
            return False, text, True
        done = await execute(call, result, toolbox, journal, policy, parent,
                             auto_approved=result.key in policy.auto_approve)
        return not _is_error(done.content), done.content, False
    return call_from_code


def _is_error(text: str) -> bool:
    """A tool's failure is the toolbox's {"error": …[, "what_to_do": …]} object."""
    if not text.startswith("{"):
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and "error" in value and set(value) <= {"error", "what_to_do"}
