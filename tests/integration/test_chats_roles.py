"""Chats under least privilege (sql/grants.sql) and row-level security: the API's role creates
chats and posts messages with its own grants and sees one tenant's chats even with no tenant
filter; the worker's role reads a chat's history for its run."""

from __future__ import annotations

import httpx
import psycopg

from tickwork.scheduler.api.app import create_app, stop_hub
from tickwork.sql import QUERIES
from tickwork.sql.db import open_pool
from tests.integration.test_honest_runs import done
from tests.integration.test_roles import granted  # noqa: F401  (the fixture)
from tests.integration.workers import running_worker, until


async def test_a_chat_works_end_to_end_with_the_roles_own_grants_and_walls(granted, settings,  # noqa: F811
                                                                          tokens, db_url):
    api_pool = await open_pool(granted["tickwork_api"], application_name="tickwork-api")
    worker_pool = await open_pool(granted["tickwork_worker"], application_name="tickwork-worker")
    app = create_app(settings, pool=api_pool)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     headers={"Authorization": f"Bearer {tokens['acme']}"},
                                     base_url="http://api.test") as api:
            agent = (await api.post("/v1/agents", json={"name": "talker"})).json()
            chat = (await api.post(f"/v1/agents/{agent['id']}/chats", json={})).json()
            script = {"script": [{"text": "First answer."}]}
            first = (await api.post(f"/v1/chats/{chat['id']}/messages",
                                    json={"text": "Hello", "input": script})).json()
            async with running_worker(worker_pool, db_url):
                await until(db_url, *done(first["run_id"]))
                second = await api.post(f"/v1/chats/{chat['id']}/messages",
                                        json={"text": "Again", "input": script})
                assert second.status_code == 202, second.text
                await until(db_url, *done(second.json()["run_id"]))
            shown = (await api.get(f"/v1/chats/{chat['id']}")).json()
            assert [m["role"] for m in shown["messages"]] == ["user", "agent", "user", "agent"]
            globex = {"Authorization": f"Bearer {tokens['globex']}"}
            assert (await api.get(f"/v1/chats/{chat['id']}", headers=globex)).status_code == 404
        with psycopg.connect(granted["tickwork_worker"]) as conn:  # the worker's own read
            rows = conn.execute(QUERIES["list_chat_history"],
                                {"run_id": second.json()["run_id"]}).fetchall()
            assert [(text, answer) for _, text, answer in rows] == [("Hello", "First answer.")]
        with psycopg.connect(granted["tickwork_api"]) as conn:  # no tenant scope: no rows
            for table in ("chats", "chat_messages"):
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
            with conn.transaction():
                conn.execute(QUERIES["set_tenant_scope"], {"tenant_id": str(chat_tenant(db_url))})
                assert conn.execute("SELECT count(*) FROM chat_messages").fetchone()[0] == 2
    finally:
        await stop_hub(app)
        for pool in (api_pool, worker_pool):
            await pool.close()


def chat_tenant(db_url: str):
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT tenant_id FROM chats").fetchone()[0]
