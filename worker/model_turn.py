"""One model call of a run, for the agent turn or the judge.

What is sent masks old tool results (worker/context.py). A provider that says the context is
too long gets that one call again, once, with everything older than the current turn masked
(journaled as ``context_masked``); then the run fails, never a loop. The judge is asked again
once with a shortened prompt instead. Every reply's usage is added to the run and journaled
per call (``model_usage``); a streaming provider's text is journaled as it arrives, in
batches (worker/streaming.py), and not again whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickwork.sql.journal import RunJournal
from tickwork.worker import tracing
from tickwork.worker.context import masked_count, masked_for_model
from tickwork.worker.model import ContextTooLong, Message, Reply
from tickwork.worker.state import RunState
from tickwork.worker.stop_gate import UNREADABLE, judge_messages, parse_verdict
from tickwork.worker.streaming import TextStream

if TYPE_CHECKING:
    from tickwork.worker.agent_loop import Loop


class ContextExhausted(RuntimeError):
    """The conversation does not fit the model's context even with old results masked; the
    message is the run's failure reason."""


async def call_model(state: RunState, loop: Loop, step: int) -> Reply:
    """One model turn: the messages with old results masked, text journaled as it streams.
    A context-too-long answer is retried once with everything older than the current turn
    masked (journaled as context_masked); a second one raises ContextExhausted, never a loop."""
    sent = masked_for_model(state.messages, 1 if state.context_tight else loop.keep_turns)
    try:
        return await _complete(state, loop, step, sent)
    except ContextTooLong as exc:
        tight = masked_for_model(state.messages, 1)
        said = str(exc)[:300]
        if state.context_tight or [m.content for m in tight] == [m.content for m in sent]:
            raise _too_long(f"nothing more could be masked (the provider said: {said})") from None
        state.context_tight = True  # from now on, so every later call does not fail first
        loop.journal.emit("context_masked", {
            "reason": "context_too_long", "error": said, "keep_turns": 1,
            "masked_results": masked_count(tight, state.messages), "retry": 1}, parent=step)
    try:
        return await _complete(state, loop, step, tight)
    except ContextTooLong as exc:
        raise _too_long(f"even with every tool result older than the current turn masked "
                        f"(the provider said: {str(exc)[:300]})") from None


async def _complete(state: RunState, loop: Loop, step: int, sent: list[Message]) -> Reply:
    stream = TextStream(lambda payload: loop.journal.emit("content_delta", payload, parent=step),
                        monotonic=loop.monotonic)
    try:
        with tracing.model_call(loop.model, step) as span:
            reply = await loop.provider.complete(loop.model, sent, loop.toolbox.schemas(),
                                                 state.view(loop.run_input), on_text=stream)
            tracing.note_usage(span, reply.usage)
    except BaseException:
        stream.discard()
        raise
    if reply.streamed:
        stream.close()  # the remainder; the whole text is not journaled again
    else:
        stream.discard()
    count_usage(state, loop.journal, loop.model, reply, step)
    return reply


def _too_long(why: str) -> ContextExhausted:
    return ContextExhausted(f"The conversation no longer fits the model's context {why}.")


def count_usage(state: RunState, journal: RunJournal, alias: str, reply: Reply,
                step: int) -> None:
    """Add a model call's cost to the run; journal the per-call figures when reported."""
    state.add_usage(reply.usage)
    if reply.usage is not None:
        journal.emit("model_usage", {"alias": alias, "input_tokens": reply.usage.input_tokens,
                                     "output_tokens": reply.usage.output_tokens}, parent=step)


async def ask_judge(state: RunState, loop: Loop, step: int) -> tuple[str, str]:
    """The judge's (verdict, reason) on the last messages. A judge whose model says the prompt
    is too long is asked once more with every message cut shorter (journaled as
    context_masked); a second refusal reads as an unreadable verdict, so stalled."""
    window = state.messages[-loop.gate.judge_window:]

    async def ask(compact: bool) -> Reply:
        with tracing.model_call("judge", step) as span:
            reply = await loop.provider.complete("judge", judge_messages(window, compact=compact),
                                                 [], state.view(loop.run_input))
            tracing.note_usage(span, reply.usage)
            return reply
    try:
        judged = await ask(False)
    except ContextTooLong as exc:
        loop.journal.emit("context_masked", {
            "alias": "judge", "reason": "context_too_long", "error": str(exc)[:300],
            "compact": True, "retry": 1}, parent=step)
        try:
            judged = await ask(True)
        except ContextTooLong as again:
            return "stalled", (f"{UNREADABLE}: the judge's prompt was too long for its model "
                               f"even shortened ({str(again)[:200]})")
    state.judge_calls += 1
    count_usage(state, loop.journal, "judge", judged, step)
    return parse_verdict(judged.text)


def record_reply(journal: RunJournal, reply: Reply, step: int) -> None:
    if reply.reasoning:
        journal.emit("reasoning_delta", {"text": reply.reasoning}, parent=step)
    if reply.text and not reply.streamed:  # streamed text was journaled as it came
        journal.emit("content_delta", {"text": reply.text}, parent=step)
