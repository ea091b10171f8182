"""One live session with one MCP server (the official ``mcp`` SDK), kept up for the worker.

The SDK's transports are context managers that must be entered and left by one task, so each
connection has a task of its own that opens the transport and the session, lists the tools,
then watches the session (a ping now and then) until it is lost, and opens it again with
backoff. Calls from runs use the session it holds; a call stopped by the tool timeout
cancels only its own request, and the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
import structlog
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tickwork.worker.tools.mcp_config import McpServerConfig

log = structlog.get_logger()
CONNECTION_CLOSED = -32000
CONNECT_TIMEOUT = 15.0  # start, initialize and list tools
READY_WAIT = 10.0  # how long a call waits for a session being opened again
PING_EVERY = 15.0  # a session that stopped answering (hung, or its process gone) is reopened
BACKOFF = (0.5, 30.0)  # first and longest wait between reconnections


class McpCallError(Exception):
    """A call that failed on the server's side or on the way: its text is what the model
    is told."""


class McpConnection:
    def __init__(self, config: McpServerConfig, headers: dict[str, str] | None = None, *,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.config, self.headers = config, headers or {}
        self._connect_timeout = connect_timeout
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._lost = asyncio.Event()
        self._first: asyncio.Future[list[types.Tool]] | None = None
        self._task: asyncio.Task[None] | None = None
        self.tools: list[types.Tool] = []

    async def start(self) -> list[types.Tool]:
        """Connect and list the tools; raises (and keeps nothing running) when the first
        connection fails: a server that cannot start is the caller's to disable."""
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._keep(), name=f"mcp:{self.config.name}")
        try:
            # The connect timeout bounds initialize and the listing inside _keep; this bounds
            # the rest (spawning, the transport), so a start never waits forever.
            async with asyncio.timeout(self._connect_timeout * 2):
                return await asyncio.shield(self._first)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        name = self.config.name
        if not self._ready.is_set():
            try:
                async with asyncio.timeout(READY_WAIT):
                    await self._ready.wait()
            except TimeoutError:
                raise McpCallError(f"the MCP server {name} is not connected (it is being "
                                   "started again); the call did NOT execute: try again later, "
                                   "or continue without it") from None
        session = self._session
        assert session is not None
        try:
            result = await session.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._lost.set()
                raise McpCallError(f"the MCP server {name} closed its connection during the "
                                   "call (it is being started again); the call may or may not "
                                   "have had an effect: check before repeating it") from None
            raise McpCallError(f"the MCP server {name} refused the call: {exc.message}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            self._lost.set()
            raise McpCallError(f"the MCP server {name} is not connected (it is being started "
                               "again); the call did NOT execute: try again") from None
        if not isinstance(result, types.CallToolResult):
            raise McpCallError(f"the MCP server {name} answered with something other than a "
                               "tool result")
        return result

    async def _keep(self) -> None:
        delay = BACKOFF[0]
        while True:
            try:
                async with self._open() as session:
                    async with asyncio.timeout(self._connect_timeout):
                        await session.initialize()
                        self.tools = await listed_tools(session)
                    self._session = session
                    self._lost.clear()
                    self._ready.set()
                    if not self._first.done():
                        self._first.set_result(self.tools)
                    else:
                        log.info("mcp_server_reconnected", server=self.config.name)
                    delay = BACKOFF[0]
                    await self._watch(session)
                    log.warning("mcp_server_lost", server=self.config.name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # whatever the transport raises: reconnect, or disable
                if not self._first.done():
                    self._first.set_exception(exc)
                    return
                log.warning("mcp_server_lost", server=self.config.name, error=why(exc))
            finally:
                self._ready.clear()
                self._session = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF[1])

    async def _watch(self, session: ClientSession) -> None:
        """Return once the session is lost: a call saw it close, or a ping went unanswered."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_EVERY):
                    await self._lost.wait()
                    return
            try:
                async with asyncio.timeout(PING_EVERY):
                    await session.send_ping()
            except Exception:  # closed, refused or hung: open it again
                return

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[ClientSession]:
        config = self.config
        async with contextlib.AsyncExitStack() as stack:
            if config.command:
                # The SDK gives the child a minimal environment (PATH, HOME, ...): none of the
                # worker's own settings or keys.
                streams = await stack.enter_async_context(stdio_client(StdioServerParameters(
                    command=config.command[0], args=list(config.command[1:]))))
            else:
                client = await stack.enter_async_context(
                    create_mcp_http_client(headers=self.headers))
                streams = await stack.enter_async_context(
                    streamable_http_client(config.url, http_client=client))
            read, write = streams[0], streams[1]
            yield await stack.enter_async_context(ClientSession(read, write))


async def listed_tools(session: ClientSession) -> list[types.Tool]:
    """Every page of the server's tools/list (a bounded number of pages)."""
    tools: list[types.Tool] = []
    cursor = None
    for _ in range(100):
        page = await session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


HeaderSource = Callable[[str], Awaitable[str]]


async def resolved_headers(config: McpServerConfig, secret: HeaderSource | None
                           ) -> dict[str, str]:
    """The headers with each ``secret:NAME`` replaced by the calling tenant's secret."""
    headers = {}
    for header, value in config.headers.items():
        if value.startswith("secret:"):
            if secret is None:
                raise McpCallError(f"the MCP server {config.name} needs the tenant's secret "
                                   f"{value[7:]!r}, and this call has no tenant")
            value = await secret(value[7:])
        headers[header] = value
    return headers


def why(exc: BaseException) -> str:
    """The first real error inside the task groups the SDK wraps errors in, in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
