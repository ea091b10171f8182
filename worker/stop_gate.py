"""The stop gate: what a turn without tool calls means (DESIGN.md, "The stop gate").

A turn with no tool call is the only place a run can stop, and one signal hides three cases:
done (a real, complete answer), question (deliberately asking the user) and stalled (the task
unfinished without asking: narrated an action it never took, partial data, a skipped step).

0. A reply with neither text nor a tool call is stalled at once (``decide_empty``): there is
   no answer to judge, so it is never done.
1. A plan decides first: any open step rejects the stop and names that step; all steps
   completed ends the run as done. The plan binds the model that wrote it.
2. Without a plan the ``judge`` alias classifies the stop (``judge_messages`` builds its
   prompt, ``parse_verdict`` reads it strictly: a clear label, a verdict line or JSON, else
   unreadable, which counts as stalled). No string heuristics over the agent's text.
3. Every rejected stop spends one continuation unit; units are never refunded (there is no
   function to do it), so hollow tool calls between stalls cannot keep a run alive. On the
   last unit the injection asks the model to wrap up with what it has.

Pure: the caller holds ``units_left`` and decrements it when ``spends_unit`` is True.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tickwork.sql.vocabulary import GateVerdict, Outcome
from tickwork.worker.model import Message
from tickwork.worker.redact import redact_text

# What a judge can say; anything it answers is read as one of these.
JudgeVerdict = Literal["done", "question", "stalled"]
VERDICTS: tuple[JudgeVerdict, ...] = get_args(JudgeVerdict)
# Where a run goes after a turn: route()'s answer.
Route = Literal["hard_stop", "cancelled", "continue"]
UNREADABLE = "the judge's verdict could not be read"
WRAP_UP = ("This is your last chance to continue: wrap up with what you have and give your "
           "best final answer now.")
TOOL_RESULT_CHARS = 500  # the judge needs to see that a result came back, not all of it
CONTENT_CHARS = 4000  # keeps one huge message from crowding out the rest of the window
# The shortened prompt, for a judge whose model said the full one was too long.
COMPACT_TOOL_RESULT_CHARS, COMPACT_CONTENT_CHARS = 150, 600

_VERDICT = "(done|question|stalled)"
_MARKUP = r"[\s*_`#>\"'.!]*"  # markdown or quotes around a label, punctuation after it
# A label alone on its line: "done", "Done.", "**stalled**".
_ALONE = re.compile(rf"^{_MARKUP}{_VERDICT}{_MARKUP}$", re.IGNORECASE)
# A label, then an explicit separator and a reason: "stalled: …", "**Stalled** - …", "done — …".
_LABELLED = re.compile(rf"^{_MARKUP}{_VERDICT}[*_`]*\s*(?::|\s-|-\s|\u2013|\u2014)\s*(.*)$",
                       re.IGNORECASE)
# A first line naming the verdict: "verdict: done", "**Verdict:** stalled - reason".
_NAMED = re.compile(rf"^{_MARKUP}verdict[*_`]*\s*[:=]{_MARKUP}{_VERDICT}\b(.*)$", re.IGNORECASE)
_TAIL = re.compile("^[*_`]*\\s*(?::|-|\u2013|\u2014)")  # a separator, then the reason
_SEPARATOR = re.compile("^[\\s*_`:;,.!\\-\u2013\u2014]+")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")

JUDGE_SYSTEM = """You judge why an AI agent stopped. Its last turn made no tool call, which \
ends its run unless you say otherwise. Read the transcript and classify that last turn:

done - the agent delivered a real, complete answer to the task, backed by work the \
transcript shows it actually did.
question - the agent is deliberately asking the user for something it needs. Asking is \
always allowed; a genuine question is never a stall.
stalled - the agent stopped with the task unfinished without asking: it narrated an action \
it never took (no tool call in the transcript shows it), returned partial data, or skipped \
a step.

Judge the evidence in the transcript, not the agent's claims about itself.
Answer with ONE word first (done, question or stalled), then ': ' and a short reason, on one \
line. For stalled, the reason names what is missing, e.g. "stalled: record 3 was never \
fetched". Any other form of answer counts as stalled."""


@dataclass(frozen=True)
class GateSettings:
    continuation_units: int = 20
    judge_window: int = 8


@dataclass(frozen=True)
class GateDecision:
    # done | question | stalled | plan_open | plan_complete | hard_stop | cancelled | stalled_out
    verdict: GateVerdict
    stop: bool  # True ends the run
    outcome: Outcome | None  # when stop: done | question | hard_stop | cancelled | stalled_out
    reason: str  # why, for the journal (a sentence)
    inject: str | None  # a continuation message to inject before the next turn (when not stop)
    spends_unit: bool


def open_steps(plan: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The plan's steps whose status is not "completed", in plan order."""
    steps = (plan or {}).get("steps") or []
    return [step for step in steps if isinstance(step, dict) and step.get("status") != "completed"]


def parse_verdict(text: str) -> tuple[JudgeVerdict, str]:
    """(verdict, reason) from the judge's reply, read strictly: the reply must carry a clear
    label, case-insensitive and markdown allowed, as one of
      - JSON ``{"verdict": "done", "reason": "…"}``;
      - a first line that is the label alone (``Done.``), the reason on the following lines;
      - a first line ``label: reason`` (or `` - ``, an en or em dash between them);
      - a first line ``verdict: label`` (the reason after it or on the following lines).
    Anything else, rambling text that merely begins with "done" included, is unreadable and
    reads as ("stalled", "the judge's verdict could not be read: …"): a run must never end as
    done on a verdict nobody could read."""
    body = _FENCE.sub("", (text or "").strip()).strip()
    found = _from_json(body) or _from_lines(body)
    if found is None:  # redacted before it is cut: a cut secret no longer has its shape
        shown = repr(redact_text(body)[:200]) if body else "(empty)"
        return "stalled", f"{UNREADABLE}: {shown}"
    return found


def _from_json(body: str) -> tuple[str, str] | None:
    if not body.startswith("{"):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    verdict = value.get("verdict") if isinstance(value, dict) else None
    if not isinstance(verdict, str) or verdict.strip().lower() not in VERDICTS:
        return None
    reason = value.get("reason")
    return verdict.strip().lower(), reason.strip() if isinstance(reason, str) else ""


def _from_lines(body: str) -> tuple[str, str] | None:
    first, _, rest = body.partition("\n")
    first, rest = first.strip(), rest.strip()
    alone = _ALONE.match(first)
    if alone:
        return alone.group(1).lower(), rest
    match = _LABELLED.match(first)
    if match is None:
        match = _NAMED.match(first)
        if match is None or (match.group(2).strip(" *_`.!") and not _TAIL.match(match.group(2))):
            return None  # "verdict: done with most of it" is prose, not a label
    reason = _SEPARATOR.sub("", match.group(2)).strip()
    return match.group(1).lower(), "\n".join(filter(None, (reason, rest)))


def judge_messages(window: list[Message], *, compact: bool = False) -> list[Message]:
    """The judge's prompt: a system message explaining the three verdicts and the answer
    format, then one user message rendering the window (the last few messages of the run).
    ``compact`` cuts each message shorter, for a model with a small context."""
    limits = ((COMPACT_TOOL_RESULT_CHARS, COMPACT_CONTENT_CHARS) if compact else
              (TOOL_RESULT_CHARS, CONTENT_CHARS))
    lines = [_render(message, *limits) for message in window]
    body = ("Transcript (most recent last):\n\n" + "\n\n".join(lines) +
            "\n\nClassify the agent's last turn: done, question or stalled.")
    return [Message("system", JUDGE_SYSTEM), Message("user", body)]


def _render(message: Message, tool_chars: int, content_chars: int) -> str:
    # Harness-written messages (nudges, refusals) are marked so the judge does not credit
    # them to the agent.
    role = f"{message.role} (harness)" if message.injected else message.role
    limit = tool_chars if message.role == "tool" else content_chars
    parts = [f"{role}: {_truncate(message.content, limit)}"]
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
        parts.append(f"  -> calls {call.name}({_truncate(arguments, tool_chars)})")
    return "\n".join(parts)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated, {len(text)} characters in all]"


def route(*, hard_stop: bool, cancel_requested: bool) -> Route:
    """Where the run goes next. Precedence is policy: the hard budget stop first (a runaway
    with a pending cancel must still end as a hard stop), then the user's stop, then on."""
    if hard_stop:
        return "hard_stop"
    if cancel_requested:
        return "cancelled"
    return "continue"


def decide_without_judge(plan: dict[str, Any] | None, units_left: int) -> GateDecision | None:
    """The plan's decision, or None when there is no plan (no steps): then ask the judge.

    All steps completed ends the run as done. An open step rejects the stop, names the next
    open step and spends a unit, so a model that never updates its plan still ends; with no
    unit left the run ends as stalled_out. On the last unit the injection is the wrap-up."""
    if not (plan or {}).get("steps"):
        return None
    remaining = open_steps(plan)
    if not remaining:
        return GateDecision("plan_complete", True, "done", "Every step of the plan is completed.",
                            None, False)
    step = remaining[0]
    title, status = step.get("title", ""), step.get("status", "pending")
    if units_left <= 0:
        return _stalled_out(f"The plan still has {len(remaining)} open step(s), next "
                            f"'{title}', and no continuation units are left.")
    inject = WRAP_UP if units_left == 1 else (
        f"Your plan is not finished. Next step: '{title}' ({status}). Do it now, then mark it "
        "completed with update_plan.")
    return GateDecision("plan_open", False, None,
                        f"The plan has {len(remaining)} open step(s); next is '{title}' "
                        f"({status}).", inject, True)


EMPTY_REPLY = "The reply had neither text nor a tool call, so there is no answer to judge."


def decide_empty(units_left: int) -> GateDecision:
    """A reply with neither text nor tool calls is never done: it is stalled without asking
    the judge (there is nothing to judge), spending a unit like any stall."""
    if units_left <= 0:
        return _stalled_out(f"{EMPTY_REPLY[:-1]}; no continuation units are left.")
    inject = WRAP_UP if units_left == 1 else (
        "Your last reply was empty. Continue the task with your tools, or give your answer.")
    return GateDecision("stalled", False, None, EMPTY_REPLY, inject, True)


def decide_with_verdict(verdict: str, reason: str, units_left: int) -> GateDecision:
    """The decision for a judge's verdict. done and question end the run; stalled (and any
    verdict not in VERDICTS) injects a continuation naming what is missing and spends a
    unit, or ends the run as stalled_out when no unit is left.

    The judge may quote the transcript, secrets included, and its reason becomes the run's
    reason, a gate_decision and a continuation saved with the run's history: it is redacted
    here, before any of them."""
    reason = redact_text((reason or "").strip())
    said = f"The judge said {verdict}" + (f": {reason}" if reason else ".")
    if verdict == "done":
        return GateDecision("done", True, "done", said, None, False)
    if verdict == "question":
        return GateDecision("question", True, "question", said, None, False)
    if units_left <= 0:
        return _stalled_out(f"{said.rstrip('.')}; no continuation units are left.")
    return GateDecision("stalled", False, None, said, _continuation(reason, units_left), True)


def _continuation(reason: str, units_left: int) -> str:
    if units_left == 1:
        return WRAP_UP
    # An unreadable verdict says nothing about the task, so it is not shown to the model.
    missing = reason.rstrip(".") if reason and not reason.startswith(UNREADABLE) else ""
    told = f"You stopped before the task was finished: {missing}." if missing else \
        "You stopped before the task was finished."
    return f"{told} Continue: do the missing work with your tools, then answer."


def _stalled_out(reason: str) -> GateDecision:
    return GateDecision("stalled_out", True, "stalled_out", reason, None, False)
