"""Vendors that users bring: installed distributions declaring an entry point in the group
``tickwork.vendors``, as ``name = "package.module"``.

The module's ``@tool`` functions (``from tickwork import tool``) publish as ``name.function``
with the same rules as the built-in vendors: the class decides approval, the first parameter
is the run's context (tickwork.ToolContext). A plugin that fails to import, or whose name is
not a vendor name or is already taken, is logged and skipped: it costs only its own tools, and
the worker starts anyway.
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, entry_points
from typing import Iterable

import structlog

from tickwork.worker.tools.registry import ToolSpec, module_tools

log = structlog.get_logger()
GROUP = "tickwork.vendors"
VENDOR_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def plugin_tools(*, taken: set[str],
                 found: Iterable[EntryPoint] | None = None) -> list[ToolSpec]:
    """The tools of every installed plugin whose name is free; ``taken`` holds the keys of
    the tools already in the catalog (a plugin never replaces one)."""
    vendors_taken = {key.split(".", 1)[0] for key in taken}
    specs: list[ToolSpec] = []
    for entry in sorted(found if found is not None else entry_points(group=GROUP),
                        key=lambda e: e.name):
        problem = _name_problem(entry.name, vendors_taken)
        if problem is None:
            try:
                tools = module_tools(entry.name, entry.load())
            except Exception as exc:  # anything a plugin's import raises: its tools only
                problem = f"it failed to import: {type(exc).__name__}: {str(exc)[:300]}"
            else:
                if not tools:
                    problem = "its module has no @tool function"
        if problem is not None:
            log.warning("vendor_plugin_skipped", vendor=entry.name[:80], module=entry.value[:200],
                        reason=problem)
            continue
        vendors_taken.add(entry.name)
        specs += tools
        log.info("vendor_plugin_loaded", vendor=entry.name, tools=[s.key for s in tools])
    return specs


def _name_problem(name: str, taken: set[str]) -> str | None:
    if not VENDOR_NAME.fullmatch(name):
        return ("its name is not a vendor name (a lowercase letter, then up to 39 lowercase "
                "letters, digits or underscores)")
    if name in taken:
        return f"the vendor name {name!r} is already taken"
    return None
