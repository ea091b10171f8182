"""POST /v1/agents/{id}/runs answered by scheduler/api/run_start.py says exactly what the
FastAPI route says: the same status, headers and body bytes, request by request, for what it
serves itself and for everything it hands on. Two apps on one database: the real one, and one
built the same way without the fast route."""

from __future__ import annotations

import json

import httpx
import psycopg
import pytest

from tests.factories import create_agent
from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.api.run_start import RunStartRoute
from tickwork.scheduler.runs import request_hash

UNKNOWN = "0190a000-0000-7000-8000-000000000000"
VOLATILE = ("id", "created_at", "scheduled_for")  # differ between two runs started anew
STARTED: set[str] = set()  # the runs both apps' answers named


def without_fast_route(app):
    app.user_middleware = [m for m in app.user_middleware if m.cls is not RunStartRoute]
    return app


@pytest.fixture
async def clients(pool, settings, tokens):
    """(fast, plain): clients of the app as shipped and of the same app without the route."""
    fast_app, plain_app = create_app(settings, pool=pool), without_fast_route(
        create_app(settings, pool=pool))
    headers = {"Authorization": f"Bearer {tokens['acme']}"}
    async with fast_app.router.lifespan_context(fast_app), \
            plain_app.router.lifespan_context(plain_app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=fast_app),
                              base_url="http://tickwork.test", headers=headers) as fast, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=plain_app),
                              base_url="http://tickwork.test", headers=headers) as plain:
        yield fast, plain


def shown(response: httpx.Response, mask: bool) -> tuple:
    body = response.content
    if mask and response.status_code == 202:
        body = json.dumps({k: (None if k in VOLATILE else v)
                           for k, v in response.json().items()}).encode()
    headers = {k: v for k, v in response.headers.items() if k in ("content-type", "content-length")}
    return response.status_code, headers, body


async def same_answer(clients, path: str, *, mask: bool = False, served: bool,
                      **request) -> httpx.Response:
    """Both apps answer alike; ``served`` says whether the fast route answered it itself."""
    fast, plain = clients
    before = RunStartRoute.served
    ours = await fast.post(path, **request)
    assert RunStartRoute.served - before == (1 if served else 0), (path, request, ours.text)
    theirs = await plain.post(path, **request)
    assert shown(ours, mask) == shown(theirs, mask), (ours.text, theirs.text)
    STARTED.update(r.json()["id"] for r in (ours, theirs) if r.status_code == 202)
    return ours


async def test_a_well_formed_run_start_is_served_by_the_fast_route_as_the_route_would(
        clients, api, db_url):
    agent = await create_agent(api, "fast")
    path = f"/v1/agents/{agent['id']}/runs"
    first = await same_answer(clients, path, json={}, mask=True, served=True)
    assert first.status_code == 202
    bare = await same_answer(clients, path, mask=True, served=True)  # no body at all
    assert bare.status_code == 202 and bare.json()["input"] == {}
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == 4
        assert conn.execute("SELECT count(*) FROM queue_tasks").fetchone()[0] == 4


@pytest.mark.parametrize("run_input", [
    {}, {"script": [{"text": "Done."}], "judge": ["done"]},
    {"ü": "straße ☃ 𝄞", "f": 1.5, "tiny": 1e-300, "huge": 1e300, "int": 12345678901234567890,
     "neg": -0.0, "nested": [1, {"x": None, "y": [True, False]}], "quote": "\"'\\</script>"},
])
async def test_the_same_key_answers_the_same_run_in_the_same_bytes_from_both_routes(
        clients, api, run_input):
    """A key's replay returns the stored run, so both answers can be compared byte for byte."""
    agent = await create_agent(api, "replayed")
    path = f"/v1/agents/{agent['id']}/runs"
    body = {"input": run_input, "timeout_minutes": 7}
    fast, plain = clients
    before = RunStartRoute.served
    created = await fast.post(path, json=body, headers={"Idempotency-Key": "k-1"})
    assert created.status_code == 202, created.text
    replay_fast = await fast.post(path, json=body, headers={"Idempotency-Key": "k-1"})
    replay_plain = await plain.post(path, json=body, headers={"Idempotency-Key": "k-1"})
    assert RunStartRoute.served == before + 2
    assert shown(replay_fast, False) == shown(replay_plain, False)
    assert replay_fast.json()["id"] == created.json()["id"]
    assert replay_fast.json()["input"] == created.json()["input"]  # as jsonb stored it


async def test_refusals_and_malformed_requests_are_answered_alike(clients, api, tokens,
                                                                    db_url):
    STARTED.clear()
    agent = await create_agent(api, "refused")
    paused = await create_agent(api, "asleep", status="paused")
    theirs = await create_agent(api, "theirs", headers={
        "Authorization": f"Bearer {tokens['globex']}"})
    path = f"/v1/agents/{agent['id']}/runs"
    malformed = [  # handed on to the route, which words the refusal
        dict(json={"timeout_minutes": 0}), dict(json={"timeout_minutes": "5"}),
        dict(json={"timeout_minutes": 1.5}), dict(json={"timeout_minutes": None}),
        dict(json={"unknown": 1}), dict(json={"timezone": "Europe/Berlin"}),
        dict(json={"input": []}), dict(json={"input": {"a": "nul\u0000"}}),
        dict(content=b"null", headers={"Content-Type": "application/json"}),
        dict(json=[]), dict(json="text"), dict(json=5),
        dict(content=b'{"input": NaN}', headers={"Content-Type": "application/json"}),
        dict(json={}, headers={"Idempotency-Key": "x" * 201}),
        dict(json={}, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]),
    ]
    guarded = [  # refused by the body guard in front of both
        dict(content=b"{bad json", headers={"Content-Type": "application/json"}),
        dict(content=b"{}", headers={"Content-Type": "text/plain"}),
        dict(content=b'{"a": 1, "a": 2}', headers={"Content-Type": "application/json"}),
    ]
    unauthenticated = [  # answered before the body is read (auth_first.py), in the same words
        dict(json={}, headers={"Authorization": ""}),
        dict(json={}, headers={"Authorization": "Bearer tw_" + "x" * 43}),
        dict(json={}, headers={"Authorization": "Bearer not-a-token"}),
    ]
    refused = [  # well formed: the fast route answers, with the route's error bodies
        dict(json={}, headers={"Authorization": f"Bearer {tokens['operator']}"}),
    ]
    for case in malformed + guarded:
        await same_answer(clients, path, mask=True, served=False, **case)
    before = RunStartRoute.served  # an empty key is the route's to read (it stores it as a key)
    await clients[0].post(path, json={}, headers={"Idempotency-Key": ""})
    assert RunStartRoute.served == before
    for case in unauthenticated:
        assert (await same_answer(clients, path, served=False, **case)).status_code == 401
    for case in refused:
        assert (await same_answer(clients, path, served=True, **case)).status_code == 403
    for agent_id, status in ((UNKNOWN, 404), (UNKNOWN.upper(), 404), (theirs["id"], 404),
                             (paused["id"], 409)):
        response = await same_answer(clients, f"/v1/agents/{agent_id}/runs", json={},
                                     served=True)
        assert response.status_code == status, response.text
    for agent_path in ("not-a-uuid", agent["id"].replace("-", ""), "{" + agent["id"] + "}",
                       agent["id"] + "/"):  # other forms of a UUID are the route's to read
        await same_answer(clients, f"/v1/agents/{agent_path}/runs", mask=True, json={},
                          served=False)
    # A key used for another body is refused alike (the run of its first use stays).
    fast, _ = clients
    once = await fast.post(path, json={}, headers={"Idempotency-Key": "once"})
    assert once.status_code == 202, once.text
    reused = await same_answer(clients, path, json={"timeout_minutes": 9}, served=True,
                               headers={"Idempotency-Key": "once"})
    assert reused.status_code == 422 and reused.json()["error"] == "idempotency_key_reused"
    with psycopg.connect(db_url) as conn:  # and the empty key's run, the first use of "once"
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == len(
            STARTED - {once.json()["id"]}) + 2


async def test_the_failed_login_brake_counts_run_starts_as_on_any_route(pool, settings, tokens,
                                                                        db_url):
    """Five wrong tokens, then 429 for this address; a valid token from it still starts a run
    and another address is still answered 401. The same with and without the fast route."""
    settings.auth_failure_limit = 5
    for app in (create_app(settings, pool=pool),
                without_fast_route(create_app(settings, pool=pool))):
        def client(address: str, token: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=(address, 40000)),
                base_url="http://tickwork.test", headers={"Authorization": f"Bearer {token}"})

        async with app.router.lifespan_context(app), \
                client("198.51.100.6", tokens["acme"]) as owner, \
                client("198.51.100.7", "tw_" + "A" * 43) as guesser, \
                client("198.51.100.8", "tw_" + "B" * 43) as other:
            agent = (await owner.post("/v1/agents", json={
                "name": f"braked-{len(app.user_middleware)}"})).json()
            path = f"/v1/agents/{agent['id']}/runs"
            answers = [(await guesser.post(path, json={})).status_code for _ in range(7)]
            assert answers == [401] * 5 + [429] * 2
            valid = await guesser.post(path, json={},
                                       headers={"Authorization": f"Bearer {tokens['acme']}"})
            assert valid.status_code == 202, valid.text
            assert (await other.post(path, json={})).status_code == 401
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions").fetchone()[0] == 2


async def test_other_methods_and_routes_are_left_to_the_router(clients, api):
    agent = await create_agent(api, "elsewhere")
    fast, plain = clients
    before = RunStartRoute.served
    for method, path in (("GET", f"/v1/agents/{agent['id']}/runs"),
                         ("PUT", f"/v1/agents/{agent['id']}/runs"),
                         ("GET", f"/v1/agents/{agent['id']}"), ("POST", "/v1/agents/runs")):
        ours, theirs = await fast.request(method, path), await plain.request(method, path)
        assert shown(ours, False) == shown(theirs, False), (method, path, ours.text)
    assert RunStartRoute.served == before


async def test_a_body_hash_is_stored_only_with_a_key_and_is_that_bodys(api, db_url):
    """The hash is computed only when a key comes with the request: it is what refuses the
    key's reuse for another body, and a run without a key never needs it."""
    agent = await create_agent(api, "hashed")
    path = f"/v1/agents/{agent['id']}/runs"
    body = {"input": {"n": 1}, "timeout_minutes": 4}
    plain = await api.post(path, json=body)
    keyed = await api.post(path, json=body, headers={"Idempotency-Key": "h-1"})
    empty = await api.post(path, json=body, headers={"Idempotency-Key": ""})
    assert [r.status_code for r in (plain, keyed, empty)] == [202, 202, 202]
    with psycopg.connect(db_url) as conn:
        stored = dict(conn.execute("SELECT id::text, request_hash FROM executions").fetchall())
    assert stored[plain.json()["id"]] is None
    assert stored[keyed.json()["id"]] == request_hash(f"agents/{agent['id']}/runs", body)
    assert stored[empty.json()["id"]] is None  # an empty key keeps no hash, as before
