"""A request whose database connection was lost (a Postgres restart) is run once more on fresh
connections instead of being answered 503, when that is safe (tickwork.sql.pool.once_more):

* any request that had sent no statement when its connection was found gone before a
  statement was sent: nothing of it reached the database;
* a request that may be repeated whatever its first run did, after any lost connection: a
  read (GET, HEAD, OPTIONS), or a run start with an Idempotency-Key (the key returns the run
  the first attempt may have made).

Anything else lost after it was sent may have committed, and keeps its 503 ("try again"). Each
attempt is judged the same way, up to ATTEMPTS in all (the fresh connection may be the next one
a restart's goodbye reaches). The decision is made when an attempt's response starts, so nothing
of a 503 that is replaced reaches the client, and a response that streams (a tail) passes
straight through. The request's body is kept as the first attempt read it, for the next ones.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.sql.pool import ATTEMPTS, note_retry, watching

READS = {"GET", "HEAD", "OPTIONS"}
KEYED_RUN_STARTS = re.compile(r"^/v1/(agents/[^/]+/runs|schedules/[^/]+/run-now)/?$")


def repeatable(scope: Scope) -> bool:
    """Safe to run twice whatever the first run did."""
    if scope["method"] in READS:
        return True
    return (scope["method"] == "POST" and bool(KEYED_RUN_STARTS.match(scope["path"]))
            and any(name == b"idempotency-key" for name, _ in scope["headers"]))


class OnceMore:
    """ASGI middleware: see the module's note."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        read: list[Message] = []  # the body as the first attempt read it, for the others

        async def recording() -> Message:
            message = await receive()
            read.append(message)
            return message

        for attempt in range(1, ATTEMPTS + 1):
            again = False
            with watching() as watch:
                async def answer(message: Message) -> None:
                    nonlocal again
                    if (attempt < ATTEMPTS and message["type"] == "http.response.start"
                            and message["status"] == 503
                            and watch.worth_once_more(repeatable(scope))):
                        again = True
                    if not again:
                        await send(message)

                await self.app(dict(scope), recording if attempt == 1 else replaying(read, receive),
                               answer)
            if not again:
                return
            note_retry(watch, f"{scope['method']} {scope['path']}", "database_unavailable")


def replaying(read: list[Message], receive: Receive) -> Receive:
    """The body the first attempt read, again; then the client's own messages (a disconnect)."""
    replay = iter(read)  # only the first attempt records: it is not added to meanwhile

    async def receive_again() -> Message:
        return next(replay, None) or await receive()
    return receive_again
