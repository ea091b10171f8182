"""A server whose `crash` tool kills its own process mid-call; `pid` says which process
answers, so a test sees the worker start it again."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("crashes")


@app.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@app.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    app.run()
