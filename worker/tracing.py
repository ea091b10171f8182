"""OpenTelemetry traces of runs: a span per run delivery, per model call and per tool call.

On only when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set:
``setup`` then builds a TracerProvider (service name ``tickwork-worker`` unless
OTEL_SERVICE_NAME says otherwise) with a BatchSpanProcessor and the OTLP/HTTP exporter, which
reads its headers, timeout and the batch settings from the standard OTEL_* variables itself.
Unset (or OTEL_SDK_DISABLED=true), the SDK is never imported and every hook returns one shared
do-nothing object: a global check and a return per hook, nothing else.

The provider is this module's own, not OpenTelemetry's global one, so a library that sets
the global provider changes nothing here and tests can set up and tear down at will.

Every delivery of a run (first claim, each resume after an approval, each retry attempt) is a
root span of the same trace: the trace id is the execution id's 128 bits, so a resumed or
retried run is found under its own id with no link to follow. Span ids stay random.

Attributes carry ids and counts only, never tool arguments, results or model text (those may
hold secrets; the journal keeps them, redacted).
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from typing import Any, Mapping
from urllib.parse import urlsplit
from uuid import UUID

import structlog

log = structlog.get_logger()

SERVICE_NAME = "tickwork-worker"
SCOPE = "tickwork.worker"
TOOL_NAME_CHARS = 200

_provider: Any = None  # the SDK's TracerProvider while traces are on
_tracer: Any = None  # None: traces are off and every hook is a no-op
# The trace id the next root span takes (the execution id), read by RunTraceIds.
_next_trace_id: ContextVar[int | None] = ContextVar("tickwork_trace_id", default=None)
# The span of the run delivery in progress, so deeper code can annotate it (usage, release).
_run_span: ContextVar[Any] = ContextVar("tickwork_run_span", default=None)


class _Off:
    """What every hook returns while traces are off: enters, notes and exits doing nothing."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def note(self, **attributes: Any) -> None:
        pass


OFF = _Off()


def active() -> bool:
    return _tracer is not None


def endpoint_from(environ: Mapping[str, str]) -> str | None:
    """Where spans go, as the OTLP exporter reads it: the traces endpoint as given, else the
    base endpoint with /v1/traces; None when neither is set (traces off)."""
    traces = (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if traces:
        return traces
    base = (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    return f"{base.rstrip('/')}/v1/traces" if base else None


def setup(environ: Mapping[str, str] | None = None, *, exporter: Any = None) -> bool:
    """Turn traces on when an OTLP endpoint is configured; True when they are on. Called
    again it keeps what it has. ``exporter`` replaces the OTLP one (tests pass the SDK's
    in-memory exporter); batching stays the same."""
    global _provider, _tracer
    environ = os.environ if environ is None else environ
    endpoint = endpoint_from(environ)
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        endpoint = None  # the standard switch that turns every OpenTelemetry SDK off
    if _tracer is not None or endpoint is None:
        return _tracer is not None
    if not endpoint.startswith(("http://", "https://")):
        # A bad value must not stop the worker's runs; it is said once, clearly, and ignored.
        # The value is not echoed: it may carry a password, and it is not a URL to clean.
        named = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
                 if (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
                 else "OTEL_EXPORTER_OTLP_ENDPOINT")
        log.error("tracing_off", reason=f"{named} is not an http:// or https:// URL, so no "
                                        "traces are exported")
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        # Headers, timeout and compression still come from the standard OTEL_* variables.
        exporter = OTLPSpanExporter(endpoint=endpoint)
    # OTEL_SERVICE_NAME, when an operator sets it, names the service instead.
    named = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create(named), id_generator=_run_trace_ids())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _provider, _tracer = provider, provider.get_tracer(SCOPE)
    log.info("tracing_on", endpoint=_shown(endpoint))
    return True


def _shown(endpoint: str) -> str:
    """The endpoint for a log line, without any user:password it carries."""
    parts = urlsplit(endpoint)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def flush(timeout_millis: int = 30_000) -> None:
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def shutdown() -> None:
    """Export what is batched and turn traces off (the worker's exit; tests' teardown)."""
    global _provider, _tracer
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def trace_id_of(execution_id: UUID | str) -> int:
    return UUID(str(execution_id)).int


def _run_trace_ids():
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class RunTraceIds(RandomIdGenerator):
        """A root span started by ``run`` takes its execution's id as trace id."""

        def generate_trace_id(self) -> int:
            chosen = _next_trace_id.get()
            return chosen if chosen else super().generate_trace_id()

        def is_trace_id_random(self) -> bool:
            # Ids taken from UUIDv7s are not uniformly random in their low 56 bits (a
            # generator may put a counter there): the W3C random flag must not claim so.
            return False

    return RunTraceIds()


class _Span:
    """A started span as a context manager; ``note`` adds attributes (None values skipped)."""

    __slots__ = ("span", "_use", "_run_token")

    def __init__(self, span: Any, *, run: bool = False) -> None:
        from opentelemetry import trace

        self.span = span
        # Exceptions are put on the span by __exit__, redacted (a provider's error may quote
        # what it was sent); the SDK's own recording would keep the raw message and stack.
        self._use = trace.use_span(span, end_on_exit=True, record_exception=False,
                                   set_status_on_exception=False)
        self._run_token = _run_span.set(self) if run else None

    def __enter__(self) -> _Span:
        self._use.__enter__()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if isinstance(exc, Exception):
            from tickwork.worker.redact import redact

            self.note(error=kind.__name__)
            self.failed(redact(f"{kind.__name__}: {exc}"))
        try:
            return bool(self._use.__exit__(kind, exc, tb))
        finally:
            if self._run_token is not None:
                _run_span.reset(self._run_token)

    def note(self, **attributes: Any) -> None:
        self.span.set_attributes({f"tickwork.{k}": _plain(v) for k, v in attributes.items()
                                  if v is not None})

    def failed(self, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_status(Status(StatusCode.ERROR, description[:300]))


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def run(execution_id: UUID, *, worker_id: str, resumed: str | None,
        **ids: Any) -> _Span | _Off:
    """The span of one delivery of a run, a root in the trace keyed by its execution id;
    ``ids`` are the run's other attributes (agent_id, schedule_id, tenant_id, attempt)."""
    if _tracer is None:
        return OFF
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind

    token = _next_trace_id.set(trace_id_of(execution_id))
    try:
        span = _tracer.start_span("tickwork.run", context=Context(), kind=SpanKind.CONSUMER)
    finally:
        _next_trace_id.reset(token)
    handle = _Span(span, run=True)
    handle.note(execution_id=execution_id, **ids, worker_id=worker_id, resumed=bool(resumed),
                approval_id=resumed)
    return handle


def note_run(**attributes: Any) -> None:
    """Annotate the run delivery in progress (its end, usage, release); nothing when off."""
    handle = _run_span.get() if _tracer is not None else None
    if handle is not None:
        handle.note(**attributes)


def end_run(handle: _Span | _Off, result: Mapping[str, Any]) -> None:
    """Put the delivery's end on its span: status and outcome, or why it stopped short."""
    if handle is OFF:
        return
    handle.note(status=result.get("status"), outcome=result.get("outcome"),
                suspended=result.get("breadcrumb") == "suspended" or None,
                parked=result.get("breadcrumb") == "parked" or None,
                fenced=result.get("fenced"))
    if result.get("status") == "failed":
        handle.failed(f"run {result.get('outcome') or 'failed'}")


def model_call(alias: str, step: int) -> _Span | _Off:
    """A span around one provider call (the agent's turn or the judge); ``note_usage`` adds
    what the reply says it cost."""
    if _tracer is None:
        return OFF
    handle = _Span(_tracer.start_span(f"chat {alias}"))
    handle.span.set_attributes({"gen_ai.operation.name": "chat"})
    handle.note(alias=alias, step=step)
    return handle


def note_usage(handle: _Span | _Off, usage: Any) -> None:
    if handle is OFF or usage is None:
        return
    handle.span.set_attributes({"gen_ai.usage.input_tokens": usage.input_tokens,
                                "gen_ai.usage.output_tokens": usage.output_tokens})


def tool_call(tool: str, call_id: str, step: int, **attributes: Any) -> _Span | _Off:
    """A span around one tool call that runs (or replays its stored result)."""
    if _tracer is None:
        return OFF
    tool = tool[:TOOL_NAME_CHARS]  # a made-up name from the model may be long
    handle = _Span(_tracer.start_span(f"execute_tool {tool}"))
    handle.span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                "gen_ai.tool.call.id": call_id})
    handle.note(tool=tool, call_id=call_id, step=step, **attributes)
    return handle


def note_tool(handle: _Span | _Off, *, ok: bool, replayed: bool) -> None:
    """The call's end: a tool that answered with an error marks its span failed."""
    if handle is OFF:
        return
    handle.note(ok=ok, replayed=replayed)
    if not ok:
        handle.failed("the tool answered with an error")


def tool_not_run(tool: str, call_id: str, step: int, *, wall: str | None = None,
                 awaiting_approval: bool = False) -> None:
    """A call that did not run: refused by a wall (``wall`` names it) or paused for a person.
    Its span starts and ends at once, so the trace shows where it happened."""
    if _tracer is None:
        return
    with tool_call(tool, call_id, step, refused_by=wall,
                   awaiting_approval=awaiting_approval or None):
        pass
