"""A run's journal as a tree, rebuilt from ``parent_seq`` alone: pure functions from a list
of events to a rich renderable (``render``) or plain text lines (``view_lines``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from rich.console import Group, RenderableType
from rich.text import Text
from rich.tree import Tree

from tickwork.terminal_text import safe


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


USAGE_KEYS = ("input_tokens", "output_tokens", "model_calls")


@dataclass
class RunView:
    run_id: str
    root: Node
    status: str = "waiting to start"
    outcome: str | None = None
    answer: str = ""
    waiting_for: str | None = None  # an approval id while the run is suspended
    last_seq: int = 0
    # What the run spent: summed from model_usage events as they come; the total a terminal
    # run_complete carries (the execution's own figure) replaces the sum when present.
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS, 0))


def build_view(run_id: str, events: Iterable[dict]) -> RunView:
    """The run's tree from its events: each event hangs under its ``parent_seq``."""
    root = Node("run", f"run {run_id}")
    view = RunView(run_id, root)
    nodes: dict[int, Node] = {}
    tools: dict[str, Node] = {}  # by call id
    approvals: dict[str, tuple[Node, dict]] = {}  # by call id
    answer: list[tuple[Any, str]] = []
    for event in sorted(events, key=lambda e: e["seq"]):
        kind, seq, payload = event.get("type"), event["seq"], inert(event.get("payload") or {})
        view.last_seq = seq
        if kind == "model_usage":  # accounting, not a step of the run: summed, not drawn
            view.usage["input_tokens"] += _count(payload.get("input_tokens"))
            view.usage["output_tokens"] += _count(payload.get("output_tokens"))
            view.usage["model_calls"] += 1
            continue
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
            if isinstance(payload.get("usage"), dict):
                view.usage = {k: _count(payload["usage"].get(k)) for k in USAGE_KEYS}
        parent.children.append(node)
        nodes[seq] = node
    view.answer = _join_answer(answer)
    return view


def inert(value: Any) -> Any:
    """A payload with every string made safe for a terminal (model text reaches the screen
    raw otherwise: clipboard writes, clear screen, text overwritten by a carriage return)."""
    if isinstance(value, str):
        return safe(value)
    if isinstance(value, dict):
        return {key: inert(item) for key, item in value.items()}
    if isinstance(value, list):
        return [inert(item) for item in value]
    return value


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
    if kind == "provider_wait":  # parked through a model outage, no worker held
        return Node("wait", f"model unavailable (wait {payload.get('attempt', '?')}): trying "
                    f"again at {payload.get('until')}: {_short(str(payload.get('reason') or ''))}",
                    mark=AGAIN, style="yellow", seq=seq)
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


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def usage_text(view: RunView) -> str:
    """One line of what the run spent, or "" while no provider has reported tokens (a
    scripted run without usage figures prints exactly what it printed before)."""
    usage = view.usage
    if not (usage["input_tokens"] or usage["output_tokens"]):
        return ""
    calls = usage["model_calls"]
    return (f"usage: {usage['input_tokens']:,} tokens in, {usage['output_tokens']:,} out, "
            f"{calls} model call{'' if calls == 1 else 's'}")


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
    if usage_text(view):
        lines.extend(["", usage_text(view)])
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
    parts: list[RenderableType] = [tree]
    if view.answer:
        parts += [Text(""), Text(view.answer)]
    if usage_text(view):
        parts += [Text(""), Text(usage_text(view), style="dim")]
    return parts[0] if len(parts) == 1 else Group(*parts)


def _add(tree: Tree, node: Node) -> None:
    label = Text()
    if node.mark:
        label.append(node.mark, style=MARK_STYLES.get(node.mark, ""))
        label.append(" ")
    label.append(node.text, style=node.style)
    branch = tree.add(label)
    for child in node.children:
        _add(branch, child)


