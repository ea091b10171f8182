"""One model call of a run, for the agent turn, the judge or the summary.

What is sent masks old tool results (worker/context.py), and once a call reported input tokens
past the threshold, replaces the older messages with a summary (worker/compaction.py;
journaled as ``context_compacted``). A provider that says the context is too long forces one
compaction, then gets that one call again, once, with everything older than the current turn
masked (journaled as ``context_masked``); then the run fails, never a loop. A summariser that
fails leaves what is sent masked as before. The judge is asked again
once with a shortened prompt instead. Every reply's usage is added to the run and journaled
per call (``model_usage``); a streaming provider's text is journaled as it arrives, in
batches (worker/streaming.py), and not again whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tickwork.sql.journal import RunJournal
from tickwork.worker import tracing
from tickwork.worker.compaction import (MAX_FAILURES, SUMMARY_ALIAS, SUMMARY_CHARS, Summary,
                                        estimate_tokens, head_length, outgoing, split_point,
                                        summary_prompt)
from tickwork.worker.context import masked_count, masked_for_model
from tickwork.worker.model import ContextTooLong, Message, Reply
from tickwork.worker.state import RunState
from tickwork.worker.stop_gate import UNREADABLE, judge_messages, parse_verdict
from tickwork.worker.streaming import TextStream
from tickwork.worker.toolbox import ToolBox

if TYPE_CHECKING:
    from tickwork.worker.agent_loop import Loop


class ContextExhausted(RuntimeError):
    """The conversation does not fit the model's context even with old results masked; the
    message is the run's failure reason."""


async def call_model(state: RunState, loop: Loop, step: int) -> Reply:
    """One model turn: the messages with old results masked (and the older ones summarised
    once the last call reported input tokens past the threshold), text journaled as it
    streams. A context-too-long answer forces one compaction, then is retried once with
    everything older than the current turn masked (journaled as context_masked); a second one
    raises ContextExhausted, never a loop."""
    reported = state.last_input_tokens
    if reported is not None and reported >= loop.context.compact_at(loop.model):
        await compact_context(state, loop, step, "threshold")
    sent = masked_for_model(outgoing(state.messages, state.summary),
                            1 if state.context_tight else loop.keep_turns)
    try:
        return await _complete(state, loop, step, sent)
    except ContextTooLong as exc:
        said = str(exc)[:300]
        compacted = await compact_context(state, loop, step, "context_too_long")
        base = outgoing(state.messages, state.summary)
        tight = masked_for_model(base, 1)
        if not compacted and (state.context_tight or
                              [m.content for m in tight] == [m.content for m in sent]):
            raise _too_long(f"nothing more could be masked (the provider said: {said})") from None
        if not state.context_tight:
            state.context_tight = True  # from now on, so every later call does not fail first
            loop.journal.emit("context_masked", {
                "reason": "context_too_long", "error": said, "keep_turns": 1,
                "masked_results": masked_count(tight, base), "retry": 1}, parent=step)
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
            reply = await loop.provider.complete(loop.model, with_tool_index(sent, loop.toolbox),
                                                 loop.toolbox.schemas(),
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
    if reply.usage is not None:  # what decides the next compaction
        state.last_input_tokens = max(0, int(reply.usage.input_tokens))
    return reply


def with_tool_index(sent: list[Message], toolbox: ToolBox) -> list[Message]:
    """What is sent, with the system message naming the tools whose schemas are not sent
    (worker/tool_index.py); the run's own messages are not changed."""
    index = toolbox.tool_index()
    if index is None or not sent or sent[0].role != "system":
        return sent
    return [replace(sent[0], content=f"{sent[0].content}\n\n{index}"), *sent[1:]]


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


async def compact_context(state: RunState, loop: Loop, step: int, reason: str) -> bool:
    """Summarise the messages older than the recent turns (with the earlier summary, if any)
    through the ``summary`` alias; True when what is sent now carries a new summary. Nothing
    to summarise, or a summariser that fails (journaled, at most MAX_FAILURES times a run),
    changes nothing: the caller goes on with masking alone."""
    reported, state.last_input_tokens = state.last_input_tokens, None  # judged once
    if state.compaction_failures >= MAX_FAILURES:
        return False
    start = head_length(state.messages)
    if state.summary is not None:
        start = min(max(start, state.summary.upto), len(state.messages))
    cut = split_point(state.messages, start, loop.keep_turns)
    if cut is None:
        return False
    older = state.messages[start:cut]
    before = estimate_tokens(masked_for_model(outgoing(state.messages, state.summary),
                                              loop.keep_turns))
    previous = state.summary.text if state.summary is not None else None
    prompt = summary_prompt(previous, older, loop.context.prompt_chars())
    facts = {"reason": reason, "alias": SUMMARY_ALIAS, "reported_input_tokens": reported,
             "threshold": loop.context.compact_at(loop.model)}
    try:
        with tracing.model_call(SUMMARY_ALIAS, step) as span:
            reply = await loop.provider.complete(SUMMARY_ALIAS, prompt, [],
                                                 state.view(loop.run_input))
            tracing.note_usage(span, reply.usage)
    except Exception as exc:  # noqa: BLE001 - whatever the summariser did, the run goes on
        return _summary_failed(state, loop, step, facts, f"{type(exc).__name__}: {exc}")
    count_usage(state, loop.journal, SUMMARY_ALIAS, reply, step)
    text = reply.text.strip()
    if not text:
        return _summary_failed(state, loop, step, facts, "the summary came back empty")
    covered = (state.summary.messages if state.summary is not None else 0) + len(older)
    state.summary = Summary(text[:SUMMARY_CHARS], cut, covered)
    after = estimate_tokens(masked_for_model(outgoing(state.messages, state.summary),
                                             loop.keep_turns))
    loop.journal.emit("context_compacted", {
        **facts, "ok": True, "messages_summarised": len(older), "messages_kept": len(
            state.messages) - cut, "summary_chars": len(state.summary.text),
        "before_tokens_estimate": before, "after_tokens_estimate": after,
        "freed_tokens_estimate": before - after}, parent=step)
    return True


def _summary_failed(state: RunState, loop: Loop, step: int, facts: dict[str, object],
                    error: str) -> bool:
    state.compaction_failures += 1
    loop.journal.emit("context_compacted", {**facts, "ok": False, "error": error[:300],
                                            "failures": state.compaction_failures}, parent=step)
    return False


def record_reply(journal: RunJournal, reply: Reply, step: int) -> None:
    if reply.reasoning:
        journal.emit("reasoning_delta", {"text": reply.reasoning}, parent=step)
    if reply.text and not reply.streamed:  # streamed text was journaled as it came
        journal.emit("content_delta", {"text": reply.text}, parent=step)
