"""A per-tenant request rate (scheduler/api/tenant_rate.py): a tenant past its rate gets 429 with
Retry-After on every route, the fast run start included, and another tenant is not slowed."""

from __future__ import annotations

from tests.factories import create_agent
from tests.integration.workers import scalar
from tickwork.scheduler.api.tenant_rate import TenantRateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limited(api, *, rate: float, burst: int) -> Clock:
    clock = Clock()
    api.app.state.tenant_rate = TenantRateLimit(rate=rate, burst=burst, clock=clock)
    return clock


async def test_a_tenant_past_its_rate_gets_429_with_retry_after_and_others_do_not(api):
    clock = limited(api, rate=0.5, burst=3)
    answers = [await api.get("/v1/agents") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    assert refused.headers["Retry-After"] == "2"  # one request every 2 s
    assert refused.json()["error"] == "rate_limited"
    assert "request rate" in refused.json()["message"]
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    assert (await api.get("/v1/agents", headers=globex)).status_code == 200
    clock.now += 2
    assert (await api.get("/v1/agents")).status_code == 200
    assert (await api.get("/v1/agents")).status_code == 429


async def test_the_fast_run_start_is_limited_too(api, db_url):
    agent = (await create_agent(api, "limited"))["id"]
    limited(api, rate=1, burst=1)
    first = await api.post(f"/v1/agents/{agent}/runs", json={})
    second = await api.post(f"/v1/agents/{agent}/runs", json={})
    assert (first.status_code, second.status_code) == (202, 429)
    assert second.headers["Retry-After"] == "1"
    assert scalar(db_url, "SELECT count(*) FROM executions") == 1  # the refused one queued nothing


async def test_no_rate_is_the_default(api):
    answers = [await api.get("/v1/agents") for _ in range(50)]
    assert {a.status_code for a in answers} == {200}
