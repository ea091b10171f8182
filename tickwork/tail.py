"""`tickwork tail RUN_ID`: follow a run's journal live and draw it as a tree.

Three parts, kept apart so that each can be tested alone:

- ``SseParser``: Server-Sent Events text to events (``id:``, ``event:``, multi-line ``data:``,
  comments, CR / LF / CRLF line ends, dispatch on a blank line).
- ``Follower``: the network side. It streams ``GET /v1/runs/{id}/events`` and, after a drop
  (connection error, read timeout, server restart), reconnects from the last seq it saw
  (``Last-Event-ID``) with backoff, handing every journal event on exactly once, in seq order.
- ``build_view`` / ``render`` / ``view_lines``: pure functions from a list of events to the
  tree (rebuilt from ``parent_seq`` alone), as a rich renderable or as plain text lines.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import httpx
import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from tickwork.client import err, fail
from tickwork.settings import ClientSettings

KEEPALIVE_SECONDS = 15
READ_TIMEOUT_SECONDS = 30.0  # longer than the keepalive: silence past it means the link is dead
FIRST_DELAY, MAX_DELAY, GIVE_UP_AFTER = 0.5, 5.0, 60.0
TERMINAL_STATUSES = {"completed", "failed", "cancelled"}

# --------------------------------------------------------------------------------------------
# Server-Sent Events


@dataclass(frozen=True)
class SseEvent:
    event: str  # "message" when the server named no type
    data: str
    id: str | None  # the last event id in force when this event was dispatched


class SseParser:
    """Incremental SSE parser after the WHATWG spec: feed text chunks, get events back."""

    def __init__(self) -> None:
        self._buffer = ""
        self._pending_cr = False  # a chunk ended in CR: a LF starting the next one belongs to it
        self._started = False
        self._event, self._data = "", []
        self.last_id: str | None = None

    def feed(self, chunk: str) -> list[SseEvent]:
        if not self._started and chunk:
            self._started = True
            chunk = chunk.removeprefix("\ufeff")
        if self._pending_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        self._pending_cr = False
        events: list[SseEvent] = []
        text = self._buffer + chunk
        start = 0
        for index, char in _line_ends(text):
            line = text[start:index]
            if char == "\r" and index + 1 < len(text) and text[index + 1] == "\n":
                start = index + 2
            else:
                start = index + 1
                if char == "\r" and index + 1 == len(text):
                    self._pending_cr = True
            dispatched = self._line(line)
            if dispatched is not None:
                events.append(dispatched)
        self._buffer = text[start:]
        return events

    def _line(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (the server's keepalive)
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None  # "retry" and unknown fields are ignored

    def _dispatch(self) -> SseEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SseEvent(event or "message", "\n".join(data), self.last_id)


def _line_ends(text: str) -> Iterator[tuple[int, str]]:
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\n":
            yield index, char
        elif char == "\r":
            yield index, char
            if index + 1 < len(text) and text[index + 1] == "\n":
                index += 1  # CRLF is one line end
        index += 1


def parse_sse(chunks: Iterable[str]) -> Iterator[SseEvent]:
    parser = SseParser()
    for chunk in chunks:
        yield from parser.feed(chunk)


# --------------------------------------------------------------------------------------------
# Following the stream


class TailError(Exception):
    """A reason to stop tailing, in a sentence for the operator."""


class _Drop(Exception):
    """The stream broke (or ended early): reconnect from the last event seen."""


@dataclass(frozen=True)
class Ending:
    status: str | None
    outcome: str | None
    reason: str | None = None


class Follower:
    """Streams one run's journal, reconnecting after drops; ``on_event`` sees each event once."""

    def __init__(self, http: httpx.Client, run_id: str, on_event: Callable[[dict], None], *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 give_up_after: float = GIVE_UP_AFTER,
                 on_retry: Callable[[str], None] | None = None) -> None:
        self.http, self.run_id, self.on_event = http, run_id, on_event
        self.sleep, self.clock, self.give_up_after = sleep, clock, give_up_after
        self.on_retry = on_retry or (lambda _note: None)
        self.problem: str | None = None  # while reconnecting: what went wrong, for the display
        self.last_seq = 0
        self.ending: Ending | None = None
        self._connected_once = False
        self._failing_since: float | None = None
        self._delay = FIRST_DELAY

    def run(self) -> Ending:
        while True:
            try:
                self._stream_once()
                if self.ending is None:
                    self._settle()  # a clean close without run_complete: did the run end?
                if self.ending is not None:
                    return self.ending
                problem = "the server closed the stream before the run ended"
            except _Drop as exc:
                problem = str(exc)
            except httpx.TransportError as exc:
                if not self._connected_once and isinstance(exc, httpx.ConnectError):
                    raise TailError(f"cannot reach the tickwork API at {self.http.base_url} "
                                    f"({exc}); is it running? (set TICKWORK_API_URL)") from exc
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self._back_off(problem)

    def _stream_once(self) -> None:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        params = {}
        if self.last_seq:
            headers["Last-Event-ID"] = str(self.last_seq)
            params["after"] = self.last_seq
        with self.http.stream("GET", self._path("/events"), headers=headers,
                              params=params) as response:
            self._check(response)
            self._connected_once, self.problem = True, None
            kind = response.headers.get("content-type", "")
            if not kind.startswith("text/event-stream"):
                raise TailError(f"the API at {self.http.base_url} answered {kind or 'no type'} "
                                "instead of an event stream (text/event-stream); is it a "
                                "tickwork API with the live tail?")
            parser = SseParser()
            for chunk in response.iter_text():
                self._alive()  # any bytes (an event or a keepalive) prove the link works
                for sse in parser.feed(chunk):
                    self._accept(_journal_event(sse))
                    if self.ending is not None:
                        return

    def _accept(self, event: dict | None) -> None:
        if event is None or event["seq"] <= self.last_seq:
            return  # not a journal event, or one already handed on before a reconnect
        self.last_seq = event["seq"]
        self.on_event(event)
        if event.get("type") == "run_complete":
            payload = event.get("payload") or {}
            self.ending = Ending(payload.get("status"), payload.get("outcome"),
                                 payload.get("reason"))

    def _settle(self) -> None:
        """After a clean close without run_complete: if the run has ended, hand on any events
        left in the stored journal and end; otherwise the caller reconnects."""
        run = self._json(self._path(""))
        if run.get("status") not in TERMINAL_STATUSES or run.get("breadcrumb") == "suspended":
            return
        stored = self._json(self._path("/events"), params={"after": self.last_seq})
        for event in sorted(stored.get("items", []), key=lambda e: e["seq"]):
            self._accept(event)
        if self.ending is None:  # e.g. cancelled while still queued: no journal at all
            self.ending = Ending(run.get("status"), run.get("outcome"), run.get("reason"))

    def _json(self, path: str, params: dict | None = None) -> dict:
        response = self.http.get(path, params=params, headers={"Accept": "application/json"})
        self._check(response)
        return response.json()

    def _check(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise _Drop(f"the API answered {response.status_code}")
        response.read()
        message = _message(response)
        if response.status_code in (401, 403):
            raise TailError(f"the API refused the token ({response.status_code}: {message}); "
                            "set TICKWORK_TOKEN to an operator token of the run's tenant")
        if response.status_code == 404:
            raise TailError(f"no run {self.run_id} ({message}); list runs with `tickwork runs`")
        raise TailError(f"the API answered {response.status_code}: {message}")

    def _alive(self) -> None:
        self._failing_since, self._delay, self.problem = None, FIRST_DELAY, None

    def _back_off(self, problem: str) -> None:
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= self.give_up_after:
            raise TailError(
                f"lost the event stream of run {self.run_id} and could not get it back for "
                f"{self.give_up_after:.0f} s ({problem}); the last event seen was seq "
                f"{self.last_seq}. Run `tickwork tail {self.run_id}` again to resume.")
        self.problem = (f"connection lost ({problem}); reconnecting from seq {self.last_seq} "
                        f"in {self._delay:g} s")
        self.on_retry(self.problem)
        self.sleep(self._delay)
        self._delay = min(self._delay * 2, MAX_DELAY)

    def _path(self, suffix: str) -> str:
        return f"/v1/runs/{self.run_id}{suffix}"


def _journal_event(sse: SseEvent) -> dict | None:
    try:
        event = json.loads(sse.data)
    except ValueError:
        return None
    if not isinstance(event, dict) or not isinstance(event.get("seq"), int):
        return None
    return event


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return response.text[:300] or response.reason_phrase


# --------------------------------------------------------------------------------------------
# The tree (pure)

OK, FAILED, RUNNING, WAITING, AGAIN, ASKS = "✓", "✗", "…", "⏸", "↻", "?"
MARK_STYLES = {OK: "bold green", FAILED: "bold red", RUNNING: "yellow", WAITING: "bold yellow",
               AGAIN: "cyan", ASKS: "magenta"}
GATE_MARKS = {"done": OK, "plan_complete": OK, "question": ASKS, "stalled": AGAIN,
              "plan_open": AGAIN, "stalled_out": FAILED, "hard_stop": FAILED,
              "cancelled": FAILED}


@dataclass
class Node:
    kind: str  # run, step, tool, refusal, gate, approval, reasoning, note, end, event
    text: str
    mark: str = ""
    style: str = ""
    seq: int | None = None
    children: list["Node"] = field(default_factory=list)
    started: datetime | None = None


@dataclass
class RunView:
    run_id: str
    root: Node
    status: str = "waiting to start"
    outcome: str | None = None
    answer: str = ""
    waiting_for: str | None = None  # an approval id while the run is suspended
    last_seq: int = 0


def build_view(run_id: str, events: Iterable[dict]) -> RunView:
    """The run's tree from its events: each event hangs under its ``parent_seq``."""
    root = Node("run", f"run {run_id}")
    view = RunView(run_id, root)
    nodes: dict[int, Node] = {}
    tools: dict[str, Node] = {}  # by call id
    approvals: dict[str, tuple[Node, dict]] = {}  # by call id
    answer: list[tuple[Any, str]] = []
    for event in sorted(events, key=lambda e: e["seq"]):
        kind, seq, payload = event.get("type"), event["seq"], event.get("payload") or {}
        view.last_seq = seq
        parent = nodes.get(event.get("parent_seq"), root)
        if view.waiting_for is not None and kind != "approval_required":
            view.waiting_for, view.status = None, "running"  # the run was resumed
        if kind == "run_start":
            nodes[seq] = root
            view.status = "running"
            if (payload.get("attempt") or 1) > 1:
                root.text = f"run {run_id} (attempt {payload['attempt']})"
            continue
        if kind == "tool_complete":
            tool = nodes.get(event.get("parent_seq"))
            if tool is None or tool.kind != "tool":
                tool = tools.get(str(payload.get("call_id")))
            if tool is not None:
                _complete_tool(tool, payload, _parse_ts(event.get("ts")))
                nodes[seq] = tool
            continue
        if kind == "content_delta":
            answer.append((event.get("parent_seq"), str(payload.get("text") or "")))
            continue
        node = _node(kind, payload, event)
        if kind == "tool_start":
            tools[str(payload.get("call_id"))] = node
            _resolve_approval(approvals, payload, approved=True)
        elif kind == "budget_refusal" and payload.get("wall") == "approval_rejected":
            _resolve_approval(approvals, payload, approved=False)
        elif kind == "approval_required":
            approvals[str(payload.get("call_id"))] = (node, payload)
            view.waiting_for, view.status = str(payload.get("approval_id")), "waiting for approval"
        elif kind == "run_complete":
            view.outcome = payload.get("outcome")
            view.status = str(view.outcome or payload.get("status") or "ended")
        parent.children.append(node)
        nodes[seq] = node
    view.answer = _join_answer(answer)
    return view


def _node(kind: str | None, payload: dict, event: dict) -> Node:
    seq = event["seq"]
    if kind == "step_start":
        node = Node("step", f"step {payload.get('turn', '?')}", style="bold", seq=seq)
        if payload.get("turn_warning"):
            node.children.append(Node("note", _short(payload["turn_warning"]), mark="!",
                                      style="yellow"))
        return node
    if kind == "reasoning_delta":
        return Node("reasoning", _short(str(payload.get("text") or "")), mark="·",
                    style="dim italic", seq=seq)
    if kind == "tool_start":
        return Node("tool", _call_text(payload), mark=RUNNING, seq=seq,
                    started=_parse_ts(event.get("ts")))
    if kind == "budget_refusal":
        return Node("refusal", f"{payload.get('tool')} refused by the {payload.get('wall')} wall",
                    mark=FAILED, style="red", seq=seq)
    if kind == "gate_decision":
        verdict = str(payload.get("verdict"))
        text = f"gate: {verdict}"
        if payload.get("reason"):
            text += f": {_short(str(payload['reason']))}"
        if payload.get("units_left") is not None:
            text += f" ({payload['units_left']} units left)"
        node = Node("gate", text, mark=GATE_MARKS.get(verdict, ASKS), seq=seq)
        if payload.get("injected"):
            node.children.append(Node("note", f"told the model: {_short(str(payload['injected']))}",
                                      style="dim"))
        return node
    if kind == "approval_required":
        approval = payload.get("approval_id")
        return Node("approval", f"waiting for approval: {_call_text(payload)}; "
                    f"`tickwork approve {approval}` or `tickwork reject {approval}`",
                    mark=WAITING, style="yellow", seq=seq)
    if kind == "run_complete":
        outcome = payload.get("outcome") or payload.get("status") or "ended"
        text = str(outcome) + (f": {_short(str(payload['reason']))}" if payload.get("reason") else "")
        if payload.get("retry_id"):
            text += f" (retried as run {payload['retry_id']})"
        return Node("end", text, mark=OK if outcome == "done" else FAILED, style="bold", seq=seq)
    return Node("event", str(kind), seq=seq, style="dim")


def _complete_tool(tool: Node, payload: dict, finished: datetime | None) -> None:
    ok = bool(payload.get("ok"))
    tool.mark, tool.style = (OK, "") if ok else (FAILED, "red")
    details = []
    # Journal ts is when an event was stored, and a turn's events are stored in one batch: a
    # tool that started and finished within one batch has no measurable duration, so none is
    # shown (rather than a false "0 ms"). A duration_ms in the payload wins when present.
    if isinstance(payload.get("duration_ms"), (int, float)):
        details.append(_duration(payload["duration_ms"] / 1000))
    elif tool.started and finished and (finished - tool.started).total_seconds() >= 0.001:
        details.append(_duration((finished - tool.started).total_seconds()))
    if payload.get("result_chars") is not None:
        details.append(f"{payload['result_chars']} chars")
    if payload.get("replayed"):
        details.append("replayed")
    if details:
        tool.text += f"  {', '.join(details)}"


def _resolve_approval(approvals: dict[str, tuple[Node, dict]], payload: dict, *,
                      approved: bool) -> None:
    node, asked = approvals.pop(str(payload.get("call_id")), (None, None))
    if node is None:
        return
    node.mark, node.style = (OK, "green") if approved else (FAILED, "red")
    node.text = ("approved: " if approved else "rejected: ") + _call_text(asked)


def _join_answer(parts: list[tuple[Any, str]]) -> str:
    joined, previous = "", object()
    for parent, text in parts:
        if joined and parent != previous:
            joined += "\n\n"
        joined += text
        previous = parent
    return joined


def _call_text(payload: dict) -> str:
    arguments = payload.get("arguments")
    shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True) if arguments else ""
    return f"{payload.get('tool')}({_short(shown, 80)})"


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def _parse_ts(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def header(view: RunView) -> str:
    return f"{view.root.text} · {view.status}"


def view_lines(view: RunView) -> list[str]:
    """The tree as plain text, two spaces of indent per level (for tests and plain output)."""
    lines = [header(view)]

    def walk(node: Node, depth: int) -> None:
        for child in node.children:
            lines.append("  " * depth + (f"{child.mark} " if child.mark else "") + child.text)
            walk(child, depth + 1)

    walk(view.root, 1)
    if view.answer:
        lines.extend(["", *view.answer.splitlines()])
    return lines


def render(view: RunView, max_children: int | None = None) -> RenderableType:
    """The tree with the answer below it; ``max_children`` keeps only the latest top-level
    entries (for a live display that must fit the screen)."""
    status_style = "green" if view.outcome == "done" else (
        "red" if view.outcome or view.status in ("failed", "cancelled") else "yellow")
    tree = Tree(Text.assemble((view.root.text, "bold"), " · ", (view.status, status_style)))
    children = view.root.children
    if max_children is not None and len(children) > max_children:
        hidden = len(children) - max_children
        tree.add(Text(f"… {hidden} earlier entries", style="dim"))
        children = children[hidden:]
    for child in children:
        _add(tree, child)
    if not view.answer:
        return tree
    return Group(tree, Text(""), Text(view.answer))


def _add(tree: Tree, node: Node) -> None:
    label = Text()
    if node.mark:
        label.append(node.mark, style=MARK_STYLES.get(node.mark, ""))
        label.append(" ")
    label.append(node.text, style=node.style)
    branch = tree.add(label)
    for child in node.children:
        _add(branch, child)


# --------------------------------------------------------------------------------------------
# The command


def tail_run(
    run_id: str = typer.Argument(..., help="The run's id (`tickwork runs` lists them)."),
    json_lines: bool = typer.Option(False, "--json",
                                    help="Print one event per line as JSON (seq order); no tree."),
) -> None:
    """Follow a run live as a tree: steps, tools, refusals, gate decisions, the answer.

    Reconnects from the last event it saw. Exit 0 when the run ends done, else 1."""
    settings = ClientSettings()
    if not settings.token:
        fail("set TICKWORK_TOKEN to an operator token (`tickwork up` prints one; "
             "`tickwork token create --tenant NAME` makes more)")
    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_SECONDS)
    with httpx.Client(base_url=settings.api_url, timeout=timeout,
                      headers={"Authorization": f"Bearer {settings.token}"}) as http:
        ending = _print_json(http, run_id) if json_lines else _draw(http, run_id)
    raise typer.Exit(0 if ending.outcome == "done" else 1)


def _print_json(http: httpx.Client, run_id: str) -> Ending:
    def emit(event: dict) -> None:
        sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
        sys.stdout.flush()

    try:
        return Follower(http, run_id, emit, on_retry=_note).run()
    except TailError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130)
    except BrokenPipeError:
        raise typer.Exit(1)


def _draw(http: httpx.Client, run_id: str) -> Ending:
    # Ids must stay whole when piped (rich would otherwise wrap the tree at 80 columns).
    console = Console(width=None if Console().is_terminal else 200)
    events: list[dict] = []
    follower = Follower(http, run_id, events.append,
                        on_retry=None if console.is_terminal else _note)

    def live_view() -> RenderableType:  # called by Live's refresh thread
        tree = render(build_view(run_id, list(events)), max_children=max(4, console.height // 3))
        problem = follower.problem
        return Group(tree, Text(problem, style="yellow")) if problem else tree

    try:
        if console.is_terminal:
            with Live(console=console, get_renderable=live_view, refresh_per_second=8,
                      transient=True, redirect_stderr=False):
                follower.run()
        else:  # piped: one final tree at the end, no redraws
            follower.run()
    except TailError as exc:
        _print_final(console, run_id, events)
        fail(str(exc))
    except KeyboardInterrupt:
        _print_final(console, run_id, events)
        raise typer.Exit(130)
    _print_final(console, run_id, events)
    return follower.ending


def _note(text: str) -> None:
    err.print(f"[yellow]note:[/yellow] {escape(text)}", highlight=False)


def _print_final(console: Console, run_id: str, events: list[dict]) -> None:
    if events:  # nothing received (an unknown run, a bad token): the error says it all
        console.print(render(build_view(run_id, list(events))), highlight=False)

