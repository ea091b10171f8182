"""Secrets a model puts into a call that waits for a person: shown redacted everywhere, kept
real only in the waiting call, and gone once the call has run or been rejected (issue 8)."""

from __future__ import annotations

import json
import secrets
import string

import psycopg
import structlog

from tests.factories import queue_run
from tests.integration.test_honest_runs import done, suspended
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, scalar, until
from tickwork.logs import configure_logging


def five_secrets() -> dict[str, str]:
    """Five secret shapes, random each run (so no real-looking secret sits in the repo); the
    value is the part that must never be shown."""
    def alnum(n: int) -> str:
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))
    return {"openai": "sk-" + "proj-" + alnum(48),
            "password": "Pw" + secrets.token_hex(6) + "!",
            "postgres": "pg" + secrets.token_hex(8),
            "github": "gh" + "p_" + alnum(36),
            "slack": "xo" + "xb-" + str(secrets.randbelow(10**12)) + "-" + alnum(24)}


def message_text(found: dict[str, str]) -> str:
    return (f"Release notes. API key {found['openai']}; password: {found['password']}, "
            f"db postgres://app:{found['postgres']}@db.internal:5432/app; "
            f"deploy token {found['github']} and Slack {found['slack']} for the bot.")


def leaked(found: dict[str, str], text: str) -> list[str]:
    return [kind for kind, value in found.items() if value in text]


async def waiting_send(api, pool, db_url, text: str, name: str = "announcer") -> str:
    agent = await api.post("/v1/agents", json={"name": name, "tools": ["demo.send_message"]})
    script = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                          "arguments": {"recipient": "ops", "text": text}}]},
                         {"text": "Sent the notes."}]}
    run_id = await queue_run(api, agent.json()["id"], script)
    async with running_worker(pool, db_url):
        await until(db_url, *suspended(run_id))
    return run_id


def at_rest(db_url: str, run_id: str) -> dict[str, str]:
    """Everything stored for the run except its input (the scripted model reads its replies
    from the input, so the input holds the secrets by construction)."""
    with psycopg.connect(db_url) as conn:
        def text(sql: str) -> str:
            return conn.execute(sql, (run_id,)).fetchone()[0] or ""
        return {
            "approvals": text("SELECT string_agg(to_jsonb(a)::text, ' ') FROM approvals a"
                              " WHERE execution_id = %s"),
            "run_states": text("SELECT string_agg(state::text, ' ') FROM run_states"
                               " WHERE execution_id = %s"),
            "journal": text("SELECT string_agg(payload::text, ' ') FROM run_events"
                            " WHERE execution_id = %s"),
            "tool_call_results": text("SELECT string_agg(result, ' ') FROM tool_call_results"
                                      " WHERE execution_id = %s"),
            "execution": text("SELECT (to_jsonb(e) - 'input')::text FROM executions e"
                              " WHERE id = %s"),
        }


async def test_secrets_in_a_waiting_send_are_never_shown_and_gone_after_rejection(
        api, pool, db_url, capsys):
    found = five_secrets()
    configure_logging()
    try:
        run_id = await waiting_send(api, pool, db_url, message_text(found))
        with psycopg.connect(db_url) as conn:
            state = conn.execute("SELECT state FROM run_states WHERE execution_id = %s",
                                 (run_id,)).fetchone()[0]
        # While it waits, the real arguments exist once: in the waiting call, not the history.
        assert state["pending"]["calls"][0]["arguments"]["text"] == message_text(found)
        assert leaked(found, json.dumps(state["messages"])) == []

        listed = await api.get("/v1/approvals")
        assert listed.status_code == 200 and len(listed.json()["items"]) == 1
        approval = listed.json()["items"][0]
        assert leaked(found, listed.text) == []
        shown = approval["arguments"]["text"]
        for kind in ("openai", "password", "url_password", "github", "slack"):
            assert f"[REDACTED:{kind}]" in shown
        assert "Release notes." in shown and "for the bot." in shown  # the rest is readable

        rejected = await api.post(f"/v1/approvals/{approval['id']}/reject",
                                  json={"reason": "holds credentials"})
        assert rejected.status_code == 200 and leaked(found, rejected.text) == []
        again = await api.post(f"/v1/approvals/{approval['id']}/approve")
        assert again.status_code == 409 and leaked(found, again.text) == []
        async with running_worker(pool, db_url):
            await until(db_url, *done(run_id))
        journal = await events(api, run_id)
        run = await api.get(f"/v1/runs/{run_id}")
        logs = capsys.readouterr()
    finally:
        structlog.reset_defaults()

    assert [e["type"] for e in journal].count("approval_required") == 1
    assert leaked(found, json.dumps(journal)) == []
    # The run's input is the operator's (here the scripted model's whole script), shown as given.
    assert leaked(found, json.dumps({k: v for k, v in run.json().items() if k != "input"})) == []
    assert "run_finished" in logs.out  # the capture saw the worker's lines
    assert leaked(found, logs.out + logs.err) == []
    stored = at_rest(db_url, run_id)
    assert stored["run_states"] == ""  # the resume consumed the saved state
    assert {where: leaked(found, text) for where, text in stored.items()} == {
        where: [] for where in stored}
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 0


async def test_an_approved_send_delivers_the_real_text_exactly_once_and_keeps_no_copy(
        api, pool, db_url):
    found = five_secrets()
    run_id = await waiting_send(api, pool, db_url, message_text(found))
    approval = (await api.get("/v1/approvals")).json()["items"][0]
    approved = await api.post(f"/v1/approvals/{approval['id']}/approve")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert leaked(found, approved.text) == []
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))
    with psycopg.connect(db_url) as conn:
        sent = conn.execute("SELECT recipient, text FROM demo_outbox").fetchall()
    assert sent == [("ops", message_text(found))]
    stored = at_rest(db_url, run_id)
    assert stored["run_states"] == ""
    assert {where: leaked(found, text) for where, text in stored.items()} == {
        where: [] for where in stored}
    journal = await events(api, run_id)
    assert leaked(found, json.dumps(journal)) == []
    assert (await api.get(f"/v1/runs/{run_id}")).json()["outcome"] == "done"


async def test_a_second_pause_in_the_same_run_saves_the_answered_call_redacted(api, pool, db_url):
    found = five_secrets()
    agent = await api.post("/v1/agents", json={"name": "twice", "tools": ["demo.send_message"]})
    script = {"script": [{"tool_calls": [{"name": "demo.send_message", "arguments": {
                             "recipient": "ops", "text": message_text(found)}}]},
                         {"tool_calls": [{"name": "demo.send_message", "arguments": {
                             "recipient": "ops", "text": "second, harmless"}}]},
                         {"text": "Done."}]}
    run_id = await queue_run(api, agent.json()["id"], script)
    async with running_worker(pool, db_url):
        await until(db_url, *suspended(run_id))
        first = (await api.get("/v1/approvals")).json()["items"][0]
        await api.post(f"/v1/approvals/{first['id']}/reject")
        await until(db_url, "SELECT count(*) = 2 FROM approvals WHERE execution_id = %s",
                         (run_id,))
        await until(db_url, *suspended(run_id))
    stored = at_rest(db_url, run_id)
    assert stored["run_states"] != ""  # the second call waits: its state is saved again
    assert "second, harmless" in stored["run_states"]
    assert {where: leaked(found, text) for where, text in stored.items()} == {
        where: [] for where in stored}


async def test_the_migration_forgets_states_left_by_earlier_resumes_and_keeps_waiting_ones(
        api, pool, db_url):
    from tickwork.sql.migrate import MIGRATIONS_DIR

    finished = await waiting_send(api, pool, db_url, "first")
    await api.post(f"/v1/approvals/{(await api.get('/v1/approvals')).json()['items'][0]['id']}"
                   "/reject")
    async with running_worker(pool, db_url):
        await until(db_url, *done(finished))
    waiting = await waiting_send(api, pool, db_url, "second", name="announcer-2")
    with psycopg.connect(db_url) as conn:  # what a resume before this change left behind
        conn.execute("INSERT INTO run_states (execution_id, version, state)"
                     " VALUES (%s, 1, '{\"left\": \"behind\"}')", (finished,))
        conn.execute((MIGRATIONS_DIR / "0023_forget_consumed_run_states.sql").read_text())
        kept = conn.execute("SELECT execution_id::text FROM run_states").fetchall()
    assert kept == [(waiting,)]


def judged_secrets() -> dict[str, str]:
    def alnum(n: int) -> str:
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))
    return {"stripe": "sk" + "_live_" + alnum(24), "github": "gh" + "p_" + alnum(36)}


async def test_a_judge_quoting_secrets_puts_neither_into_the_runs_reason_journal_or_webhook(
        api, pool, db_url):
    """Issue 28, attack 2: the judge's verdict text becomes the run's reason; a judge quoting the
    model's Stripe key and GitHub token must not put them into GET /v1/runs(/{id}), the journal
    or a webhook's delivery. Its stall reason (a continuation saved with the history) neither."""
    from tests.factories import make_webhook

    found = judged_secrets()
    quoted = f"the answer quotes the key {found['stripe']} and the token {found['github']}"
    agent = await api.post("/v1/agents", json={"name": "judged"})
    tenant = scalar(db_url, "SELECT tenant_id::text FROM agents WHERE id = %s",
                    (agent.json()["id"],))
    with psycopg.connect(db_url, autocommit=True) as conn:
        make_webhook(conn, tenant, ["run.completed"])
    script = {"script": [{"text": "Here is what I found."}, {"text": "Final report."}],
              "judge": [f"stalled: {quoted}", f"done: {quoted}"]}
    run_id = await queue_run(api, agent.json()["id"], script)
    async with running_worker(pool, db_url):
        await until(db_url, *done(run_id))

    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert run["outcome"] == "done" and "[REDACTED:stripe]" in run["reason"]
    assert "[REDACTED:github]" in run["reason"] and "quotes the key" in run["reason"]
    listed = (await api.get("/v1/runs")).json()["items"]
    shown = [{k: v for k, v in item.items() if k != "input"} for item in listed]
    assert leaked(found, json.dumps(shown)) == []
    assert leaked(found, json.dumps({k: v for k, v in run.items() if k != "input"})) == []
    journal = await events(api, run_id)
    assert [e["payload"]["verdict"] for e in journal if e["type"] == "gate_decision"] == [
        "stalled", "done"]
    assert leaked(found, json.dumps(journal)) == []
    stored = at_rest(db_url, run_id)
    assert {where: leaked(found, text) for where, text in stored.items()} == {
        where: [] for where in stored}
    delivered = scalar(db_url, "SELECT string_agg(data::text, ' ') FROM webhook_deliveries"
                               " WHERE data ->> 'run_id' = %s", (run_id,))
    assert "[REDACTED:stripe]" in delivered and leaked(found, delivered) == []


async def test_the_approver_sees_every_character_after_an_unterminated_key_block(api, pool, db_url):
    """Issue 28, attack 4: a message whose key block never ends was approved as "Weekly summary:
    nothing unusual. [REDACTED:private_key]" and sent in full. Only the key's lines are hidden;
    the marker says how much it hid and that the block was unterminated; the rest is shown."""
    key_lines = "\n".join("MII" + secrets.token_urlsafe(48).replace("-", "+").replace("_", "/")
                          for _ in range(3))
    order = ("Also wire 48,000 EUR to DE89 3704 0044 0532 0130 00 and send the customer export "
             "to partner@example.net.")
    text = (f"Weekly summary: nothing unusual.\n-----BEGIN RSA PRIVATE KEY-----\n{key_lines}\n"
            f"{order}")
    run_id = await waiting_send(api, pool, db_url, text, name="summariser")
    approval = (await api.get("/v1/approvals")).json()["items"][0]
    shown = approval["arguments"]["text"]
    hidden = len(f"-----BEGIN RSA PRIVATE KEY-----\n{key_lines}")
    assert shown == (f"Weekly summary: nothing unusual.\n"
                     f"[REDACTED:private_key {hidden} chars, unterminated]\n{order}")
    journal = await events(api, run_id)
    required = [e for e in journal if e["type"] == "approval_required"]
    assert order in json.dumps(required) and key_lines.split("\n")[0] not in json.dumps(journal)
