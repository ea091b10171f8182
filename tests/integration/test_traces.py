"""OpenTelemetry traces of real worker runs: the SDK's in-memory exporter behind the worker's
own setup (batching included), and a worker process exporting over OTLP/HTTP to a local
receiver."""

from __future__ import annotations

from uuid import UUID

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tickwork.scheduler.dispatcher import dispatch_due
from tickwork.scheduler.serialize import parse_utc
from tests.factories import queue_run
from tests.integration.test_honest_runs import done, paused_run
from tests.integration.test_worker_runs import events
from tests.integration.webhook_receiver import Receiver
from tests.integration.workers import WorkerProcess, running_worker, scalar, until
from tickwork.worker import tracing

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}  # never dialled: in-memory
USAGE = {"input_tokens": 30, "output_tokens": 7}
# Two reads, a third read the per-tool wall (set to 2) refuses, then an answer the judge passes.
SCRIPT = {"script": [
    {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 1}},
                    {"name": "demo.get_record", "arguments": {"id": 2}}], "usage": USAGE},
    {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": 3}}], "usage": USAGE},
    {"text": "Records 1 and 2 are invoices.", "usage": USAGE}],
    "judge": ["done"]}


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    assert tracing.setup(ENDPOINT, exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def finished_spans(exporter: InMemorySpanExporter) -> list:
    tracing.flush()  # the batch processor exports on its own schedule otherwise
    return list(exporter.get_finished_spans())


def named(spans, prefix: str) -> list:
    return [s for s in spans if s.name.startswith(prefix)]


async def scheduled_run(api, pool) -> tuple[str, str, str]:
    """(run id, agent id, schedule id) of a run dispatched from a schedule, as a tick does."""
    agent = (await api.post("/v1/agents", json={"name": "reader",
                                                "tools": ["demo.get_record"]})).json()
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"],
                                                      "cron": "*/5 * * * *",
                                                      "input": SCRIPT})).json()
    moment = parse_utc(schedule["next_run"], "next_run")
    result = await dispatch_due(pool, now=moment, batch_size=10, missed_limit=10)
    assert result.created == 1
    runs = (await api.get("/v1/runs", params={"schedule_id": schedule["id"]})).json()["items"]
    return runs[0]["id"], agent["id"], schedule["id"]


async def test_a_run_is_one_trace_with_model_and_tool_spans_and_the_refusal_marked(
        api, pool, db_url, exported):
    run_id, agent_id, schedule_id = await scheduled_run(api, pool)
    async with running_worker(pool, db_url, per_tool_cap=2):
        await until(db_url, *done(run_id))
    spans = finished_spans(exported)
    journal = await events(api, run_id)
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["outcome"]) == ("completed", "done")

    [root] = named(spans, "tickwork.run")
    assert root.parent is None and root.context.trace_id == UUID(run_id).int
    assert {s.context.trace_id for s in spans} == {UUID(run_id).int}
    assert root.resource.attributes["service.name"] == "tickwork-worker"
    tenant_id = scalar(db_url, "SELECT tenant_id::text FROM executions WHERE id = %s", (run_id,))
    expected = {"tickwork.execution_id": run_id, "tickwork.agent_id": agent_id,
                "tickwork.schedule_id": schedule_id, "tickwork.attempt": 1,
                "tickwork.resumed": False, "tickwork.status": "completed",
                "tickwork.outcome": "done", "tickwork.usage.input_tokens": 90,
                "tickwork.usage.output_tokens": 21, "tickwork.usage.model_calls": 4}
    assert {k: root.attributes.get(k) for k in expected} == expected
    assert root.attributes["tickwork.tenant_id"] == tenant_id
    assert root.attributes["tickwork.worker_id"].startswith("test:")

    turns = named(spans, "chat default")
    [judge] = named(spans, "chat judge")
    tools = named(spans, "execute_tool ")
    assert len(turns) == 3 and len(tools) == 3 and len(spans) == 1 + 3 + 1 + 3
    for child in turns + [judge] + tools:
        assert child.parent.span_id == root.context.span_id
    steps = [e["seq"] for e in journal if e["type"] == "step_start"]
    assert [s.attributes["tickwork.step"] for s in turns] == steps
    assert all(s.attributes["gen_ai.usage.input_tokens"] == 30 and
               s.attributes["gen_ai.usage.output_tokens"] == 7 for s in turns)
    assert judge.attributes["tickwork.alias"] == "judge"
    assert judge.attributes["tickwork.step"] == steps[-1]
    assert "gen_ai.usage.input_tokens" not in judge.attributes  # the judge's script reports none

    ran = [s for s in tools if "tickwork.refused_by" not in s.attributes]
    [refused] = [s for s in tools if "tickwork.refused_by" in s.attributes]
    started = [e["payload"]["call_id"] for e in journal if e["type"] == "tool_start"]
    assert [s.attributes["tickwork.call_id"] for s in ran] == started == [
        f"call_{steps[0]}_0", f"call_{steps[0]}_1"]
    assert all(s.attributes["tickwork.tool"] == "demo.get_record" and
               s.attributes["tickwork.ok"] is True and
               s.attributes["tickwork.replayed"] is False and
               s.attributes["tickwork.tool_class"] == "read" for s in ran)
    assert refused.attributes["tickwork.refused_by"] == "per_tool"
    assert refused.attributes["tickwork.call_id"] == f"call_{steps[1]}_0"
    assert "tickwork.ok" not in refused.attributes
    # No argument, result or model text rides on any span.
    assert not any("argument" in key or "result" in key for s in spans for key in s.attributes)


async def test_a_resumed_run_is_a_second_root_span_in_the_same_trace(api, pool, db_url,
                                                                      exported):
    run_id = await paused_run(api, pool, db_url)
    approval = (await api.get("/v1/approvals")).json()["items"][0]
    assert (await api.post(f"/v1/approvals/{approval['id']}/approve")).status_code == 200
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    spans = finished_spans(exported)

    first, second = sorted(named(spans, "tickwork.run"), key=lambda s: s.start_time)
    assert first.context.trace_id == second.context.trace_id == UUID(run_id).int
    assert first.parent is None and second.parent is None
    assert first.attributes["tickwork.resumed"] is False
    assert first.attributes["tickwork.suspended"] is True
    assert "tickwork.outcome" not in first.attributes
    assert second.attributes["tickwork.resumed"] is True
    assert second.attributes["tickwork.approval_id"] == approval["id"]
    assert second.attributes["tickwork.outcome"] == "done"
    paused, sent = named(spans, "execute_tool demo.send_message")
    assert paused.parent.span_id == first.context.span_id
    assert paused.attributes["tickwork.awaiting_approval"] is True
    assert sent.parent.span_id == second.context.span_id
    assert sent.attributes["tickwork.approval_id"] == approval["id"]
    assert sent.attributes["tickwork.call_id"] == paused.attributes["tickwork.call_id"]
    assert sent.attributes["tickwork.ok"] is True


async def test_with_the_endpoint_unset_a_run_makes_no_span_and_no_provider(api, pool, db_url,
                                                                          monkeypatch):
    made = []
    real = tracing._Span.__init__

    def counting(self, *args, **kwargs):  # counts spans made by any hook
        made.append(1)
        real(self, *args, **kwargs)
    monkeypatch.setattr(tracing._Span, "__init__", counting)
    assert tracing.setup({}) is False
    agent = (await api.post("/v1/agents", json={"name": "reader",
                                                "tools": ["demo.get_record"]})).json()
    run_id = await queue_run(api, agent["id"], SCRIPT)
    async with running_worker(pool, db_url, per_tool_cap=2):
        await until(db_url, *done(run_id))
    assert (await api.get(f"/v1/runs/{run_id}")).json()["outcome"] == "done"
    assert made == [] and not tracing.active() and tracing._provider is None
    # The same counter does count when traces are on (so the zero above can fail).
    exporter = InMemorySpanExporter()
    assert tracing.setup(ENDPOINT, exporter=exporter)
    try:
        again = await queue_run(api, agent["id"], SCRIPT)
        async with running_worker(pool, db_url, per_tool_cap=2):
            await until(db_url, *done(again))
        assert len(made) == len(finished_spans(exporter)) == 8
    finally:
        tracing.shutdown()


async def test_a_worker_process_exports_over_otlp_http_and_flushes_its_batch_on_exit(
        api, pool, db_url):
    agent = (await api.post("/v1/agents", json={"name": "reader",
                                                "tools": ["demo.get_record"]})).json()
    run_id = await queue_run(api, agent["id"], SCRIPT)
    with Receiver() as receiver:
        base = f"http://127.0.0.1:{receiver.server.server_address[1]}"
        # A batch delay of ten minutes: only the flush on exit can deliver the spans in time.
        process = WorkerProcess(db_url, OTEL_EXPORTER_OTLP_ENDPOINT=base,
                                OTEL_BSP_SCHEDULE_DELAY="600000", TICKWORK_PER_TOOL_CAP="2")
        try:
            await until(db_url, *done(run_id))
            assert receiver.received == []  # still batched
            assert process.terminate() == 0
        finally:
            if process.process.poll() is None:
                process.kill()
        receiver.wait_for(lambda r: len(r.received) >= 1)
    sent = ExportTraceServiceRequest()
    for request in receiver.received:
        assert request.headers["content-type"] == "application/x-protobuf"
        sent.MergeFromString(request.body)
    resources = sent.resource_spans
    names = [span.name for rs in resources for ss in rs.scope_spans for span in ss.spans]
    assert sorted(names) == sorted(["tickwork.run"] + ["chat default"] * 3 + ["chat judge"]
                                   + ["execute_tool demo.get_record"] * 3)
    service = {a.key: a.value.string_value for a in resources[0].resource.attributes}
    assert service["service.name"] == "tickwork-worker"
    [root] = [span for rs in resources for ss in rs.scope_spans for span in ss.spans
              if span.name == "tickwork.run"]
    assert int.from_bytes(root.trace_id, "big") == UUID(run_id).int
    attributes = {a.key: a.value for a in root.attributes}
    assert attributes["tickwork.execution_id"].string_value == run_id
    assert attributes["tickwork.outcome"].string_value == "done"
