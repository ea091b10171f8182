"""A server whose `hang` tool never answers (its `echo` does): a call must be stopped by the
worker's tool timeout, and the session must go on serving."""

from __future__ import annotations

import asyncio

from mcp.server.mcpserver import MCPServer

app = MCPServer("hangs")


@app.tool()
async def hang() -> str:
    """Wait forever."""
    await asyncio.Event().wait()
    return "never"


@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


if __name__ == "__main__":
    app.run()
