"""/v1/webhooks through the real app and Postgres: the secret shown once, input refused with a
sentence and nothing written, tenants kept apart, and the grants around the secret."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import make_webhook
from tests.integration.api_checks import assert_error, fingerprint
from tests.integration.test_roles import granted  # noqa: F401  (fixture)
from tests.integration.workers import scalar

HOOK = {"url": "https://example.com/hooks/tickwork", "events": ["approval.required", "run.failed"]}


async def add(api, body=HOOK, token=None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    response = await api.post("/v1/webhooks", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_webhook_is_created_with_a_secret_shown_once(api, db_url):
    created = await add(api)

    assert set(created) == {"id", "url", "events", "secret", "created_at"}
    assert created["url"] == HOOK["url"] and created["events"] == HOOK["events"]
    assert created["secret"].startswith("whsec_") and len(created["secret"]) > 40
    listed = (await api.get("/v1/webhooks")).json()
    assert listed == {"items": [{k: v for k, v in created.items() if k != "secret"}],
                      "next_cursor": None}
    assert created["secret"] not in (await api.get(f"/v1/webhooks/{created['id']}/deliveries")).text
    # Stored as it is: the deliverer signs with it.
    assert scalar(db_url, "SELECT secret FROM webhooks") == created["secret"]


async def test_each_webhook_gets_its_own_secret_and_the_list_pages(api):
    made = [await add(api, {**HOOK, "url": f"https://example.com/{i}"}) for i in range(3)]
    assert len({m["secret"] for m in made}) == 3
    first = (await api.get("/v1/webhooks", params={"limit": 2})).json()
    second = (await api.get("/v1/webhooks", params={"limit": 2,
                                                    "cursor": first["next_cursor"]})).json()
    assert [h["id"] for h in first["items"] + second["items"]] == [m["id"] for m in made]
    assert second["next_cursor"] is None


async def test_repeated_events_are_kept_once(api):
    created = await add(api, {"url": "http://hooks.internal:8080/x",
                              "events": ["run.failed", "run.failed", "run.completed"]})
    assert created["events"] == ["run.failed", "run.completed"]


HTTP_ONLY = "must be an http:// or https://"


@pytest.mark.parametrize("body, field, sentence", [
    ({"url": "ftp://example.com/x", "events": ["run.failed"]}, "url", HTTP_ONLY),
    ({"url": "example.com/hook", "events": ["run.failed"]}, "url", HTTP_ONLY),
    ({"url": "http://", "events": ["run.failed"]}, "url", "with a host"),
    ({"url": "http://example.com:99999/", "events": ["run.failed"]}, "url", "with a host"),
    ({"url": "https://user:pw@example.com/", "events": ["run.failed"]}, "url", "user name"),
    ({"url": "https://example.com/a b", "events": ["run.failed"]}, "url", "spaces"),
    ({"url": "https://example.com/" + "a" * 2000, "events": ["run.failed"]}, "url", "at most 2000"),
    ({"url": "https://example.com/", "events": []}, "events", "at least one of"),
    ({"url": "https://example.com/", "events": ["run.started"]}, "events",
     "unknown event 'run.started'"),
    ({"url": "https://example.com/"}, "events", "events is required"),
    ({"events": ["run.failed"]}, "url", "url is required"),
    ({**HOOK, "secret": "mine"}, "secret", "unknown field 'secret'"),
])
async def test_bad_input_is_a_422_sentence_and_writes_nothing(api, db_url, body, field, sentence):
    before = await fingerprint(db_url)
    response = await api.post("/v1/webhooks", json=body)

    error = assert_error(response, 422)
    assert sentence in error["message"] and error["field"] == field, error
    assert await fingerprint(db_url) == before


async def test_another_tenants_webhook_is_not_found(api):
    created = await add(api)
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}

    assert (await api.get("/v1/webhooks", headers=globex)).json()["items"] == []
    for response in (await api.delete(f"/v1/webhooks/{created['id']}", headers=globex),
                     await api.get(f"/v1/webhooks/{created['id']}/deliveries", headers=globex)):
        assert "does not exist" in assert_error(response, 404, "not_found")["message"]
    assert len((await api.get("/v1/webhooks")).json()["items"]) == 1


async def test_a_removed_webhook_is_gone_with_its_deliveries(api, db_url):
    created = await add(api)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, type, data) VALUES"
                     " (gen_random_uuid(), %s, 'run.failed', '{}')", (created["id"],))

    assert (await api.delete(f"/v1/webhooks/{created['id']}")).status_code == 204
    assert_error(await api.delete(f"/v1/webhooks/{created['id']}"), 404)
    assert scalar(db_url, "SELECT count(*) FROM webhook_deliveries") == 0


async def test_an_operator_token_is_refused_and_a_tenant_is_capped(api):
    operator = {"Authorization": f"Bearer {api.tokens['operator']}"}
    assert_error(await api.post("/v1/webhooks", json=HOOK, headers=operator), 403)
    for i in range(20):
        await add(api, {**HOOK, "url": f"https://example.com/{i}"})
    refused = assert_error(await api.post("/v1/webhooks", json=HOOK), 409, "too_many_webhooks")
    assert "remove one first" in refused["message"]


def test_only_the_deliverer_reads_secrets_and_nobody_else_queues_deliveries(granted, db_url):
    with psycopg.connect(db_url, autocommit=True) as owner:
        tenant = owner.execute("INSERT INTO tenants (id, name) VALUES (gen_random_uuid(), 'a')"
                               " RETURNING id").fetchone()[0]
        make_webhook(owner, tenant, ["run.failed"], url="https://x.test/", secret="whsec_s")
    with psycopg.connect(granted["tickwork_worker"], autocommit=True) as worker:
        assert worker.execute("SELECT secret FROM webhooks").fetchone() == ("whsec_s",)
    for role in ("tickwork_api", "tickwork_scheduler"):
        with psycopg.connect(granted[role], autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT secret FROM webhooks")
    for role in ("tickwork_api", "tickwork_scheduler", "tickwork_worker"):
        with psycopg.connect(granted[role], autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, type, data)"
                             " SELECT gen_random_uuid(), id, 'run.failed', '{}' FROM webhooks")
