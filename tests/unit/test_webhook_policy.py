"""The wire format and retry schedule of webhook deliveries (worker/webhooks/policy.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime, timezone

from tickwork.worker.webhooks.policy import (HORIZON_SECONDS, delivery_body, headers, retry_delay,
                                    signature)


def test_the_first_two_retries_come_within_a_minute_then_the_waits_grow():
    delays = [retry_delay(n) for n in range(1, 14)]
    assert delays[0] + delays[1] <= 60
    assert delays == sorted(delays) and delays[2] > delays[1]


def test_retries_reach_past_a_day_in_a_bounded_number_of_attempts():
    waited, attempts = 0, 1
    while waited < HORIZON_SECONDS:
        waited += retry_delay(attempts)
        attempts += 1
    assert HORIZON_SECONDS == 24 * 3600
    assert attempts <= 20


def test_the_signature_is_the_hmac_of_the_timestamp_dot_body_with_the_secret():
    body = b'{"id":"x"}'
    header = signature("whsec_abc", body, 1700000000)
    expected = hmac.new(b"whsec_abc", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"


def test_the_body_is_the_same_bytes_every_time_and_carries_the_contract_fields():
    created = datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)
    data = {"run_id": "r", "agent_id": "a", "status": "completed"}
    first = delivery_body("d-1", "run.completed", created, data)
    assert first == delivery_body("d-1", "run.completed", created, dict(reversed(data.items())))
    assert json.loads(first) == {"id": "d-1", "type": "run.completed",
                                 "created_at": "2026-12-01T06:00:00Z", "data": data}
    sent = headers("d-1", "s", first, 5)
    assert sent["Tickwork-Delivery"] == "d-1" and sent["Tickwork-Signature"].startswith("t=5,v1=")


def test_only_public_addresses_count_as_public():
    from tickwork.worker.webhooks.address_guard import private_address

    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.5.4", "169.254.169.254",
                    "100.64.0.1", "0.0.0.0", "::1", "fe80::1%eth0", "fd00::1",
                    "::ffff:10.0.0.1", "224.0.0.1"):
        assert private_address(address), address
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"):
        assert not private_address(address), address


def test_up_delivers_to_private_addresses_unless_told_not_to(monkeypatch):
    from tickwork.processes import up_webhook_settings
    from tickwork.worker.webhooks.settings import WebhookSettings

    monkeypatch.delenv("TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", raising=False)
    assert WebhookSettings().webhook_allow_private_addresses is False  # a `tickwork worker`
    assert up_webhook_settings().webhook_allow_private_addresses is True
    monkeypatch.setenv("TICKWORK_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "0")
    assert up_webhook_settings().webhook_allow_private_addresses is False
