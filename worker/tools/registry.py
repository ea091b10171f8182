"""The tool catalog: vendor packages discovered by convention, schemas derived from type hints.

A vendor is a package under ``worker/vendors/``, or an installed distribution's entry point in
the group ``tickwork.vendors`` (worker/tools/plugins.py); each function it marks with ``@tool``
becomes ``vendor.function``. Nothing lists vendors centrally: adding a folder adds its tools.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, create_model

from tickwork.sql.vocabulary import ToolClass
from tickwork.worker.tools.local import LOCAL_TOOLS

_MARK = "__tickwork_tool_class__"
_APPROVAL = "__tickwork_approval__"
# Whether a call needs a person: a fixed flag, or a predicate over the call's arguments.
ApprovalRule = bool | Callable[[dict[str, Any]], bool] | None


@dataclass(frozen=True)
class ToolSpec:
    key: str
    # What the tool does; a spec built by hand may carry none or an unknown one, and then
    # every call waits for a person (deny by default: only "read" runs unasked).
    tool_class: ToolClass | str | None
    is_local: bool
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any] | None = None
    arguments: type[BaseModel] | None = None  # validates what the model passes
    approval: ApprovalRule = None  # None: decided by the tool's class (deny by default)


def tool(tool_class: ToolClass, *, approval: ApprovalRule = None
         ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a vendor function as a tool of the given class (read, send, write or delete).
    ``approval`` overrides the class default: True/False, or a predicate over the arguments."""
    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        setattr(function, _MARK, tool_class)
        setattr(function, _APPROVAL, approval)
        return function
    return mark


@functools.cache
def arguments_model(function: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of a tool's arguments, from its signature; the first parameter (the
    run's context) is not an argument the model passes. Unknown arguments are refused."""
    fields: dict[str, Any] = {}
    for name, param in list(inspect.signature(function).parameters.items())[1:]:
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (param.annotation, default)
    return create_model(f"{function.__name__}_arguments", __config__=ConfigDict(extra="forbid"),
                        **fields)


def parameters_schema(function: Callable[..., Any]) -> dict[str, Any]:
    """JSON schema of a tool's arguments, for the model and the catalog."""
    return schema_of(arguments_model(function))


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


def vendor_tools(package: str = "tickwork.worker.vendors") -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__):
        specs += module_tools(info.name, importlib.import_module(f"{package}.{info.name}"))
    return specs


def module_tools(vendor: str, module: Any) -> list[ToolSpec]:
    """The ``@tool`` functions of one vendor's module, as ``vendor.function``."""
    specs = []
    for name, function in inspect.getmembers(module, inspect.isfunction):
        tool_class = getattr(function, _MARK, None)
        if tool_class is not None:
            specs.append(ToolSpec(f"{vendor}.{name}", tool_class, False,
                                  inspect.getdoc(function) or "", parameters_schema(function),
                                  function, arguments_model(function),
                                  getattr(function, _APPROVAL, None)))
    return specs


def local_tools() -> list[ToolSpec]:
    """The harness's own tools (worker/tools/local.py LOCAL_TOOLS), run inside the worker; a
    local spec's function is the tool's handler, called with a LocalContext."""
    return [ToolSpec(tool.name, tool.tool_class, True, tool.description,
                     schema_of(tool.arguments), tool.run, tool.arguments)
            for tool in LOCAL_TOOLS]


def catalog() -> list[ToolSpec]:
    """Every tool a worker offers: local ones, built-in vendors, then installed plugins (a
    plugin never replaces a tool that is already there)."""
    from tickwork.worker.tools.plugins import plugin_tools

    built_in = local_tools() + vendor_tools()
    return sorted(built_in + plugin_tools(taken={spec.key for spec in built_in}),
                  key=lambda spec: spec.key)
