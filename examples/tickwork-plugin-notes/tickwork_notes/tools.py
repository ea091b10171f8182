"""The notes vendor: each function marked with @tool is a tool named notes.<function>.

The first parameter is the run's context (tickwork.ToolContext): the tenant the run belongs to,
the run's id and an idempotency key that stays the same when a retry makes the same call again.
The other parameters, with their type hints, are the tool's arguments; the docstring is the
description the model reads.
"""

from __future__ import annotations

from tickwork import ToolContext, tool

# A real vendor would call an API here. The example keeps notes in memory, per tenant, and
# files each one under the call's idempotency key, so a call made twice is kept once.
_NOTES: dict[str, dict[str, str]] = {}


@tool("write")
async def remember(ctx: ToolContext, text: str) -> dict:
    """Keep a note for this tenant; a repeated call (same idempotency key) keeps it once."""
    notes = _NOTES.setdefault(str(ctx.tenant_id), {})
    notes[ctx.idempotency_key] = text
    return {"kept": True, "tenant_id": str(ctx.tenant_id), "key": ctx.idempotency_key,
            "notes": len(notes)}


@tool("read")
async def recall(ctx: ToolContext) -> list[str]:
    """The notes kept for this tenant, oldest first."""
    return list(_NOTES.get(str(ctx.tenant_id), {}).values())
