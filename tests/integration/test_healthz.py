"""GET /healthz: 200 while the process's database answers, 503 with the reason when it does
not; no token, and no tenant scope (it reads no table)."""

from __future__ import annotations

import httpx

from tickwork.scheduler.api.app import create_app
from tickwork.sql.db import open_pool


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test")


async def test_healthz_answers_ok_while_the_database_answers(pool, settings):
    async with client(create_app(settings, pool=pool)) as api:
        answers = [await api.get("/healthz") for _ in range(20)]
    assert {(a.status_code, a.text) for a in answers} == {(200, '{"status":"ok"}')}


async def test_healthz_is_unavailable_with_the_reason_when_no_connection_can_be_had(db_url,
                                                                                  settings):
    pool = await open_pool(db_url, application_name="tickwork-test", max_size=1)
    app = create_app(settings, pool=pool)
    async with client(app) as api:
        assert (await api.get("/healthz")).status_code == 200
        await pool.close()
        gone = await api.get("/healthz")
    assert gone.status_code == 503
    assert gone.json() == {"status": "unavailable", "reason": "PoolClosed"}
