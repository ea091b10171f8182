"""A hostile OpenAI-compatible Chat Completions server for tests, over real HTTP on a loopback port.

Each test queues the answers it wants, in order: replies with text and/or tool calls whose ids
it chooses (duplicated within a reply, reused from an earlier turn, holding '/', 300 characters
long, missing), `content: null`, malformed argument JSON, usage figures, an HTTP failure (429
with Retry-After, 500, 400 context_length_exceeded), or silence past the client's timeout
(before the answer, or in the middle of a stream). Answers are streamed when the request asks.

Like the real API it refuses a malformed history with a 400 before taking an answer from the
queue: an assistant message's tool-call ids must be unique (and, stricter than some servers,
unused by any earlier message), each answered by exactly one `tool` message before the next
assistant or user message, no `tool` message without its call, ids at most 40 characters. It
can also enforce a context size: requests whose message text exceeds N characters get
OpenAI's context_length_exceeded 400. Every request is recorded with how it was answered.

It can also go down for a while (go_down): phases in turn, each for its seconds, of refused
connections (the listening socket is closed, then opened again on the same port), 503s, or
429s with a Retry-After; the HTTP phases answer without taking a queued answer, and may be
limited to the requests a predicate picks (one run's), the others answered as usual.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.hostile_history import MAX_ID_CHARS, message_chars, request_problem

AUTO = "<auto>"  # a call id the server makes up (unique per server)


@dataclass
class Call:
    name: str  # canonical or wire; sent as the wire name (dots become '__')
    arguments: Any  # a dict is sent as JSON text; a string is sent as it is, malformed or not
    id: str | None = AUTO  # None: the call carries no id at all


@dataclass
class Answer:
    text: str | None = None  # None is `content: null`
    calls: list[Call] = field(default_factory=list)
    usage: tuple[int, int] | None = None  # (prompt_tokens, completion_tokens)
    status: int = 200
    error: dict[str, Any] | None = None  # the body of a failure
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0  # seconds of silence before anything is sent
    hang_after_chunks: int | None = None  # streamed: fall silent (and end) after this many
    piece_chars: int = 3  # characters per streamed text piece
    pieces: list[str] | None = None  # streamed: the text in exactly these pieces (text unset)
    pause: float = 0.0  # streamed: seconds of silence after each text piece
    trickle: float = 0.0  # streamed: a keep-alive comment this often, forever, and no answer
    raw: Any = None  # a body sent verbatim with `status` (text if a string, else JSON)
    sse: list[str] | None = None  # a stream sent verbatim, one string per line


def call(name: str, arguments: Any = None, id: str | None = AUTO) -> Call:
    return Call(name, {} if arguments is None else arguments, id)


def reply(text: str | None = None, *calls: Call, usage: tuple[int, int] | None = None,
          **options: Any) -> Answer:
    if text is None and options.get("pieces") is not None:
        text = "".join(options["pieces"])
    return Answer(text=text, calls=list(calls), usage=usage, **options)


def failure(status: int, message: str, *, code: str | None = None, kind: str = "server_error",
            retry_after: str | None = None) -> Answer:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Answer(status=status, headers=headers, error={"error": {
        "message": message, "type": kind, "param": None, "code": code}})


def too_many_requests(retry_after: str = "0.1") -> Answer:
    return failure(429, "Rate limit reached for requests. Please try again shortly.",
                   code="rate_limit_exceeded", kind="requests", retry_after=retry_after)


def server_error() -> Answer:
    return failure(500, "The server had an error while processing your request.")


def context_too_long(limit: int = 4096, got: int = 5000) -> Answer:
    return failure(400, f"This model's maximum context length is {limit} tokens. However, your "
                        f"messages resulted in {got} tokens. Please reduce the length of the "
                        "messages.", code="context_length_exceeded", kind="invalid_request_error")


def silence(seconds: float) -> Answer:
    """No answer at all for `seconds` (then a reply nobody should still be waiting for)."""
    return Answer(text="too late", hang=seconds)


@dataclass(frozen=True)
class Phase:
    """One phase of an outage: ``status`` 0 refuses connections, else every request is
    answered with it (and Retry-After, if given)."""

    seconds: float
    status: int = 0
    retry_after: str | None = None
    delay: float = 0.0  # each answer comes this long after its request


def refused(seconds: float) -> Phase:
    return Phase(seconds)


def unavailable(seconds: float, status: int = 503) -> Phase:
    return Phase(seconds, status)


def rate_limited(seconds: float, retry_after: str = "120", *, delay: float = 0.0) -> Phase:
    return Phase(seconds, 429, retry_after, delay)


@dataclass
class Recorded:
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 0
    problem: str | None = None  # why the server refused it, if it did
    answer: Answer | None = None
    complete: bool = False  # the whole answer went out (a hang never completes)


class HostileModel:
    def __init__(self, *, context_chars: int | None = None, max_id_chars: int = MAX_ID_CHARS,
                 unique_ids_across_history: bool = True) -> None:
        self.context_chars = context_chars
        self.max_id_chars = max_id_chars
        self.unique_ids_across_history = unique_ids_across_history
        self.answers: deque[Answer] = deque()
        self.requests: list[Recorded] = []
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""
        self._port = 0
        # An outage: (monotonic end, phase) in order, and which requests it answers.
        self._phases: list[tuple[float, Phase]] = []
        self._affects: Callable[[Any], bool] = lambda _body: True
        self.arrived = threading.Event()  # set by every request (a test clears it to wait)
        self._closed = threading.Event()
        self._recovered = threading.Event()
        self._interrupt = threading.Event()  # set by close() and recover()
        self._serving = threading.Lock()  # an outage's restart and close() never interleave

    def queue(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    # What the tests read

    def accepted(self) -> list[Recorded]:
        return [r for r in self.requests if r.status == 200]

    def refused_histories(self) -> list[str]:
        return [r.problem for r in self.requests if r.problem]

    def usage_served(self) -> tuple[int, int, int]:
        """(prompt tokens, completion tokens, completions) over answers that went out whole."""
        whole = [r for r in self.requests if r.complete and r.status == 200]
        return (sum(r.answer.usage[0] for r in whole if r.answer.usage),
                sum(r.answer.usage[1] for r in whole if r.answer.usage), len(whole))

    # Serving

    def go_down(self, *phases: Phase, affects: Callable[[Any], bool] | None = None) -> None:
        """Begin an outage now: each phase in turn; refused phases close the port meanwhile.
        ``affects`` picks the requests an HTTP phase answers (by their JSON body)."""
        now, ends = time.monotonic(), []
        for phase in phases:
            now += phase.seconds
            ends.append((now, phase))
        self._phases, self._affects = ends, affects or (lambda _body: True)
        self._recovered.clear()
        self._interrupt.clear()
        if phases and phases[0].status == 0:  # closed before this returns: no request slips in
            with self._serving:
                self._stop_serving()
        threading.Thread(target=self._run_outage, args=(ends,), daemon=True).start()

    def recover(self) -> None:
        """End the outage now: the port open again, every request answered as usual."""
        self._phases = []
        self._recovered.set()
        self._interrupt.set()

    def _run_outage(self, phases: list[tuple[float, Phase]]) -> None:
        for end, phase in phases:
            if phase.status == 0:
                with self._serving:
                    self._stop_serving()
            self._interrupt.wait(max(0.0, end - time.monotonic()))
            if phase.status == 0:
                with self._serving:
                    if not self._closed.is_set():
                        self.start(self._port)
            if self._closed.is_set() or self._recovered.is_set():
                return

    def _outage_answer(self, body: Any) -> Phase | None:
        now = time.monotonic()
        for end, phase in self._phases:
            if now < end:
                return phase if phase.status and self._affects(body) else None
        return None

    def start(self, port: int = 0) -> "HostileModel":
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                                     timeout_graceful_shutdown=1))
        self._server.install_signal_handlers = lambda: None
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the hostile model server did not start"
            time.sleep(0.01)
        self._port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self._port}/v1"
        self._sock = sock
        return self

    def _stop_serving(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._sock.close()
            self._server = None

    def close(self) -> None:
        with self._serving:
            self._closed.set()  # an outage still going restarts nothing after this
            self._interrupt.set()
            self._stop_serving()

    def __enter__(self) -> "HostileModel":
        return self.start()

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    async def _chat(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        record = Recorded(body, dict(request.headers))
        self.requests.append(record)
        self.arrived.set()
        down = self._outage_answer(body)
        if down is not None:
            await asyncio.sleep(down.delay)
            record.status = down.status
            record.complete = True
            headers = {"Retry-After": down.retry_after} if down.retry_after else {}
            return JSONResponse({"error": {"message": f"outage: answering {down.status}",
                                           "type": "server_error", "param": None, "code": None}},
                                status_code=down.status, headers=headers)
        problem = request_problem(body, self.max_id_chars, self.unique_ids_across_history)
        if problem is not None:
            record.status, record.problem = 400, problem
            return _invalid(problem)
        size = message_chars(body["messages"])
        if self.context_chars is not None and size > self.context_chars:
            refusal = context_too_long(self.context_chars, size)
            record.status = 400
            return JSONResponse(refusal.error, status_code=400)
        if not self.answers:
            record.status, record.problem = 400, "the test queued no answer for this request"
            return _invalid(record.problem)
        answer = record.answer = self.answers.popleft()
        record.status = answer.status
        if answer.hang:
            await asyncio.sleep(answer.hang)
        if answer.trickle:
            return StreamingResponse(self._trickle(answer.trickle), media_type="text/event-stream")
        if answer.sse is not None:
            return StreamingResponse(self._verbatim(record, answer.sse),
                                     media_type="text/event-stream")
        if answer.raw is not None:
            record.complete = True
            if isinstance(answer.raw, str):
                return Response(answer.raw, status_code=answer.status, headers=answer.headers,
                                media_type="text/plain")
            return JSONResponse(answer.raw, status_code=answer.status, headers=answer.headers)
        if answer.status != 200:
            record.complete = True
            return JSONResponse(answer.error, status_code=answer.status, headers=answer.headers)
        ids = [self._id(c) for c in answer.calls]
        model = str(body.get("model", ""))
        if body.get("stream"):
            asked = (body.get("stream_options") or {}).get("include_usage")
            usage = answer.usage if asked else None
            return StreamingResponse(self._stream(record, answer, ids, model, usage),
                                     media_type="text/event-stream")
        record.complete = not answer.hang
        return JSONResponse(completion(answer, ids, model))

    def _id(self, c: Call) -> str | None:
        return f"call_{next(self._ids)}" if c.id == AUTO else c.id

    async def _stream(self, record: Recorded, answer: Answer, ids: list[str | None], model: str,
                      usage: tuple[int, int] | None) -> AsyncIterator[str]:
        for n, chunk in enumerate(chunks(answer, ids, model, usage)):
            if n == answer.hang_after_chunks:
                await asyncio.sleep(1_000_000)  # until the client gives up and we are closed
                return
            yield f"data: {json.dumps(chunk)}\n\n"
            text_piece = bool(chunk["choices"]) and chunk["choices"][0]["delta"].get("content")
            await asyncio.sleep(answer.pause if text_piece else 0)
        yield "data: [DONE]\n\n"
        record.complete = not answer.hang


    async def _trickle(self, every: float) -> AsyncIterator[str]:
        while True:  # until the client gives up
            yield ": keep-alive\n\n"
            await asyncio.sleep(every)

    async def _verbatim(self, record: Recorded, lines: list[str]) -> AsyncIterator[str]:
        for line in lines:
            yield line + "\n"
            await asyncio.sleep(0)
        record.complete = True


def _invalid(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": "messages", "code": None}}, status_code=400)


def _wire(name: str) -> str:
    return name.replace(".", "__")


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def completion(answer: Answer, ids: list[str | None], model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.calls:
        message["tool_calls"] = [
            {**({"id": i} if i is not None else {}), "type": "function",
             "function": {"name": _wire(c.name), "arguments": _arguments(c.arguments)}}
            for c, i in zip(answer.calls, ids)]
    finish = "tool_calls" if answer.calls else "stop"
    data: dict[str, Any] = {"id": "chatcmpl-hostile", "object": "chat.completion",
                            "created": int(time.time()), "model": model,
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if answer.usage:
        data["usage"] = _usage(answer.usage)
    return data


def chunks(answer: Answer, ids: list[str | None], model: str,
           usage: tuple[int, int] | None) -> list[dict[str, Any]]:
    """The answer as OpenAI streams it: a role chunk, text pieces, tool-call fragments by index
    (id and name first, the arguments in pieces), a finish chunk, then usage if asked for."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-hostile", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model, "usage": None,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": None if answer.text is None else ""})]
    text, size = answer.text or "", max(1, answer.piece_chars)
    pieces = answer.pieces if answer.pieces is not None else \
        [text[i:i + size] for i in range(0, len(text), size)]
    out += [chunk({"content": piece}) for piece in pieces]
    for index, (c, call_id) in enumerate(zip(answer.calls, ids)):
        head = {"index": index, "type": "function",
                "function": {"name": _wire(c.name), "arguments": ""}}
        if call_id is not None:
            head["id"] = call_id
        out.append(chunk({"tool_calls": [head]}))
        raw = _arguments(c.arguments)
        step = max(1, len(raw) // 3)
        out += [chunk({"tool_calls": [{"index": index,
                                       "function": {"arguments": raw[i:i + step]}}]})
                for i in range(0, len(raw), step)]
    out.append(chunk({}, "tool_calls" if answer.calls else "stop"))
    if usage:
        out.append({"id": "chatcmpl-hostile", "object": "chat.completion.chunk",
                    "created": int(time.time()), "model": model, "choices": [],
                    "usage": _usage(usage)})
    return out


def _usage(usage: tuple[int, int]) -> dict[str, int]:
    return {"prompt_tokens": usage[0], "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1]}
