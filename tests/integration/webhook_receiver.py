"""A real HTTP receiver for webhook tests: a threaded server on a loopback port that records
every POST (headers and raw body) and answers with the status codes it is told, in order."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def document(self) -> dict:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        """Recompute the signature as a receiver would: HMAC-SHA256 of "<t>.<raw body>"."""
        parts = dict(item.split("=", 1) for item in self.headers["tickwork-signature"].split(","))
        expected = hmac.new(secret.encode(), parts["t"].encode() + b"." + self.body,
                            hashlib.sha256).hexdigest()
        return hmac.compare_digest(parts["v1"], expected)


class Receiver:
    """``answers`` are the status codes of the first requests (then 200). With ``hold`` set,
    each request waits for ``release`` before answering (a receiver that hangs)."""

    def __init__(self, answers: tuple[int, ...] = (), hold: bool = False) -> None:
        self.received: list[Received] = []
        self.answers = list(answers)
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.held = 0
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver._changed:
                    receiver.held += 1
                    receiver._changed.notify_all()
                receiver.release.wait(120)
                with receiver._changed:
                    receiver.received.append(Received(
                        {k.lower(): v for k, v in self.headers.items()}, body))
                    code = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.held -= 1
                    receiver._changed.notify_all()
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Receiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, condition, timeout: float = 60) -> None:
        """Block until ``condition(self)`` holds (woken by each request), or fail."""
        with self._changed:
            assert self._changed.wait_for(lambda: condition(self), timeout), \
                f"receiver never saw it: {len(self.received)} received, {self.held} held"

    def of_type(self, kind: str) -> list[Received]:
        return [r for r in list(self.received) if r.document["type"] == kind]
