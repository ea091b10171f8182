"""The composition root: the `tickwork` command and `tickwork up`. Wiring only.

It is also the public face for plugin authors (worker/tools/plugins.py): ``from tickwork import
tool`` marks a vendor function as a tool of a class (read, send, write or delete), and
``tickwork.ToolContext`` is what such a function receives first. Both are looked up when first
asked for, so importing any part of tickwork does not load the worker.
"""

from typing import Any

__all__ = ["ToolContext", "tool"]


def __getattr__(name: str) -> Any:
    if name == "tool":
        from tickwork.worker.tools.registry import tool

        return tool
    if name == "ToolContext":
        from tickwork.worker.toolbox import ToolContext

        return ToolContext
    raise AttributeError(f"module 'tickwork' has no attribute {name!r}")
