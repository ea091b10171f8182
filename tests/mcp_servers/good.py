"""A server that works: `python good.py` (stdio) or `python good.py --http PORT` (streamable
HTTP on 127.0.0.1). With --http it also checks an Authorization header when
GOOD_MCP_TOKEN is set, as a hosted server checks its caller's key."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("good")


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    return text


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe(what: str) -> str:
    """Pretend to delete something."""
    return f"wiped {what}"


@app.tool()
def oops() -> str:
    """Always fails on the server's side."""
    raise ToolError("the ledger is locked")


@app.tool()
def whoami(ctx: Context) -> str:
    """Whether this call came with the Authorization header GOOD_MCP_TOKEN asks for."""
    request = ctx.request_context.request
    given = request.headers.get("authorization", "") if request is not None else ""
    return "authorized" if given == f"Bearer {os.environ.get('GOOD_MCP_TOKEN')}" else "refused"


@app.tool()
def header(ctx: Context) -> str:
    """The Authorization header this call came with, as it is (a careless server's echo)."""
    request = ctx.request_context.request
    return request.headers.get("authorization", "") if request is not None else ""


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        app.run("streamable-http", host="127.0.0.1", port=port)
    else:
        app.run()
