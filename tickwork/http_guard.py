"""The API's HTTP protocol with the limits uvicorn does not have: a cap on connections held at
once, and deadlines for a client to send a request's headers and then its body.

uvicorn accepts every connection and keeps one that never sends a byte for ever (its
keep-alive timeout starts only after a first response; limit_concurrency answers 503 only once
headers have arrived), so half-open connections could use up the process's file descriptors
and lock out every client. Here:

* a connection beyond ``max_connections`` is answered 503 and closed at once, so descriptors
  stay bounded whatever arrives;
* a request's headers must arrive within ``header_timeout`` of the connection opening (or of
  the previous answer on a kept-alive connection), and be at most ``max_header_bytes``;
* its body must arrive within ``body_timeout`` of its headers.

A connection past a deadline is closed (the app sees a disconnect). Answers themselves have no
deadline: a live tail streams for as long as it likes once its request has arrived."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tickwork.scheduler.settings import SchedulerSettings


def _refusal(status: str, code: str, message: str, *extra: str) -> bytes:
    """A whole response, written straight to the socket before it is closed."""
    body = f'{{"error": "{code}", "message": "{message}"}}'
    head = [f"HTTP/1.1 {status}", "content-type: application/json", "connection: close",
            *extra, f"content-length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n" + body).encode()


BUSY = _refusal("503 Service Unavailable", "busy",
                "the API holds too many connections; try again", "retry-after: 1")
HEADERS_TOO_LARGE = _refusal("431 Request Header Fields Too Large", "headers_too_large",
                             "the request's headers are too large")


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of the module's note (class attributes, set
    by guarded_protocol)."""

    max_connections = 1000
    header_timeout = 10.0
    body_timeout = 30.0
    max_header_bytes = 65_536

    _deadline: asyncio.TimerHandle | None = None
    _phase = "head"  # head: awaiting headers; body: awaiting the body; answer: neither
    _head_bytes = 0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(BUSY)
            transport.close()
            return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Outside a body, what arrives is a request's head (the next one, while an answer is
        # being written): counted before parsing, judged after, so that bytes which completed
        # the headers and went on into a body are not held against them.
        if self._phase != "body":
            self._head_bytes += len(data)
        super().data_received(data)
        if self._phase != "body" and self._head_bytes > self.max_header_bytes \
                and not self.transport.is_closing():
            self.transport.write(HEADERS_TOO_LARGE)
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._phase, self._head_bytes = "body", 0
        self._arm(self.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._phase = "answer"
        self._disarm()
        answered = self.cycle is not None and self.cycle.response_complete
        super().on_message_complete()
        if answered:  # answered before its body had all arrived (a refused token)
            self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Not when the body is still arriving (on_message_complete does it) nor when a
        # pipelined request has just been started.
        if self._phase == "answer" and self.cycle.response_complete \
                and not self.transport.is_closing():
            self._await_head()

    def _await_head(self) -> None:
        self._phase, self._head_bytes = "head", 0
        self._arm(self.header_timeout)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(settings: SchedulerSettings) -> type[GuardedHttp]:
    """GuardedHttp with the deployment's limits (TICKWORK_API_* settings)."""
    return type("GuardedHttp", (GuardedHttp,), {
        "max_connections": settings.api_max_connections,
        "header_timeout": settings.api_header_timeout_seconds,
        "body_timeout": settings.api_body_timeout_seconds,
        "max_header_bytes": settings.api_max_header_bytes})
