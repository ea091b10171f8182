"""Authentication (S1) and tenant isolation (S2).

The routes under test are read from the application's own router and OpenAPI description, so a
route added later is covered without touching this file. Path ids are filled with real ids of
tenant acme's rows, so a route that forgot its auth check would act on real data and the
database fingerprint would show it.
"""

from __future__ import annotations

import base64
import re
import secrets

import pytest

from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.settings import SchedulerSettings

from tests.integration.api_checks import fingerprint, check_every_response


MISSING = "0190a000-0000-7000-8000-000000000000"
# Routes that answer without a token: health, and what FastAPI adds for its own docs.
PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
# Routes that span every tenant: the cluster operator's token only.
OPERATOR_ROUTES = {("GET", "/metrics"), ("POST", "/v1/tick")}


@pytest.fixture(autouse=True)
def every_response_is_well_formed(api):
    check_every_response(api)


def application_routes() -> list[tuple[str, str]]:
    """Every (method, path) the app serves, from its router and its OpenAPI description."""
    app = create_app(SchedulerSettings(test_mode=True))
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        for method in getattr(route, "methods", None) or ():
            if method not in ("HEAD", "OPTIONS"):
                found.add((method, route.path))
    for path, operations in app.openapi()["paths"].items():
        for method in operations:
            found.add((method.upper(), path))
    return sorted(found)


PROTECTED_ROUTES = [(method, path) for method, path in application_routes() if path not in PUBLIC]


def test_the_route_enumeration_sees_the_contract_routes():
    for expected in [("POST", "/v1/agents"), ("GET", "/v1/agents"), ("PUT", "/v1/agents/{agent_id}"),
                     ("DELETE", "/v1/agents/{agent_id}"), ("POST", "/v1/agents/{agent_id}/runs"),
                     ("PATCH", "/v1/schedules/{schedule_id}"),
                     ("POST", "/v1/schedules/{schedule_id}/run-now"), ("GET", "/v1/runs"),
                     ("GET", "/v1/runs/{run_id}"), ("POST", "/v1/tick"), ("GET", "/metrics")]:
        assert expected in PROTECTED_ROUTES, expected
    assert not any(path in PUBLIC for _, path in PROTECTED_ROUTES)


async def seed_acme(api) -> dict[str, dict]:
    agent = (await api.post("/v1/agents", json={"name": "reporter",
                                                "tools": ["demo.get_record"]})).json()
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"],
                                                      "cron": "0 9 * * *"})).json()
    run = (await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}},
                          headers={"Idempotency-Key": "acme-key"})).json()
    manual = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()
    webhook = (await api.post("/v1/webhooks", json={"url": "https://hooks.example.com/tickwork",
                                                    "events": ["run.failed"]})).json()
    chat = (await api.post(f"/v1/agents/{agent['id']}/chats", json={})).json()
    return {"agent": agent, "schedule": schedule, "run": run, "manual": manual,
            "webhook": webhook, "chat": chat}


def fill_path(path: str, rows: dict[str, dict]) -> str:
    ids = {"agent_id": rows["agent"]["id"], "schedule_id": rows["schedule"]["id"],
           "run_id": rows["run"]["id"], "webhook_id": rows["webhook"]["id"],
           "chat_id": rows["chat"]["id"]}
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}", lambda m: ids.get(m.group(1), MISSING), path)


def valid_body(method: str, path: str, rows: dict[str, dict]) -> dict | None:
    """A body the route would accept from an authorised caller: auth must be the only fault."""
    if method not in ("POST", "PUT", "PATCH"):
        return None
    return {
        ("POST", "/v1/agents"): {"name": "intruder"},
        ("PUT", "/v1/agents/{agent_id}"): {"name": "intruder"},
        ("POST", "/v1/agents/{agent_id}/runs"): {"input": {}},
        ("POST", "/v1/schedules"): {"agent_id": rows["agent"]["id"], "cron": "0 1 * * *"},
        ("PATCH", "/v1/schedules/{schedule_id}"): {"status": "paused"},
        ("POST", "/v1/tick"): {},
    }.get((method, path), {})


def wrong_but_well_formed_token() -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    return "tw_" + "".join(secrets.choice(alphabet) for _ in range(43))


async def revoked_token(pool) -> str:
    from tickwork.scheduler.tokens import create_token

    async with pool.connection() as conn:
        token = await create_token(conn, tenant="acme", admin=True)
        await conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE token_hash ="
                           " sha256(convert_to(%s, 'UTF8'))", (token,))
    return token


async def expired_token(pool) -> str:
    from tickwork.scheduler.tokens import create_token

    async with pool.connection() as conn:
        token = await create_token(conn, tenant="acme", admin=True, expires_seconds=3600)
        await conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second'"
                           " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))", (token,))
    return token


# Each credential variant: (Authorization header or None, extra headers, query params).
def credential_variants(valid: str, revoked: str, expired: str) -> dict[str, tuple]:
    return {
        "no_header": (None, {}, {}),
        "bearer_with_empty_token": ("Bearer ", {}, {}),
        "bearer_alone": ("Bearer", {}, {}),
        "empty_header": ("", {}, {}),
        "wrong_token": (f"Bearer {wrong_but_well_formed_token()}", {}, {}),
        "malformed_token": ("Bearer not-a-token", {}, {}),
        "truncated_token": (f"Bearer {valid[:-1]}", {}, {}),
        "token_with_trailing_space": (f"Bearer {valid} ", {}, {}),
        "token_without_scheme": (valid, {}, {}),
        "basic_scheme": (f"Basic {base64.b64encode(valid.encode()).decode()}", {}, {}),
        "revoked_token": (f"Bearer {revoked}", {}, {}),
        "expired_token": (f"Bearer {expired}", {}, {}),
        "token_in_query_string": (None, {}, {"token": valid, "access_token": valid,
                                             "api_key": valid}),
        "token_in_cookie": (None, {"Cookie": f"token={valid}; access_token={valid}"}, {}),
    }


VARIANT_NAMES = list(credential_variants("tw_x", "tw_y", "tw_z"))


@pytest.mark.parametrize("variant", VARIANT_NAMES)
async def test_every_protected_route_answers_401_json_without_a_valid_token(api, pool, db_url,
                                                                            variant):
    rows = await seed_acme(api)
    authorization, extra_headers, params = credential_variants(
        api.tokens["acme"], await revoked_token(pool), await expired_token(pool))[variant]
    before = await fingerprint(db_url)

    wrong = []
    for method, path in PROTECTED_ROUTES:
        body = valid_body(method, path, rows)
        request = api.build_request(method, fill_path(path, rows), params=params,
                                    headers=extra_headers,
                                    **({"json": body} if body is not None else {}))
        request.headers.pop("Authorization", None)
        if authorization is not None:
            request.headers["Authorization"] = authorization
        response = await api.send(request)
        body = response.json() if response.headers.get("content-type", "").startswith(
            "application/json") else response.text
        if response.status_code != 401 or not isinstance(body, dict) \
                or body.get("error") != "unauthorized":
            wrong.append((method, path, response.status_code, body))

    assert wrong == []
    assert await fingerprint(db_url) == before


async def test_the_same_routes_work_with_the_valid_token(api):
    rows = await seed_acme(api)
    # Read-only routes only: proves the sweep above is refused for auth, not for its inputs.
    # Accept: application/json keeps a streaming route (run events) from following live.
    operator = {"Authorization": f"Bearer {api.tokens['operator']}"}
    for method, path in PROTECTED_ROUTES:
        if method == "GET":
            response = await api.get(fill_path(path, rows), headers={
                "Accept": "application/json",
                **(operator if (method, path) in OPERATOR_ROUTES else {})})
            assert response.status_code not in (401, 403), (path, response.text)
            assert response.status_code < 400, (path, response.text)


async def test_health_answers_without_a_token(api):
    request = api.build_request("GET", "/healthz")
    request.headers.pop("Authorization")

    response = await api.send(request)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_health_ignores_a_bad_token(api):
    response = await api.get("/healthz", headers={"Authorization": "Bearer nonsense"})

    assert response.status_code == 200


@pytest.mark.parametrize("tenant", ["acme", "globex"])  # acme's token is its tenant's admin
async def test_a_tenant_token_even_an_admin_may_not_use_the_cluster_routes(api, db_url, tenant):
    before = await fingerprint(db_url)

    for method, path in sorted(OPERATOR_ROUTES):
        response = await api.request(method, path, headers={
            "Authorization": f"Bearer {api.tokens[tenant]}"},
            **({"json": {}} if method == "POST" else {}))

        assert response.status_code == 403, (path, response.text)
        assert response.json()["error"] == "forbidden"
        assert "needs an operator token" in response.json()["message"]
    assert await fingerprint(db_url) == before


async def test_the_operator_token_may_tick_and_scrape(api):
    operator = {"Authorization": f"Bearer {api.tokens['operator']}"}

    response = await api.post("/v1/tick", json={}, headers=operator)

    assert response.status_code == 200, response.text
    assert response.json()["ok"] is True
    assert (await api.get("/metrics", headers=operator)).status_code == 200


async def test_the_operator_token_is_refused_on_a_tenants_routes(api, db_url):
    rows = await seed_acme(api)
    operator = {"Authorization": f"Bearer {api.tokens['operator']}"}
    before = await fingerprint(db_url)

    for method, path in PROTECTED_ROUTES:
        if (method, path) in OPERATOR_ROUTES or path.startswith("/v1/tokens"):
            continue
        body = valid_body(method, path, rows)
        response = await api.request(method, fill_path(path, rows), headers=operator,
                                     **({"json": body} if body is not None else {}))
        assert response.status_code == 403, (method, path, response.text)
        assert "use a tenant token" in response.json()["message"]
    assert await fingerprint(db_url) == before


async def test_a_non_admin_token_works_on_its_own_tenants_routes(api):
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}

    created = await api.post("/v1/agents", json={"name": "mine"}, headers=globex)

    assert created.status_code == 201, created.text
    assert (await api.get(f"/v1/agents/{created.json()['id']}", headers=globex)).status_code == 200


# --- S2: tenant isolation ----------------------------------------------------------------------

def cross_tenant_requests(rows: dict[str, dict]) -> dict[str, tuple[str, str, dict | None, dict]]:
    """name -> (method, url template with {id}, body, the acme id that goes into {id})."""
    agent, schedule, run = rows["agent"]["id"], rows["schedule"]["id"], rows["run"]["id"]
    return {
        "get_agent": ("GET", "/v1/agents/{id}", None, agent),
        "put_agent": ("PUT", "/v1/agents/{id}", {"name": "stolen"}, agent),
        "delete_agent": ("DELETE", "/v1/agents/{id}", None, agent),
        "run_agent": ("POST", "/v1/agents/{id}/runs", {"input": {}}, agent),
        "get_schedule": ("GET", "/v1/schedules/{id}", None, schedule),
        "pause_schedule": ("PATCH", "/v1/schedules/{id}", {"status": "paused"}, schedule),
        "delete_schedule": ("DELETE", "/v1/schedules/{id}", None, schedule),
        "run_now": ("POST", "/v1/schedules/{id}/run-now", None, schedule),
        "history": ("GET", "/v1/schedules/{id}/history", None, schedule),
        "get_run": ("GET", "/v1/runs/{id}", None, run),
        "get_manual_run": ("GET", "/v1/runs/{id}", None, rows["manual"]["id"]),
    }


async def test_another_tenants_ids_are_404_exactly_like_ids_that_do_not_exist(api, db_url):
    rows = await seed_acme(api)
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    before = await fingerprint(db_url)

    for name, (method, template, body, acme_id) in cross_tenant_requests(rows).items():
        extra = {"json": body} if body is not None else {}
        theirs = await api.request(method, template.format(id=acme_id), headers=globex, **extra)
        missing = await api.request(method, template.format(id=MISSING), headers=globex, **extra)

        assert (theirs.status_code, missing.status_code) == (404, 404), (name, theirs.text)
        theirs_body, missing_body = theirs.json(), missing.json()
        assert theirs_body["error"] == missing_body["error"] == "not_found", name
        assert set(theirs_body) == set(missing_body), name
        assert theirs_body["message"].replace(acme_id, "<id>") == \
            missing_body["message"].replace(MISSING, "<id>"), name

    assert await fingerprint(db_url) == before
    assert (await api.get(f"/v1/agents/{rows['agent']['id']}")).json() == rows["agent"]
    assert (await api.get(f"/v1/schedules/{rows['schedule']['id']}")).json() == rows["schedule"]
    assert (await api.get(f"/v1/runs/{rows['run']['id']}")).json() == rows["run"]


async def test_a_schedule_cannot_point_at_another_tenants_agent(api, db_url):
    rows = await seed_acme(api)
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}
    before = await fingerprint(db_url)

    theirs = await api.post("/v1/schedules", headers=globex,
                            json={"agent_id": rows["agent"]["id"], "cron": "0 1 * * *"})
    missing = await api.post("/v1/schedules", headers=globex,
                             json={"agent_id": MISSING, "cron": "0 1 * * *"})

    assert (theirs.status_code, missing.status_code) == (404, 404), theirs.text
    assert theirs.json()["message"].replace(rows["agent"]["id"], "<id>") == \
        missing.json()["message"].replace(MISSING, "<id>")
    assert await fingerprint(db_url) == before


async def test_another_tenants_idempotency_key_replays_nothing_across_tenants(api, db_url):
    rows = await seed_acme(api)
    globex = {"Authorization": f"Bearer {api.tokens['globex']}", "Idempotency-Key": "acme-key"}
    before = await fingerprint(db_url)

    on_agent = await api.post(f"/v1/agents/{rows['agent']['id']}/runs", json={"input": {}},
                              headers=globex)
    on_schedule = await api.post(f"/v1/schedules/{rows['schedule']['id']}/run-now",
                                 headers=globex)

    assert (on_agent.status_code, on_schedule.status_code) == (404, 404)
    assert rows["run"]["id"] not in on_agent.text + on_schedule.text
    assert await fingerprint(db_url) == before


async def test_lists_return_only_the_callers_rows(api):
    acme = await seed_acme(api)
    globex = {"Authorization": f"Bearer {api.tokens['globex']}"}

    for url, params in [("/v1/agents", {}), ("/v1/schedules", {}), ("/v1/runs", {}),
                        ("/v1/agents", {"name": "reporter"}),
                        ("/v1/schedules", {"agent_id": acme["agent"]["id"]}),
                        ("/v1/runs", {"agent_id": acme["agent"]["id"]}),
                        ("/v1/runs", {"schedule_id": acme["schedule"]["id"]}),
                        ("/v1/runs", {"status": "queued"})]:
        response = await api.get(url, params=params, headers=globex)
        assert response.json() == {"items": [], "next_cursor": None}, (url, params)

    agent = (await api.post("/v1/agents", json={"name": "reporter"}, headers=globex)).json()
    schedule = (await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": "0 9 * * *"},
                               headers=globex)).json()
    run = (await api.post(f"/v1/agents/{agent['id']}/runs", json={"input": {}},
                          headers=globex)).json()

    async def listed(url: str, headers: dict | None = None) -> set[str]:
        response = await api.get(url, headers=headers or {})
        return {item["id"] for item in response.json()["items"]}

    assert await listed("/v1/agents", globex) == {agent["id"]}
    assert await listed("/v1/schedules", globex) == {schedule["id"]}
    assert await listed("/v1/runs", globex) == {run["id"]}
    assert await listed("/v1/agents") == {acme["agent"]["id"]}
    assert await listed("/v1/schedules") == {acme["schedule"]["id"]}
    assert await listed("/v1/runs") == {acme["run"]["id"], acme["manual"]["id"]}
