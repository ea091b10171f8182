"""Following a run's journal over the network: a Server-Sent Events parser (``id:``,
``event:``, multi-line ``data:``, comments, CR / LF / CRLF line ends, dispatch on a blank line)
and the ``Follower``, which streams ``GET /v1/runs/{id}/events`` and, after a drop (connection
error, read timeout, server restart), reconnects from the last seq it saw (``Last-Event-ID``)
with backoff, handing every journal event on exactly once, in seq order."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import httpx

from tickwork.sql.vocabulary import FINAL_STATUSES


READ_TIMEOUT_SECONDS = 30.0  # longer than the keepalive: silence past it means the link is dead
FIRST_DELAY, MAX_DELAY, GIVE_UP_AFTER = 0.5, 5.0, 60.0
TERMINAL_STATUSES = FINAL_STATUSES

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


