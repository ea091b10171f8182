"""`tickwork webhook add | list | rm | deliveries` as real processes against the API served by
uvicorn: the secret printed once, `--json` as exactly one JSON document, errors as one
sentence."""

from __future__ import annotations

import asyncio
import json
import os

import psycopg

from tests.integration.drivers import ROOT
from tests.integration.test_cli_tail import TICKWORK, finish
from tests.integration.workers import scalar


async def cli(live_api, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "TICKWORK_API_URL": live_api["url"], "COLUMNS": "250",
           "TICKWORK_TOKEN": live_api["tokens"]["acme"]}
    process = await asyncio.create_subprocess_exec(
        *TICKWORK, "webhook", *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    return await finish(process)


async def test_add_prints_the_secret_once_list_json_and_rm(live_api, db_url):
    code, out, err = await cli(live_api, "add", "https://example.com/hooks", "--event",
                               "run.failed", "--event", "approval.required")
    assert code == 0, err
    secret = out.splitlines()[-1]
    assert secret.startswith("whsec_") and secret == scalar(db_url, "SELECT secret FROM webhooks")
    webhook_id = str(scalar(db_url, "SELECT id FROM webhooks"))
    assert webhook_id in out and "not shown again" in out

    code, out, err = await cli(live_api, "list", "--json")
    assert code == 0, err
    document = json.loads(out)  # exactly one JSON document, nothing else on stdout
    assert document == {"items": [{"id": webhook_id, "url": "https://example.com/hooks",
                                   "events": ["run.failed", "approval.required"],
                                   "created_at": document["items"][0]["created_at"]}]}
    code, out, err = await cli(live_api, "list")
    assert code == 0 and webhook_id in out and "run.failed, approval.required" in out
    assert secret not in out

    with psycopg.connect(db_url, autocommit=True) as conn:  # one attempt already made
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, type, data, attempts,"
                     " last_status_code, last_error) VALUES (gen_random_uuid(), %s,"
                     " 'run.failed', '{\"run_id\": \"r\"}', 1, 500,"
                     " 'the receiver answered HTTP 500')", (webhook_id,))
    code, out, err = await cli(live_api, "deliveries", webhook_id, "--json")
    assert code == 0, err
    [logged] = json.loads(out)["items"]
    assert (logged["type"], logged["status"], logged["attempts"]) == ("run.failed", "pending", 1)
    code, out, err = await cli(live_api, "deliveries", webhook_id)
    assert code == 0 and "run.failed" in out and "the receiver answered HTTP 500" in out, err

    code, out, err = await cli(live_api, "rm", webhook_id)
    assert code == 0 and f"removed webhook {webhook_id}" in out, err
    code, out, err = await cli(live_api, "list", "--json")
    assert json.loads(out) == {"items": []}


async def test_mistakes_are_one_sentence_and_change_nothing(live_api, db_url):
    for args, sentence in [
            (("add", "ftp://example.com", "--event", "run.failed"), "must be an http:// or"),
            (("add", "https://example.com", "--event", "run.done"), "unknown event 'run.done'"),
            (("rm", "not-an-id"), "is not a webhook id"),
            (("deliveries", "nope"), "is not a webhook id"),
            (("rm", "0190c3e2-0000-7000-8000-000000000000"), "does not exist")]:
        code, out, err = await cli(live_api, *args)
        assert code == 1 and sentence in " ".join(err.split()), (args, err)
        assert "Traceback" not in err
    assert scalar(db_url, "SELECT count(*) FROM webhooks") == 0
