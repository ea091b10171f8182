"""The MCP servers a worker connects to, read from the YAML file named by TICKWORK_TOOLS_FILE:

    mcp:
      - name: files                       # tools publish as files.TOOL
        command: [npx, -y, some-mcp-server, /srv/data]   # stdio: the worker spawns it
        tools: [read_file, list_dir]      # optional allowlist (default: every tool it lists)
        classes: {read_file: read}        # a tool not named here waits for approval
      - name: crm
        url: https://mcp.example.com/mcp  # streamable HTTP
        headers: {Authorization: "secret:CRM_TOKEN"}   # the calling tenant's secret

Every problem is one sentence naming the entry and the field; a bad file stops the worker at
start (tickwork/cli.py), it is never half applied.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tickwork.sql.vocabulary import TOOL_CLASSES

ENV = "TICKWORK_TOOLS_FILE"
SERVER_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")  # a vendor name (worker/tools/plugins.py)
SECRET_PREFIX = "secret:"
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
FIELDS = {"name", "command", "url", "headers", "tools", "classes"}


class ToolsFileError(ValueError):
    """One sentence saying what is wrong with the tools file, and where."""


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    # Header -> a literal value, or "secret:NAME" (the calling tenant's secret).
    headers: dict[str, str] = field(default_factory=dict)
    tools: frozenset[str] | None = None  # None: every tool the server lists
    classes: dict[str, str] = field(default_factory=dict)

    @property
    def secret_headers(self) -> bool:
        """Whether the connection depends on the tenant (then it is made per tenant)."""
        return any(v.startswith(SECRET_PREFIX) for v in self.headers.values())


def load_tools_file(path: str | None = None) -> list[McpServerConfig]:
    """The servers of ``path`` (default: $TICKWORK_TOOLS_FILE; none set: no servers)."""
    path = os.environ.get(ENV, "") if path is None else path
    if not path:
        return []
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ToolsFileError(f"{ENV} names {path!r}, which cannot be read: "
                             f"{exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise ToolsFileError(f"the tools file {path} is not valid YAML{at}") from None
    return parse_tools(data, path)


def parse_tools(data: Any, path: str = "the tools file") -> list[McpServerConfig]:
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) - {"mcp"}:
        raise ToolsFileError(f"{path} must be a mapping with one key, mcp (a list of servers)")
    entries = data.get("mcp") or []
    if not isinstance(entries, list):
        raise ToolsFileError(f"{path}: mcp must be a list of servers")
    servers: list[McpServerConfig] = []
    for index, entry in enumerate(entries):
        server = _server(entry, f"{path}: mcp entry {index + 1}")
        if server.name in {s.name for s in servers}:
            raise ToolsFileError(f"{path}: mcp entry {index + 1} repeats the name {server.name!r}")
        servers.append(server)
    return servers


def _server(entry: Any, where: str) -> McpServerConfig:
    if not isinstance(entry, dict):
        raise ToolsFileError(f"{where} must be a mapping with name and command or url")
    name = entry.get("name")
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name):
        raise ToolsFileError(f"{where}: name must be a lowercase letter, then up to 39 lowercase "
                             f"letters, digits or underscores (got {name!r})")
    where = f"{where} ({name})"
    unknown = sorted(set(entry) - FIELDS)
    if unknown:
        raise ToolsFileError(f"{where}: unknown field {unknown[0]!r} (known: "
                             f"{', '.join(sorted(FIELDS))})")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ToolsFileError(f"{where}: give exactly one of command (a list: program, then its "
                             "arguments) or url")
    command: tuple[str, ...] = ()
    url = ""
    if has_command:
        value = entry["command"]
        if (not isinstance(value, list) or not value
                or not all(isinstance(a, str) and a and "\0" not in a for a in value)):
            raise ToolsFileError(f"{where}: command must be a non-empty list of strings (program, "
                                 "then its arguments)")
        command = tuple(value)
    else:
        url = entry["url"]
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ToolsFileError(f"{where}: url must be an http:// or https:// address "
                                 f"(got {url!r})")
    headers = _headers(entry.get("headers"), where, has_url)
    tools = _names(entry.get("tools"), where, "tools")
    classes = _classes(entry.get("classes"), where)
    if tools is None and any(v.startswith(SECRET_PREFIX) for v in headers.values()):
        # Its connection is the calling tenant's, made at the first call: at start there is
        # no tenant to list its tools as, so the file names them.
        raise ToolsFileError(f"{where}: a server whose headers use a secret needs a tools list "
                             "(its tools are listed per tenant, not at start)")
    return McpServerConfig(name, command, url, headers,
                           frozenset(tools) if tools is not None else None, classes)


def _headers(value: Any, where: str, has_url: bool) -> dict[str, str]:
    if value is None:
        return {}
    if not has_url:
        raise ToolsFileError(f"{where}: headers are for url servers only")
    if not isinstance(value, dict):
        raise ToolsFileError(f"{where}: headers must be a mapping of header to value")
    for header, text in value.items():
        if not isinstance(header, str) or not HEADER_NAME.fullmatch(header):
            raise ToolsFileError(f"{where}: headers: {header!r} is not a header name")
        if not isinstance(text, str) or any(c in text for c in "\r\n\0"):
            raise ToolsFileError(f"{where}: headers: {header} must be one line of text, or "
                                 "\"secret:NAME\"")
        if text.startswith(SECRET_PREFIX) and not SECRET_NAME.fullmatch(
                text[len(SECRET_PREFIX):]):
            raise ToolsFileError(f"{where}: headers: {header} names no valid secret "
                                 f"({text!r}; expected secret:NAME)")
    return dict(value)


def _names(value: Any, where: str, what: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
        raise ToolsFileError(f"{where}: {what} must be a list of tool names")
    return value


def _classes(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolsFileError(f"{where}: classes must be a mapping of tool name to class")
    for tool, tool_class in value.items():
        if tool_class not in TOOL_CLASSES:
            raise ToolsFileError(f"{where}: classes: {tool} must be one of "
                                 f"{', '.join(sorted(TOOL_CLASSES))} (got {tool_class!r})")
    return {str(k): v for k, v in value.items()}
