"""Answer text as it is written: a streaming provider's pieces journaled in batches.

A provider that streams hands each piece of text to the sink while the model is still
writing. Journaling every piece would be one event per token; holding them all would make a
tail show nothing until the reply ends. So pieces gather and go out as one ``content_delta`` at
most every ``interval`` seconds, plus the remainder when the reply ends. A timer sends what
has gathered once the interval is up even when no new piece arrives to trigger it.

A batch never splits a secret: the journal redacts each event on its own, so a secret split
across two events (a key block's lines, "Authorization: Bearer" and its token, "password:" and
its value, each written as separate pieces with pauses between them) would match no pattern and
be stored in clear. So a batch ends where settled() says the text can no longer be the
start of a secret: the last word, text from a rule's literal near the end, and an unfinished key
block are carried over to the next batch (bounded by WINDOW_CHARS) until more text
settles them or the reply ends.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Callable

from tickwork.worker.redact import redact_text
from tickwork.worker.secret_scan import find_secrets
from tickwork.worker.secret_shapes import (ANY_CASE, BEGIN, BLOCKS, DISCORD_HINT, EXACT,
                                           might_hold_secret)

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


# Text still being written (a streamed answer): how much of it can be shown now. A secret's
# value follows its literal closely (a keyword, its separator and value; a vendor prefix and
# its token; a BEGIN line and the key), so text within HOLD_CHARS of the end that holds a
# literal may still become a secret. WINDOW_CHARS bounds what is held: past it, all but the
# last word goes out (the stream puts an unfinished key block's BEGIN line back in front of
# what follows, so its later lines are still redacted: TextStream._send).
HOLD_CHARS = 256
WINDOW_CHARS = 16384
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def settled(text: str) -> int:
    """How many leading characters of ``text``, an answer still being written, can be shown
    now (redacted on their own, as the journal redacts each event) with the same result as
    redacting the whole answer: the cut is always at a word's start, and never inside a secret
    or before one that more text could still complete or lengthen. Held back: the last word (a
    token may still grow), text from a rule's literal near the end on (its value may follow),
    a match reaching the end, and a key block whose END line has not come."""
    # Past the window (bounded): only a match that the cut would split is still respected.
    forced = len(text) > WINDOW_CHARS
    cut = _word_start(text, len(text))
    if not forced:
        region = _word_start(text, len(text[:max(0, len(text) - HOLD_CHARS)].rstrip()))
        literal = _first_literal(text, region)
        if literal is not None:
            cut = min(cut, _word_start(text, literal))
    if not might_hold_secret(text):
        return cut if cut or not forced else len(text)
    found = find_secrets(text)
    for match in found:
        start, end = match.span()
        if start >= cut:
            break
        name = match.lastgroup or ""
        open_block = name in BLOCKS and match.group(f"{name}_end") is None
        if end > cut or (not forced and (end >= len(text) or open_block)):
            cut = _word_start(text, start)
            break
    return cut if cut or not forced else len(text)


def open_block_head(text: str) -> str | None:
    """The BEGIN line of a key block that ``text`` ends inside (no END line, key-like lines up
    to its end), or None: text cut at the window ends there, and the block's next lines must
    still be known for what they are."""
    if "BEGIN" not in text and "PuTTY-" not in text:
        return None
    found = find_secrets(text)
    for match in found:
        name = match.lastgroup or ""
        if name in BLOCKS and match.group(f"{name}_end") is None \
                and not text[match.end():].strip():
            return BEGIN.match(match.group()).group()  # type: ignore[union-attr]
    return None


def _word_start(text: str, index: int) -> int:
    """The start of the word holding text[index - 1] (index itself after a space); 0 if none."""
    found = _LAST_SPACE.search(text, 0, index)
    return found.end() if found else 0


def _first_literal(text: str, start: int) -> int | None:
    """Where the first literal any rule starts with occurs in text[start:], or None."""
    lowered = text.lower()
    places = [text.find(literal, start) for literal in EXACT + ("://",)]
    places += [lowered.find(literal, start) for literal in ANY_CASE]
    hint = DISCORD_HINT.search(text, start)
    if hint is not None:
        places.append(hint.start())
    places = [place for place in places if place >= 0]
    return min(places) if places else None
