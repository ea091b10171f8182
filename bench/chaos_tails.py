"""The R12 chaos soak's live tails (I7): runs picked while they run are followed over the API's
Server-Sent Events, reconnecting with Last-Event-ID after a drop, and every event received is
kept as received (duplicates and all), to be compared with the committed journal at the end.

A thread per tail: the soak's own loop stays free to kill and restart processes.
"""

from __future__ import annotations

import threading
import time

import httpx
import psycopg

from tickwork.sse_follow import SseParser

FOLLOW_FOR_SECONDS = 420.0  # a run killed mid-way ends when the sweep writes its run_complete


class Tails:
    """Follows up to ``limit`` runs; ``pick`` adds runs not followed yet."""

    def __init__(self, base: str, token: str, limit: int) -> None:
        self.base, self.limit = base, limit
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        self.received: dict[str, list[int]] = {}
        self.ended: dict[str, bool] = {}
        self.reconnects = 0
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def pick(self, per_call: int = 3) -> None:
        """Start following up to ``per_call`` runs that are queued or running now (best effort:
        the API may answer 503 while Postgres restarts; a later call picks then)."""
        fresh: list[str] = []
        for status in ("queued", "running"):
            if len(self.received) + len(fresh) >= self.limit:
                break
            try:
                response = httpx.get(f"{self.base}/v1/runs", params={"status": status, "limit": 20},
                                     headers={"Authorization": self.headers["Authorization"]},
                                     timeout=10)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                fresh += [r["id"] for r in response.json()["items"]
                          if r["id"] not in self.received and r["id"] not in fresh]
        for run_id in fresh[:min(per_call, self.limit - len(self.received))]:
            self.received[run_id], self.ended[run_id] = [], False
            thread = threading.Thread(target=self._follow, args=(run_id,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _follow(self, run_id: str) -> None:
        received, last_id = self.received[run_id], None
        deadline = time.monotonic() + FOLLOW_FOR_SECONDS
        while time.monotonic() < deadline:
            headers = dict(self.headers, **({"Last-Event-ID": last_id} if last_id else {}))
            try:
                with httpx.stream("GET", f"{self.base}/v1/runs/{run_id}/events", headers=headers,
                                  timeout=httpx.Timeout(30, connect=5)) as response:
                    if response.status_code == 200:
                        parser = SseParser()
                        for chunk in response.iter_text():
                            for event in parser.feed(chunk):
                                if event.id is None:
                                    continue
                                received.append(int(event.id))
                                last_id = event.id
                                if event.event == "run_complete":
                                    self.ended[run_id] = True
                                    return
            except httpx.HTTPError:
                pass
            with self._lock:
                self.reconnects += 1
            time.sleep(0.5)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def check(self, url: str) -> dict:
        """I7: each tail's received seqs equal the committed ones (same order, no duplicates)."""
        mismatched, unfinished = [], []
        with psycopg.connect(url) as conn:
            for run_id, received in self.received.items():
                committed = [row[0] for row in conn.execute(
                    "SELECT seq FROM run_events WHERE execution_id = %s ORDER BY seq", (run_id,))]
                if not self.ended[run_id]:
                    unfinished.append(run_id)
                elif list(received) != committed:
                    mismatched.append(run_id)
        return {"tails": len(self.received), "tails_mismatched": len(mismatched),
                "tails_unfinished": len(unfinished), "tail_reconnects": self.reconnects,
                "examples_mismatched": mismatched[:5], "examples_unfinished": unfinished[:5]}
