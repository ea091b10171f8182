"""worker/tracing.py: set up from the environment, off (and nearly free) when unset."""

from __future__ import annotations

import os
import subprocess
import sys
from uuid import UUID

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from structlog.testing import capture_logs

from tickwork.worker import tracing
from tickwork.worker.model import Usage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ON = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}


@pytest.fixture(autouse=True)
def off_after():
    tracing.shutdown()
    yield
    tracing.shutdown()


def processor():
    [only] = tracing._provider._active_span_processor._span_processors
    return only


def test_unset_sets_up_nothing_and_every_hook_is_the_shared_no_op():
    assert tracing.setup({}) is False
    assert tracing.setup({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}) is False
    assert not tracing.active() and tracing._provider is None
    assert tracing.run(UUID(int=7), worker_id="w", resumed=None, agent_id=None) is tracing.OFF
    assert tracing.model_call("default", 2) is tracing.OFF
    assert tracing.tool_call("demo.get_record", "call_2_0", 2) is tracing.OFF
    with tracing.OFF as span:
        span.note(anything=1)
    tracing.note_run(released=True)
    tracing.tool_not_run("x", "call_2_1", 2, wall="per_tool")


def test_unset_never_imports_the_sdk_and_a_thousand_runs_of_hooks_retain_no_memory():
    """The count that stands for 'near-zero cost' (a timing would be a flaky test): with the
    variable unset, no OpenTelemetry SDK or exporter module is loaded, and running every hook
    as often as a thousand runs' calls leaves no memory behind."""
    code = """
import sys, tracemalloc
from uuid import UUID
import tickwork.worker_process, tickwork.worker.run_delivery, tickwork.worker.calls, tickwork.worker.model_turn
from tickwork.worker import tracing
assert tracing.setup() is False
def hooks():
    with tracing.run(UUID(int=7), worker_id="w", resumed=None, agent_id=None) as run:
        with tracing.model_call("default", 2) as call:
            tracing.note_usage(call, None)
        with tracing.tool_call("demo.get_record", "call_2_0", 2, tool_class="read") as tool:
            tracing.note_tool(tool, ok=True, replayed=False)
        tracing.tool_not_run("demo.get_record", "call_2_1", 2, wall="per_tool")
        tracing.note_run(released=True)
        tracing.end_run(run, {"status": "completed", "outcome": "done"})
hooks()
tracemalloc.start()
before = tracemalloc.take_snapshot()
for _ in range(1000):
    hooks()
after = tracemalloc.take_snapshot()
kept = sum(s.size_diff for s in after.compare_to(before, "filename")
           if s.traceback[0].filename.endswith(("tracing.py", "<string>")))
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk",
                                                         "opentelemetry.exporter")))
print(kept, len(loaded), loaded)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kept, loaded, names = out.stdout.split(" ", 2)
    assert int(loaded) == 0, names
    # A few bytes of interpreter bookkeeping may show; one object kept per round would be
    # tens of kilobytes.
    assert int(kept) < 1000


def test_set_builds_a_batching_otlp_http_provider_named_tickwork_worker():
    assert tracing.setup(ON) is True and tracing.active()
    assert tracing._provider.resource.attributes["service.name"] == "tickwork-worker"
    batch = processor()
    assert isinstance(batch, BatchSpanProcessor)
    assert isinstance(batch.span_exporter, OTLPSpanExporter)
    assert batch.span_exporter._endpoint == "http://127.0.0.1:4318/v1/traces"
    first = tracing._provider
    assert tracing.setup(ON) is True and tracing._provider is first  # kept, not doubled


def test_the_traces_endpoint_is_taken_as_given():
    assert tracing.setup({**ON, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otel.test/x"})
    assert processor().span_exporter._endpoint == "https://otel.test/x"


def test_the_sdk_disabled_switch_keeps_traces_off():
    assert tracing.setup({**ON, "OTEL_SDK_DISABLED": "true"}) is False
    assert tracing._provider is None


def test_a_bad_endpoint_is_said_in_one_line_and_changes_nothing():
    with capture_logs() as logs:
        assert tracing.setup({"OTEL_EXPORTER_OTLP_ENDPOINT": "user:pw@collector:4318"}) is False
    assert tracing._provider is None and not tracing.active()
    [said] = logs
    assert said["event"] == "tracing_off" and said["log_level"] == "error"
    assert said["reason"] == ("OTEL_EXPORTER_OTLP_ENDPOINT is not an http:// or https:// URL, "
                              "so no traces are exported")


def test_a_run_span_takes_the_execution_id_as_trace_id_and_its_children_follow():
    exporter = InMemorySpanExporter()
    assert tracing.setup(ON, exporter=exporter)
    execution_id = UUID("0190f0e4-8c3a-7b21-9d4e-5f6a7b8c9d0e")
    with tracing.run(execution_id, worker_id="w:1", resumed=None, agent_id=UUID(int=1),
                     schedule_id=None, tenant_id=UUID(int=2), attempt=2) as run:
        with tracing.model_call("default", 2) as call:
            tracing.note_usage(call, Usage(11, 4))
        tracing.note_run(**{"usage.input_tokens": 11})
        tracing.end_run(run, {"status": "failed", "outcome": "failed"})
    tracing.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root, child = spans["tickwork.run"], spans["chat default"]
    assert root.context.trace_id == child.context.trace_id == execution_id.int
    assert child.parent.span_id == root.context.span_id and root.parent is None
    assert not root.context.trace_flags & 0x02  # not claimed random: it is the execution id
    assert root.attributes["tickwork.attempt"] == 2
    assert root.attributes["tickwork.tenant_id"] == str(UUID(int=2))
    assert "tickwork.schedule_id" not in root.attributes  # a manual run has none
    assert root.attributes["tickwork.usage.input_tokens"] == 11
    assert root.status.status_code == StatusCode.ERROR
    assert child.attributes["gen_ai.usage.input_tokens"] == 11
    assert child.attributes["gen_ai.usage.output_tokens"] == 4
    # Outside a run, spans get ordinary random trace ids.
    with tracing.model_call("judge", 3):
        pass
    tracing.flush()
    [loose] = [s for s in exporter.get_finished_spans() if s.name == "chat judge"]
    assert loose.context.trace_id != execution_id.int and loose.parent is None


def test_an_error_on_a_span_is_redacted_and_a_failed_tool_marked():
    exporter = InMemorySpanExporter()
    assert tracing.setup(ON, exporter=exporter)
    key = "sk-" + "a1B2" * 8
    with pytest.raises(RuntimeError):
        with tracing.model_call("default", 2):
            raise RuntimeError(f"the provider refused key {key}")
    with tracing.tool_call("demo.get_record", "call_2_0", 2) as tool:
        tracing.note_tool(tool, ok=False, replayed=False)
    tracing.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    failed = spans["chat default"]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["tickwork.error"] == "RuntimeError"
    assert "RuntimeError" in failed.status.description and key not in failed.status.description
    assert not failed.events  # no raw exception event with the message and stack
    tool = spans["execute_tool demo.get_record"]
    assert tool.status.status_code == StatusCode.ERROR and tool.attributes["tickwork.ok"] is False


def test_shutdown_exports_what_is_still_batched():
    exporter = InMemorySpanExporter()
    assert tracing.setup(ON, exporter=exporter)
    with tracing.tool_call("demo.get_record", "call_2_0", 2):
        pass
    assert exporter.get_finished_spans() == ()  # the batch waits for its schedule
    tracing.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["execute_tool demo.get_record"]
    assert not tracing.active()
