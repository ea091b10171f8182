"""Secrets in long text, found branch by branch: the same matches as one alternation of every
branch (worker/secret_shapes.py), several times faster past a few kilobytes (each branch found
by the engine's fast literal scan, or the keyword branches only where their stems occur)."""

from __future__ import annotations

import heapq
import re
from typing import Callable, Iterator

from tickwork.worker.secret_shapes import BRANCHES, PATTERN, PATTERNS, SHORT_SCAN


def find_secrets(text: str) -> Iterator[re.Match[str]]:
    """Every secret-shaped match in the text, left to right (one pass for short text)."""
    return PATTERN.finditer(text) if len(text) <= SHORT_SCAN else _matches(text)


def _matches(text: str) -> Iterator[re.Match[str]]:
    """The secrets in the text, left to right, as one alternation of the branches in their
    order would find them: at each position the first branch that matches there wins, and the
    scan goes on after its match. Each branch's next match is searched again only when a match
    taken before it covered its start, so the text is read about once per branch."""
    lowered = text.lower()
    searchers = [_searcher(name, pattern, text, lowered)
                 for name, pattern in zip(BRANCHES, PATTERNS)]
    upcoming = {index: search(0) for index, search in enumerate(searchers)}
    position = 0
    while True:
        best: re.Match[str] | None = None
        best_index = -1
        for index in list(upcoming):
            found = upcoming[index]
            if found is not None and found.start() < position:
                found = upcoming[index] = searchers[index](position)
            if found is None:
                del upcoming[index]
            elif best is None or found.start() < best.start():
                best, best_index = found, index
        if best is None:
            return
        yield best
        position = best.end()
        upcoming[best_index] = searchers[best_index](position)


# The keyword branches start with a case-insensitive alternation of names, which the engine
# tries at every position (about a microsecond a character). Over long text they are tried
# only where a name's stem occurs (found in the lowered text at C speed). Every name of
# _KV_NAMES starts with one of _KV_STEMS; cfg's match may start at the word before its stem.
_KV_STEMS = ("pass", "pwd", "secret", "api", "access", "auth", "token", "private", "accountkey",
             "shared", "encryption", "signing", "master", "storage", "app")
_STEMS = {"kv": _KV_STEMS, "ckv": _KV_STEMS,
          "jkv": _KV_STEMS + ("set-cookie", "cookie", "credential"),
          "cfg": ("pwd", "pass", "secret", "token")}
_CFG_WORD = 64  # cfg's word before the stem: at most this long (the pattern says so too)


def _top_level_parts(body: str) -> list[str]:
    """The pattern's alternatives at its top level (outside groups and classes)."""
    parts, depth, in_class, escaped, last = [], 0, False, False, 0
    for index, char in enumerate(body):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(body[last:index])
            last = index + 1
    return parts + [body[last:]]


# A branch each of whose alternatives starts with \b and a letter or digit is searched for
# without its first \b (a pattern that starts with a literal is scanned for at C speed; \b
# first, it is tried at every position), and a match right after a word character is passed
# over: the same matches.
_WORD_STARTED = {name: re.compile(f"(?P<{name}>{body[2:]})", re.MULTILINE)
                 for name, body in BRANCHES.items()
                 if all(re.match(r"\\b[A-Za-z0-9]", part) for part in _top_level_parts(body))}
_WORD_CHAR = re.compile(r"\w")


def _searcher(name: str, pattern: re.Pattern[str], text: str,
              lowered: str) -> Callable[[int], re.Match[str] | None]:
    unbounded = _WORD_STARTED.get(name)
    if unbounded is not None:
        def after_a_boundary(position: int) -> re.Match[str] | None:
            while (found := unbounded.search(text, position)) is not None:
                start = found.start()
                if start == 0 or _WORD_CHAR.match(text, start - 1) is None:
                    return found
                position = start + 1
            return None
        return after_a_boundary
    stems = _STEMS.get(name)
    if stems is None or len(lowered) != len(text):  # (a few characters lower to two)
        return lambda position: pattern.search(text, position)
    occurrences = _occurrences(lowered, stems)
    pending = [next(occurrences, None)]

    def starts(at: int) -> tuple[int, ...]:
        if name != "cfg" or at < 2 or text[at - 1] not in "_-":
            return (at,)
        word = at - 1
        while word > 0 and at - 1 - word < _CFG_WORD and text[word - 1].isascii() \
                and text[word - 1].isalnum():
            word -= 1
        return (word, at) if word < at - 1 else (at,)

    def search(position: int) -> re.Match[str] | None:
        while pending[0] is not None:
            for start in starts(pending[0]):
                if start >= position:
                    found = pattern.match(text, start)
                    if found is not None:
                        return found
            pending[0] = next(occurrences, None)
        return None
    return search


def _occurrences(lowered: str, stems: tuple[str, ...]) -> Iterator[int]:
    """Where any of the stems occurs, in order, each place once."""
    heap = [(place, stem) for stem in stems if (place := lowered.find(stem)) >= 0]
    heapq.heapify(heap)
    last = -1
    while heap:
        place, stem = heap[0]
        if place != last:
            yield place
            last = place
        following = lowered.find(stem, place + 1)
        if following >= 0:
            heapq.heapreplace(heap, (following, stem))
        else:
            heapq.heappop(heap)


