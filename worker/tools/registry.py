"""The tool catalog: vendor packages discovered by convention, schemas derived from type hints.

A vendor is a package under ``worker/vendors/``; each function it marks with ``@tool`` becomes
``vendor.function``. Nothing lists vendors centrally: adding a folder adds its tools.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, create_model

from tickwork.sql.vocabulary import ToolClass

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
        module = importlib.import_module(f"{package}.{info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            tool_class = getattr(function, _MARK, None)
            if tool_class is not None:
                specs.append(ToolSpec(f"{info.name}.{name}", tool_class, False,
                                      inspect.getdoc(function) or "", parameters_schema(function),
                                      function, arguments_model(function),
                                      getattr(function, _APPROVAL, None)))
    return specs


# Harness tools, run inside the worker and never metered. Their arguments are declared here so
# that the model sees them and so that it can pass nothing else (no limits of its own choosing).
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanStep(_Strict):
    title: str
    status: Literal["pending", "in_progress", "completed"]


class UpdatePlanArguments(_Strict):
    steps: list[PlanStep]


class TaskCompleteArguments(_Strict):
    summary: str = ""


class ReadFileArguments(_Strict):
    file_ref: str
    offset: int = 0
    limit: int = 4000


class QueryFileArguments(_Strict):
    file_ref: str
    sql: str


LOCAL_TOOLS = (
    ("update_plan", "write", "Record the plan: steps with title and status.", UpdatePlanArguments),
    ("task_complete", "write", "Declare the task complete.", TaskCompleteArguments),
    ("read_file", "read", "Read a stored tool result by its file reference.", ReadFileArguments),
    ("query_file", "read", "Run one SQL SELECT over a stored tool result, seen as a table "
                           "named result.", QueryFileArguments),
)


def catalog() -> list[ToolSpec]:
    local = [ToolSpec(key, cls, True, text, schema_of(model), None, model)  # type: ignore[arg-type]
             for key, cls, text, model in LOCAL_TOOLS]
    return sorted(local + vendor_tools(), key=lambda spec: spec.key)
