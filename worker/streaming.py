"""Answer text as it is written: a streaming provider's pieces journaled in batches.

A provider that streams hands each piece of text to the sink while the model is still
writing. Journaling every piece would be one event per token; holding them all would make a
tail show nothing until the reply ends. So pieces gather and go out as one ``content_delta`` at
most every ``interval`` seconds, plus the remainder when the reply ends. A timer sends what
has gathered once the interval is up even when no new piece arrives to trigger it.

A batch never splits a secret: the journal redacts each event on its own, so a secret split
across two events (a key block's lines, "Authorization: Bearer" and its token, "password:" and
its value, each written as separate pieces with pauses between them) would match no pattern and
be stored in clear. So a batch ends where redact.settled says the text can no longer be the
start of a secret: the last word, text from a rule's literal near the end, and an unfinished key
block are carried over to the next batch (bounded by redact.WINDOW_CHARS) until more text
settles them or the reply ends.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from tickwork.worker.redact import open_block_head, redact_text, settled

INTERVAL_SECONDS = 0.25

Emit = Callable[[dict[str, Any]], None]


class TextStream:
    """The on_text sink for one model call. ``close()`` sends the remainder."""

    def __init__(self, emit: Emit, *, monotonic: Callable[[], float],
                 interval: float = INTERVAL_SECONDS, timers: bool = True) -> None:
        self._emit, self._now, self._interval = emit, monotonic, interval
        self._pieces: list[str] = []
        self._last = monotonic()  # the first batch waits one interval like every other
        self._timer: asyncio.TimerHandle | None = None
        self._timers = timers
        self._block_head: str | None = None  # an unfinished key block's BEGIN line (window)
        self.emitted = 0  # content_delta events sent

    def __call__(self, piece: str) -> None:
        if not piece:
            return
        self._pieces.append(piece)
        waited = self._now() - self._last
        if waited >= self._interval:
            self._send()
        elif self._timers and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval - waited,
                                                                self._send)

    def close(self) -> None:
        """The reply ended: send what is left and stop the timer."""
        self._send(final=True)

    def discard(self) -> None:
        """The reply will be journaled whole after all (the provider did not stream)."""
        self._pieces = []
        self._cancel_timer()

    def _send(self, final: bool = False) -> None:
        self._cancel_timer()
        raw = "".join(self._pieces)
        head = self._block_head
        # A key block cut at the window goes on being one: its BEGIN line is put back in front
        # of what follows, so its later lines are still recognised (and redacted here).
        text = f"{head}\n{raw}" if head else raw
        cut = len(text) if final else settled(text)
        if head and cut <= len(head) + 1:
            cut = 0
        sent, rest = text[:cut], (text[cut:] if cut else raw)
        self._pieces = [rest] if rest else []
        # A try that sends nothing counts too: held text is looked at once an interval, not
        # once a piece (each look reads all of it).
        self._last = self._now()
        if not sent:
            return
        self._block_head = None if final else open_block_head(sent)
        self.emitted += 1
        self._emit({"text": redact_text(sent) if head else sent, "streamed": True})

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
