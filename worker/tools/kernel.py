"""The Python kernel that runs inside a run's sandbox (worker/tools/python_sandbox.py).

This file is the program the sandboxed interpreter runs (passed as ``-c`` source, standard
library only, nothing of tickwork imported): a REPL over a line-delimited JSON protocol on its
stdin/stdout. Each ``run`` request executes a cell in one namespace kept for the sandbox's life
(variables persist), captures what it prints within a bound, and evaluates the last expression
like a notebook cell. ``tools.call(name, **args)`` writes a ``call`` line and blocks until the
worker answers with the tool's result, so every call from code is an ordinary tool call made by
the worker, never by the sandbox (which has no network).

Protocol (one JSON object per line):
  worker -> kernel  {"op": "run", "code": str}
                    {"op": "answer", "ok": bool, "result": str}     (to a pending call)
  kernel -> worker  {"op": "call", "name": str, "arguments": dict}
                    {"op": "done", "stdout": str, "truncated": bool, "value": any | null,
                     "error": str | null}
"""

KERNEL_SOURCE = r'''
import ast, io, json, os, sys, traceback

MAX_OUTPUT = int(sys.argv[1])
MAX_LINE = int(sys.argv[2])
# The protocol keeps private copies of the pipes; fds 0 and 1 then point nowhere, so code that
# writes to them directly (os.write, a child process) cannot forge a protocol line.
_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)


def _send(message):
    _out.write(json.dumps(message, default=str) + "\n")
    _out.flush()


class _Capture(io.TextIOBase):
    """What the code prints, kept up to MAX_OUTPUT characters (a flood is cut, not stored)."""

    def __init__(self):
        self.parts, self.size, self.truncated = [], 0, False

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = MAX_OUTPUT - self.size
        if len(text) > room:
            self.truncated = True
            text = text[:max(room, 0)]
        if text:
            self.parts.append(text)
            self.size += len(text)
        return len(text)

    def text(self):
        return "".join(self.parts)


class ToolError(Exception):
    """A tool call from code that did not succeed (refused by a wall, failed, or not run)."""


class NeedsApproval(ToolError):
    """The tool needs a person's approval, which a call from code cannot wait for."""


class _Tools:
    ToolError = ToolError
    NeedsApproval = NeedsApproval

    def call(self, name, **arguments):
        """Call one of the run's tools; returns its result (parsed JSON when it is JSON)."""
        line = json.dumps({"op": "call", "name": str(name), "arguments": arguments},
                          default=str)
        if len(line) > MAX_LINE:
            raise ToolError(f"the arguments of {name} are too large ({len(line)} characters)")
        _out.write(line + "\n")
        _out.flush()
        answer = json.loads(_in.readline() or '{"ok": false, "result": "worker gone"}')
        result = answer.get("result", "")
        try:
            value = json.loads(result)
        except ValueError:
            value = result
        if answer.get("approval"):
            raise NeedsApproval(result)
        if not answer.get("ok"):
            raise ToolError(result)
        return value


tools = _Tools()
namespace = {"__name__": "__main__", "tools": tools}


def _value(value):
    """The last expression's value: as JSON when it is JSON-able and small, else its repr."""
    if value is None:
        return None
    try:
        text = json.dumps(value)
        if len(text) <= MAX_OUTPUT:
            return value
    except (TypeError, ValueError, RecursionError):
        pass
    text = repr(value)
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + " ...(cut)"


def _run(code):
    capture = _Capture()
    sys.stdout = sys.stderr = capture
    value, error = None, None
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body.pop()
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
    except BaseException as exc:  # the code's own failure (sys.exit too) is the model's information
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        error = "".join(line for line in lines if 'File "<string>"' not in line)[-4000:]
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        value = _value(value)
    except BaseException as exc:
        value, error = None, f"the value could not be shown: {type(exc).__name__}"
    _send({"op": "done", "stdout": capture.text(), "truncated": capture.truncated,
           "value": value, "error": error})


_send({"op": "ready"})
for line in _in:
    request = json.loads(line)
    if request.get("op") == "run":
        _run(request.get("code", ""))
'''
