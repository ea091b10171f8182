"""The per-tenant request rate's bucket (scheduler/api/tenant_rate.py), on an injected clock."""

from __future__ import annotations

from uuid import uuid4

import pytest

from tickwork.scheduler.api.tenant_rate import TenantRateLimit, TenantRateLimited
from tickwork.worker.walls import Meter, WallSettings, hard_stop_message, turns_stop_message


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate_and_each_tenant_has_its_own_bucket():
    clock, acme, globex = Clock(), uuid4(), uuid4()
    limit = TenantRateLimit(rate=2, burst=3, clock=clock)
    for _ in range(3):
        limit.charge(acme)
    with pytest.raises(TenantRateLimited) as refused:
        limit.charge(acme)
    assert refused.value.fields["retry_after"] == 1
    limit.charge(globex)  # another tenant is not slowed
    clock.now += 0.5  # one request's worth at 2 a second
    limit.charge(acme)
    with pytest.raises(TenantRateLimited):
        limit.charge(acme)


def test_a_rate_of_zero_never_refuses():
    limit, tenant = TenantRateLimit(rate=0, burst=1, clock=Clock()), uuid4()
    for _ in range(1000):
        limit.charge(tenant)


def test_each_stop_names_the_setting_that_set_its_limit():
    meter = Meter(external_attempts=7)
    own = WallSettings(hard_cap=7, hard_cap_setting="the agent's max_tool_calls")
    assert "raise the agent's max_tool_calls" in hard_stop_message(meter, own, "")
    assert "TICKWORK_HARD_CAP" in hard_stop_message(meter, WallSettings(), "")
    assert "TICKWORK_MAX_MODEL_TURNS" in turns_stop_message(500, "two records read")
