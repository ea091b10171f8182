"""A run's answer is a field (GET /v1/runs/{id}, GET /v1/runs, run.completed deliveries), redacted
like everything shown; input.message reaches the model as the person's plain text."""

from __future__ import annotations

import psycopg

from tests.factories import create_agent, queue_run, scripted_agent
from tests.hostile_model import HostileModel, reply
from tests.integration.test_honest_runs import done
from tests.integration.test_hostile_model import hostile_worker
from tests.integration.test_cli_tail import live  # noqa: F401  (fixture)
from tests.integration.workers import running_worker, until
from tickwork.worker.state import task_text

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2


async def test_a_finished_run_shows_its_answer_in_the_run_the_list_and_the_webhook(
        api, pool, db_url):
    hooked = await api.post("/v1/webhooks", json={"url": "https://example.com/hook",
                                                  "events": ["run.completed"]})
    assert hooked.status_code == 201, hooked.text
    agent_id = await scripted_agent(api)
    run_id = await queue_run(api, agent_id, {"script": [{"text": "Record 1 is an invoice."}]})
    assert (await api.get(f"/v1/runs/{run_id}")).json()["answer"] is None  # not yet
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))

    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["answer"]) == ("completed", "Record 1 is an invoice.")
    [listed] = (await api.get("/v1/runs", params={"agent_id": agent_id})).json()["items"]
    assert listed["answer"] == "Record 1 is an invoice."
    with psycopg.connect(db_url) as conn:
        [(kind, data)] = conn.execute("SELECT type, data FROM webhook_deliveries").fetchall()
    assert kind == "run.completed" and data["answer"] == "Record 1 is an invoice."


async def test_a_secret_in_the_answer_is_shown_redacted(api, pool, db_url):
    agent_id = await scripted_agent(api)
    run_id = await queue_run(api, agent_id, {"script": [{"text": f"The key is {SECRET}."}]})
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    answer = (await api.get(f"/v1/runs/{run_id}")).json()["answer"]
    assert SECRET not in answer and "[REDACTED:" in answer and answer.startswith("The key is ")


def test_input_message_is_the_plain_text_with_the_rest_beside_it_as_data():
    assert task_text({"message": "Which team gets the summary?"}) == \
        "Which team gets the summary?"
    text = task_text({"message": "Summarise.", "topic": "sales", "script": [{"text": "x"}],
                      "chat_id": "c1"})
    assert text.startswith("Summarise.\n\n") and '{"topic": "sales"}' in text
    assert "script" not in text and "c1" not in text
    assert task_text({"topic": "sales"}) == '{"topic": "sales"}'  # no message: as before


async def test_the_model_is_sent_input_message_as_the_persons_plain_text(api, pool, db_url):
    agent = await create_agent(api, "plain", tools=[], instructions="Be brief.")
    with HostileModel() as model:
        model.queue(reply("Ops."), reply("done"))
        run_id = await queue_run(api, agent["id"], {"message": "Which team: ops or sales?"})
        async with hostile_worker(pool, db_url, model):
            await until(db_url, *done(run_id))
    first = model.accepted()[0].body["messages"]
    assert first[0] == {"role": "system", "content": first[0]["content"]}
    assert "Be brief." in first[0]["content"]
    assert first[1] == {"role": "user", "content": "Which team: ops or sales?"}
    assert (await api.get(f"/v1/runs/{run_id}")).json()["answer"] == "Ops."


async def test_tickwork_run_message_sets_input_message(api, live):
    from tests.integration.test_run_control_cli import cli

    token = api.tokens["acme"]
    await api.post("/v1/agents", json={"name": "asked"})
    code, out, err = await cli(live, token, "run", "asked", "--message", "Which team?",
                               "--input", '{"topic": "sales"}')
    assert code == 0, err
    [run] = (await api.get("/v1/runs")).json()["items"]
    assert run["input"] == {"message": "Which team?", "topic": "sales"}
    code, out, err = await cli(live, token, "run", "asked", "--message", "x",
                               "--input", '{"message": "y"}')
    assert code == 1 and "--message" in err
    assert len((await api.get("/v1/runs")).json()["items"]) == 1  # the refusal queued nothing
