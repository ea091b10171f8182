"""A plugin vendor module that imports and declares one tool."""

from __future__ import annotations

from tickwork import ToolContext, tool


@tool("read")
async def whoami(ctx: ToolContext) -> dict:
    """The tenant and run of the call."""
    return {"tenant_id": str(ctx.tenant_id), "execution_id": str(ctx.execution_id)}
