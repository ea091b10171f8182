"""A server that answers with a huge result, and one that lies about its tools: `bad` has an
input schema that is not a valid JSON schema."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("huge")


@app.tool()
def huge(chars: int) -> str:
    """A text of ``chars`` characters."""
    return "x" * chars


@app.tool()
def bad() -> str:
    """A tool whose listed schema is broken."""
    return "unreachable"


# The lie: `bad` is listed with a schema that is not a valid JSON schema.
app._tool_manager.get_tool("bad").parameters = {"type": "object", "properties": {"x": {"type": 7}}}

if __name__ == "__main__":
    app.run()
