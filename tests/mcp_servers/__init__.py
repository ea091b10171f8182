"""Real MCP servers written with the official SDK (mcp.server.mcpserver.MCPServer), started
as processes by the tests: over stdio, or over streamable HTTP on a loopback port."""
