"""MCP servers as vendors: each server of TICKWORK_TOOLS_FILE (worker/tools/mcp_config.py) is
a vendor whose tools publish as ``server.tool`` and are called through the same path as any
vendor tool (walls, approvals, journal, stored results, offload, the tool timeout).

- A tool the file gives no class waits for approval, whatever the server's annotations say;
  the annotations only pick the class the catalog shows (never ``read``).
- Each worker connects once per server at start. A server that cannot start within the
  connect timeout is disabled and logged: its tools are not published by this worker (an
  agent's run there does not see them), and the worker starts anyway. A server lost later is
  connected again with backoff; calls meanwhile get an error saying they did not execute.
- A server whose headers use ``secret:NAME`` is connected per tenant, at that tenant's first
  call, with the tenant's secrets in its headers (a connection carries one set of headers);
  its tools are the file's ``tools`` list, with an open schema (the server checks arguments).
- A tool whose schema is not a JSON schema of an object, or whose name a model cannot call,
  is left out (logged): a server that lies about its tools costs only those tools.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import structlog
from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import best_match
from mcp import types
from pydantic import BaseModel, ConfigDict, model_validator

from tickwork.worker.tools.mcp_client import (CONNECT_TIMEOUT, McpCallError, McpConnection,
                                              resolved_headers, why)
from tickwork.worker.tools.mcp_config import McpServerConfig
from tickwork.worker.tools.registry import ToolSpec

log = structlog.get_logger()
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A result's text past this is cut (and says so) before it is stored or offloaded: a server
# that answers with gigabytes costs the worker this much memory at most per call.
MAX_RESULT_CHARS = 2_000_000
OPEN_SCHEMA: dict[str, Any] = {"type": "object"}


@dataclass
class McpVendor:
    """One configured server: its shared connection, or its per-tenant ones."""

    config: McpServerConfig
    shared: McpConnection | None = None
    by_tenant: dict[UUID | None, McpConnection] = field(default_factory=dict)
    locks: dict[UUID | None, asyncio.Lock] = field(default_factory=dict)
    connect_timeout: float = CONNECT_TIMEOUT

    async def connection(self, context: Any) -> McpConnection:
        if self.shared is not None:
            return self.shared
        tenant = getattr(context, "tenant_id", None)
        # Read through this run's ctx.secret at every call, not only the first: the run then
        # scrubs the values from all it shows, and a secret set anew gets a new connection.
        headers = await resolved_headers(self.config, getattr(context, "secret", None))
        # One connection per tenant, even when its calls come at once; a tenant whose
        # connection is slow to open holds up no other tenant.
        async with self.locks.setdefault(tenant, asyncio.Lock()):
            found = self.by_tenant.get(tenant)
            if found is not None and found.headers != headers:
                del self.by_tenant[tenant]
                await found.aclose()
                found = None
            if found is None:
                found = McpConnection(self.config, headers, connect_timeout=self.connect_timeout)
                try:
                    await found.start()
                except Exception as exc:
                    raise McpCallError(f"the MCP server {self.config.name} could not be reached "
                                       f"({why(exc)}); the call did NOT execute") from None
                self.by_tenant[tenant] = found
            return found

    async def aclose(self) -> None:
        for connection in [self.shared, *self.by_tenant.values()]:
            if connection is not None:
                await connection.aclose()


class McpServers:
    """The servers a worker started, and the tool specs they publish."""

    def __init__(self, vendors: list[McpVendor], specs: list[ToolSpec]) -> None:
        self.vendors, self.specs = vendors, specs

    @classmethod
    async def start(cls, configs: list[McpServerConfig], *, taken: set[str] = frozenset(),
                    connect_timeout: float = CONNECT_TIMEOUT) -> McpServers:
        """Connect to every server at once; ``taken`` holds the vendor names already in the
        catalog (a server never replaces a vendor)."""
        vendors = [McpVendor(c, connect_timeout=connect_timeout) for c in configs
                   if _name_free(c, taken)]
        started = await asyncio.gather(*(_started(v) for v in vendors))
        kept = [v for v, ok in zip(vendors, started) if ok]
        return cls(kept, [spec for v in kept for spec in vendor_specs(v)])

    async def aclose(self) -> None:
        await asyncio.gather(*(v.aclose() for v in self.vendors))


def _name_free(config: McpServerConfig, taken: set[str]) -> bool:
    if config.name in taken:
        log.warning("mcp_server_disabled", server=config.name,
                    reason=f"the vendor name {config.name!r} is already taken")
        return False
    return True


async def _started(vendor: McpVendor) -> bool:
    if vendor.config.secret_headers:
        return True  # connected per tenant, at its first call
    connection = McpConnection(vendor.config, dict(vendor.config.headers),
                               connect_timeout=vendor.connect_timeout)
    try:
        await connection.start()
    except Exception as exc:  # anything starting it raised: this server's tools only
        log.warning("mcp_server_disabled", server=vendor.config.name,
                    reason=f"it could not be started: {why(exc)}")
        return False
    vendor.shared = connection
    return True


def vendor_specs(vendor: McpVendor) -> list[ToolSpec]:
    config = vendor.config
    if vendor.shared is None:
        listed = [types.Tool(name=n, input_schema=OPEN_SCHEMA) for n in sorted(config.tools or ())]
    else:
        listed = vendor.shared.tools
    specs = []
    for tool in listed:
        if config.tools is not None and tool.name not in config.tools:
            continue
        problem = _tool_problem(tool)
        if problem is not None:
            log.warning("mcp_tool_skipped", server=config.name, tool=str(tool.name)[:80],
                        reason=problem)
            continue
        specs.append(_spec(vendor, tool))
    log.info("mcp_server_tools", server=config.name, tools=[s.key for s in specs])
    return specs


def _tool_problem(tool: types.Tool) -> str | None:
    if not TOOL_NAME.fullmatch(tool.name):
        return "its name is not one a model can call (letters, digits, _ and -, up to 64)"
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its input schema is not a JSON schema of an object"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"its input schema is not a valid JSON schema: {exc.message[:200]}"
    return None


def _spec(vendor: McpVendor, tool: types.Tool) -> ToolSpec:
    given = vendor.config.classes.get(tool.name)
    tool_class = given or suggested_class(tool.annotations)
    schema = dict(tool.input_schema)
    schema.pop("title", None)

    async def call(context: Any, /, **arguments: Any) -> str:
        connection = await vendor.connection(context)
        result = await connection.call(tool.name, arguments)
        text = result_text(result)
        if result.is_error:
            raise McpCallError(text or f"the MCP server {vendor.config.name} reported an error")
        return text

    description = (tool.description or tool.title or "").strip()
    return ToolSpec(f"{vendor.config.name}.{tool.name}", tool_class, False,
                    description or f"{tool.name} (MCP server {vendor.config.name})",
                    schema, call, arguments_model(schema),
                    None if given else True)  # no class given: every call waits for a person


def suggested_class(annotations: types.ToolAnnotations | None) -> str:
    """The class the catalog shows for a tool the file did not classify. Its calls wait for
    approval whatever this says; a read-only hint is not believed (write, not read)."""
    if annotations is not None and annotations.destructive_hint:
        return "delete"
    if annotations is not None and annotations.open_world_hint:
        return "send"
    return "write"


def arguments_model(schema: dict[str, Any]) -> type[BaseModel]:
    """Arguments checked against the server's input schema, passed on as they are."""
    validator = Draft202012Validator(schema)

    class McpArguments(BaseModel):
        model_config = ConfigDict(extra="allow")

        @model_validator(mode="before")
        @classmethod
        def _fits(cls, data: Any) -> Any:
            error = best_match(validator.iter_errors(data))
            if error is not None:
                where = ".".join(map(str, error.absolute_path)) or "arguments"
                raise ValueError(f"{where}: {error.message[:300]}")
            return data

    return McpArguments


def result_text(result: types.CallToolResult) -> str:
    """The model's view of a result: its text items, others summarised; bounded."""
    parts: list[str] = []
    size = 0
    for item in result.content:
        if size > MAX_RESULT_CHARS:
            break
        text = _item_text(item)
        parts.append(text)
        size += len(text)
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str)[:MAX_RESULT_CHARS + 1])
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = (text[:MAX_RESULT_CHARS]
                + f"\n[cut: the server's result went past {MAX_RESULT_CHARS} characters]")
    return text


def _item_text(item: Any) -> str:
    kind = getattr(item, "type", "unknown")
    if kind == "text":
        return item.text
    if kind in ("image", "audio"):
        return f"[{kind} {item.mime_type}, {len(item.data)} base64 characters, not shown]"
    if kind == "resource_link":
        return f"[resource link {item.uri}]"
    if kind == "resource":
        resource = item.resource
        if getattr(resource, "text", None) is not None:
            return resource.text
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'}), not shown]"
    return f"[{kind} content, not shown]"
