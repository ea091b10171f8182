"""Tenants' secrets (DESIGN "Tools the user brings"): set by an admin through the API, never
returned, sealed at rest under TICKWORK_SECRET_KEY, handed only to a tool of the same tenant's
run (ctx.secret), and scrubbed by exact value from everything the run stores or shows."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from tests.factories import create_agent, queue_run
from tests.integration.test_effects_once_per_chain import opened, worker
from tests.integration.test_roles import granted  # noqa: F401 (a fixture)
from tests.integration.test_worker_runs import events
from tests.integration.workers import scalar, until
from tickwork.sql.sealed import SecretBox, new_key, reseal_all
from tickwork.worker.tools.registry import ToolSpec, arguments_model

VALUE = "hunter2-correct-horse-battery"
LEAKY = "leakyvendor.login"


@pytest.fixture(autouse=True)
def secret_key(monkeypatch):
    key = new_key()
    monkeypatch.setenv("TICKWORK_SECRET_KEY", key)
    return key


async def test_an_admin_sets_lists_and_removes_a_secret_whose_value_never_comes_back(api, db_url):
    created = await api.post("/v1/secrets", json={"name": "STRIPE_KEY", "value": VALUE})
    assert created.status_code == 201, created.text
    assert VALUE not in created.text and set(created.json()) == {"name", "created_at",
                                                                   "updated_at"}
    again = await api.post("/v1/secrets", json={"name": "STRIPE_KEY", "value": VALUE + "2"})
    assert again.status_code == 201
    listed = await api.get("/v1/secrets")
    assert [item["name"] for item in listed.json()["items"]] == ["STRIPE_KEY"]
    assert VALUE not in listed.text
    sealed = scalar(db_url, "SELECT sealed FROM tenant_secrets")
    assert VALUE not in sealed  # not in plain text at rest
    assert (await api.delete("/v1/secrets/STRIPE_KEY")).status_code == 204
    missing = await api.delete("/v1/secrets/STRIPE_KEY")
    assert missing.status_code == 404 and "tickwork secret list" in missing.json()["message"]


@pytest.mark.parametrize("body, field", [
    ({"name": "1BAD", "value": "x"}, "name"), ({"name": "has space", "value": "x"}, "name"),
    ({"name": "OK", "value": ""}, "value"), ({"name": "OK", "value": "a\x00b"}, "value"),
    ({"name": "OK", "value": "x" * 70_000}, "value")])
async def test_a_bad_name_or_value_is_refused_in_a_sentence_and_stores_nothing(api, db_url, body,
                                                                             field):
    response = await api.post("/v1/secrets", json=body)
    assert response.status_code == 422 and response.json()["field"] == field
    assert scalar(db_url, "SELECT count(*) FROM tenant_secrets") == 0


async def test_without_a_key_setting_a_secret_says_what_to_set(api, db_url, monkeypatch):
    monkeypatch.delenv("TICKWORK_SECRET_KEY")
    response = await api.post("/v1/secrets", json={"name": "K", "value": VALUE})
    assert response.status_code == 503 and "TICKWORK_SECRET_KEY" in response.json()["message"]


async def test_a_non_admin_token_and_another_tenant_reach_no_secret(api, pool):
    from tickwork.scheduler.tokens import create_token

    assert (await api.post("/v1/secrets", json={"name": "K", "value": VALUE})).status_code == 201
    async with pool.connection() as conn:
        acme_member = await create_token(conn, tenant="acme", admin=False)
        globex_admin = await create_token(conn, tenant="globex", admin=True)
    member = {"Authorization": f"Bearer {acme_member}"}
    assert (await api.get("/v1/secrets", headers=member)).status_code == 403
    assert (await api.post("/v1/secrets", json={"name": "K", "value": "x"},
                           headers=member)).status_code == 403
    other = {"Authorization": f"Bearer {globex_admin}"}
    assert (await api.get("/v1/secrets", headers=other)).json()["items"] == []
    assert (await api.delete("/v1/secrets/K", headers=other)).status_code == 404


def test_a_sealed_value_opens_only_for_its_tenant_and_name_and_survives_a_rotation():
    from uuid import uuid4

    old_key, tenant = new_key(), uuid4()
    old = SecretBox(old_key)
    sealed = old.seal(tenant, "K", VALUE)
    assert old.open(tenant, "K", sealed) == VALUE
    for wrong in ((uuid4(), "K"), (tenant, "L")):
        with pytest.raises(Exception, match="does not belong"):
            old.open(*wrong, sealed)
    first = new_key()
    rotated = SecretBox(f"{first},{old_key}")
    assert SecretBox(first).open(tenant, "K", rotated.reseal(sealed)) == VALUE
    with pytest.raises(Exception, match="cannot be opened"):
        SecretBox(first).open(tenant, "K", sealed)  # the old key is gone: it does not open


def leaky_tool() -> ToolSpec:
    """A vendor tool that reads the tenant's secret and returns it (as a careless one would)."""
    async def login(context) -> dict:
        return {"logged_in": True, "echo": f"used {await context.secret('SERVICE_TOKEN')}"}
    return ToolSpec(key=LEAKY, tool_class="read", is_local=False, description="Log in.",
                    parameters={"type": "object", "properties": {}}, function=login,
                    arguments=arguments_model(login))


async def test_a_secret_a_tool_read_is_scrubbed_from_everything_the_run_shows(api, pool, db_url):
    assert (await api.post("/v1/secrets", json={"name": "SERVICE_TOKEN",
                                                "value": VALUE})).status_code == 201
    agent = await create_agent(api, "leaky", tools=["demo.send_message"])
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE agents SET tools = tools || %s::text WHERE id = %s",
                      (LEAKY, agent["id"]))
    run_id = await queue_run(api, agent["id"], {"script": [
        {"tool_calls": [{"name": LEAKY, "arguments": {}}]},
        {"text": f"The token is {VALUE}.",
         "tool_calls": [{"name": "demo.send_message",
                         "arguments": {"recipient": "ops", "text": f"token {VALUE}"}}]}]})
    async with worker(pool, db_url, model=opened(), tool_spec=leaky_tool()):
        await until(db_url, "SELECT count(*) = 1 FROM approvals", timeout=30)
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    run.pop("input")  # the scripted model's turns are the run's input, given as written
    shown = [json.dumps(await events(api, run_id)), json.dumps(run),
             (await api.get("/v1/approvals")).text,
             scalar(db_url, "SELECT state::text FROM run_states"),
             scalar(db_url, "SELECT arguments::text FROM approvals")]
    for text in shown:
        assert VALUE not in text
    assert "[REDACTED:tenant_secret]" in shown[0] and "[REDACTED:tenant_secret]" in shown[2]


async def test_a_tool_asking_for_a_secret_that_is_not_set_is_told_how_to_set_it(api, pool,
                                                                              db_url):
    agent = await create_agent(api, "asker", tools=["demo.get_record"])
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE agents SET tools = tools || %s::text WHERE id = %s",
                     (LEAKY, agent["id"]))
    run_id = await queue_run(api, agent["id"], {"script": [
        {"tool_calls": [{"name": LEAKY, "arguments": {}}]}, {"text": "Could not log in."}]})
    async with worker(pool, db_url, model=opened(), tool_spec=leaky_tool()) as model:
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (run_id,), timeout=30)
    told = model.sent[-1][-1][1]
    assert "no secret named 'SERVICE_TOKEN'" in told and "tickwork secret set" in told


def test_rotate_seals_every_value_under_the_new_first_key(db_url, secret_key):
    from uuid import uuid4

    tenant = uuid4()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'rot')", (tenant,))
        conn.execute("INSERT INTO tenant_secrets (tenant_id, name, sealed) VALUES (%s, 'K', %s)",
                     (tenant, SecretBox(secret_key).seal(tenant, "K", VALUE)))
    first = new_key()
    assert reseal_all(db_url, SecretBox(f"{first},{secret_key}")) == 1
    sealed = scalar(db_url, "SELECT sealed FROM tenant_secrets")
    assert SecretBox(first).open(tenant, "K", sealed) == VALUE


def test_the_api_role_cannot_read_a_sealed_value_and_the_worker_role_can(granted, db_url):
    with psycopg.connect(granted["tickwork_api"]) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT sealed FROM tenant_secrets")
    with psycopg.connect(granted["tickwork_worker"]) as conn:
        conn.execute("SELECT sealed FROM tenant_secrets")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM tenant_secrets")


def failing_tool() -> ToolSpec:
    """A vendor tool that reads the tenant's secret, then fails with it in its error."""
    async def login(context) -> dict:
        raise RuntimeError(f"login refused for token {await context.secret('SERVICE_TOKEN')}")
    return ToolSpec(key=LEAKY, tool_class="read", is_local=False, description="Log in.",
                    parameters={"type": "object", "properties": {}}, function=login,
                    arguments=arguments_model(login))


async def test_a_secret_in_a_tool_s_error_reaches_no_span_log_line_or_stored_row(
        api, pool, db_url, capsys):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tickwork.worker import tracing

    exporter = InMemorySpanExporter()
    assert tracing.setup({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
                         exporter=exporter)  # in memory: never dialled
    try:
        assert (await api.post("/v1/secrets", json={"name": "SERVICE_TOKEN",
                                                    "value": VALUE})).status_code == 201
        agent = await create_agent(api, "failing", tools=["demo.get_record"])
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE agents SET tools = tools || %s::text WHERE id = %s",
                         (LEAKY, agent["id"]))
        run_id = await queue_run(api, agent["id"], {"script": [
            {"tool_calls": [{"name": LEAKY, "arguments": {}}]}, {"text": "It failed."}]})
        async with worker(pool, db_url, model=opened(), tool_spec=failing_tool()) as model:
            await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                        (run_id,), timeout=30)
        tracing.flush()  # the batch processor exports on its own schedule otherwise
        spans = [span.to_json() for span in exporter.get_finished_spans()]
    finally:
        tracing.shutdown()
    assert spans  # the run was traced
    told = model.sent[-1][-1][1]
    assert "[REDACTED:tenant_secret]" in told  # the model is told, scrubbed
    logged = capsys.readouterr()
    with psycopg.connect(db_url) as conn:
        at_rest = [str(row) for table in ("run_events", "executions", "tool_results",
                                          "tool_call_results", "tenant_secrets")
                   for row in conn.execute(f"SELECT * FROM {table}").fetchall()]
    for text in [*spans, logged.out, logged.err, *at_rest]:
        assert VALUE not in text
