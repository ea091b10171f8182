"""Token lifecycle through the API: list, revoke, expiry, last use, and single-use stream
tickets that die with their token. The API caches a token for at most a second: a revocation
through the same process is refused at once, one made in the database within that second
(the cache's clock is injected here)."""

from __future__ import annotations

import psycopg
import pytest

from tickwork.scheduler.tokens import TOKEN_CACHE, create_token
from tests.factories import create_agent, queue_run
from tests.integration.api_checks import fingerprint


@pytest.fixture
def a_second_passes(monkeypatch):
    """Call it to move the API's token cache clock past the cache's time to live."""
    real_clock, moved = TOKEN_CACHE.clock, [0.0]
    monkeypatch.setattr(TOKEN_CACHE, "clock", lambda: real_clock() + moved[0])

    def advance() -> None:
        moved[0] += TOKEN_CACHE.ttl_seconds

    return advance


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def new_token(pool, **kwargs) -> str:
    async with pool.connection() as conn:
        return await create_token(conn, **kwargs)


def token_row(db_url: str, token: str, columns: str = "*") -> dict:
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(f"SELECT {columns} FROM api_tokens"
                            " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))",
                            (token,)).fetchone()


async def with_ticket_only(api, run_id: str, ticket: str):
    """GET the run's stored journal the way a browser's EventSource does: no Authorization."""
    request = api.build_request("GET", f"/v1/runs/{run_id}/events", params={"ticket": ticket},
                                headers={"Accept": "application/json"})
    request.headers.pop("Authorization")
    return await api.send(request)


async def queued_run(api) -> str:
    return await queue_run(api, (await create_agent(api, "tailed"))["id"])


async def test_an_admin_lists_its_tenants_tokens_and_the_operator_lists_all(api, tokens):
    mine = await api.get("/v1/tokens")
    everyone = await api.get("/v1/tokens", headers=bearer(tokens["operator"]))

    assert mine.status_code == everyone.status_code == 200
    assert {t["tenant"] for t in mine.json()["items"]} == {"acme"}
    assert [(t["tenant"], t["admin"], t["operator"]) for t in everyone.json()["items"]] == [
        ("acme", True, False), ("globex", False, False), (None, False, True)]
    item = mine.json()["items"][0]
    assert set(item) == {"id", "tenant", "admin", "operator", "created_at", "expires_at",
                         "last_used_at", "revoked_at"}
    assert item["created_at"].endswith("Z") and item["expires_at"] is None
    for token in tokens.values():  # the secret is never shown
        assert token not in mine.text + everyone.text


async def test_a_non_admin_token_may_not_list_or_revoke_tokens(api, tokens, db_url):
    globex = bearer(tokens["globex"])
    listed = (await api.get("/v1/tokens")).json()["items"]
    before = await fingerprint(db_url)

    assert (await api.get("/v1/tokens", headers=globex)).status_code == 403
    refused = await api.delete(f"/v1/tokens/{listed[0]['id']}", headers=globex)

    assert refused.status_code == 403 and "admin token" in refused.json()["message"]
    assert await fingerprint(db_url) == before


async def test_a_revoked_token_is_refused_from_its_next_request_on(api, pool, db_url):
    doomed = await new_token(pool, tenant="acme")
    assert (await api.get("/v1/agents", headers=bearer(doomed))).status_code == 200
    doomed_id = str(token_row(db_url, doomed, "id")["id"])

    revoked = await api.delete(f"/v1/tokens/{doomed_id}")
    refused = await api.get("/v1/agents", headers=bearer(doomed))

    assert revoked.status_code == 204
    assert refused.status_code == 401 and "revoked" in refused.json()["message"]
    listed = {t["id"]: t for t in (await api.get("/v1/tokens")).json()["items"]}
    assert listed[doomed_id]["revoked_at"] is not None
    assert (await api.delete(f"/v1/tokens/{doomed_id}")).status_code == 204  # idempotent
    assert (await api.get("/v1/agents")).status_code == 200  # the caller's own token is fine


async def test_a_tenant_admin_cannot_revoke_another_tenants_or_the_operators_token(api, tokens, db_url):
    before = await fingerprint(db_url)
    for other in ("globex", "operator"):
        other_id = str(token_row(db_url, tokens[other], "id")["id"])
        response = await api.delete(f"/v1/tokens/{other_id}")
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"
    assert await fingerprint(db_url) == before
    assert (await api.get("/v1/agents", headers=bearer(tokens["globex"]))).status_code == 200


async def test_the_operator_revokes_any_tenants_token(api, tokens, db_url):
    globex_id = str(token_row(db_url, tokens["globex"], "id")["id"])

    response = await api.delete(f"/v1/tokens/{globex_id}", headers=bearer(tokens["operator"]))

    assert response.status_code == 204
    assert (await api.get("/v1/agents", headers=bearer(tokens["globex"]))).status_code == 401


async def test_an_expired_token_is_refused_and_says_so(api, pool, db_url, a_second_passes):
    token = await new_token(pool, tenant="acme", expires_seconds=3600)
    assert (await api.get("/v1/agents", headers=bearer(token))).status_code == 200
    expires_at = token_row(db_url, token, "expires_at")["expires_at"]
    assert expires_at is not None
    with psycopg.connect(db_url) as conn:  # its hour has passed
        conn.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second'"
                     " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))", (token,))
    a_second_passes()

    refused = await api.get("/v1/agents", headers=bearer(token))

    assert refused.status_code == 401 and "expired" in refused.json()["message"]


async def test_last_use_is_written_at_most_about_once_a_minute(api, pool, db_url,
                                                              a_second_passes):
    token = await new_token(pool, tenant="acme")
    assert token_row(db_url, token)["last_used_at"] is None

    assert (await api.get("/v1/agents", headers=bearer(token))).status_code == 200
    first = token_row(db_url, token, "last_used_at, xmin::text AS version")
    for _ in range(5):
        assert (await api.get("/v1/agents", headers=bearer(token))).status_code == 200
    unchanged = token_row(db_url, token, "last_used_at, xmin::text AS version")
    with psycopg.connect(db_url) as conn:  # the stamp is now two minutes old
        conn.execute("UPDATE api_tokens SET last_used_at = last_used_at - interval '2 minutes'"
                     " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))", (token,))
    a_second_passes()  # the cache's second is over: the next request looks the token up
    assert (await api.get("/v1/agents", headers=bearer(token))).status_code == 200
    refreshed = token_row(db_url, token, "last_used_at")

    assert first["last_used_at"] is not None
    assert unchanged == first  # five more requests, no write
    assert refreshed["last_used_at"] > first["last_used_at"]  # stale, so written again


async def test_a_token_revoked_in_the_database_is_refused_once_the_cache_second_is_over(
        api, pool, db_url, a_second_passes):
    token = await new_token(pool, tenant="acme")
    assert (await api.get("/v1/agents", headers=bearer(token))).status_code == 200
    with psycopg.connect(db_url) as conn:  # revoked by another process (the CLI, another API)
        conn.execute("UPDATE api_tokens SET revoked_at = now()"
                     " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))", (token,))

    within_the_second = await api.get("/v1/agents", headers=bearer(token))
    a_second_passes()
    after_it = await api.get("/v1/agents", headers=bearer(token))

    assert within_the_second.status_code == 200  # served from the cache, no lookup
    assert after_it.status_code == 401 and "revoked" in after_it.json()["message"]


async def test_a_stream_ticket_is_good_for_one_request_only(api):
    run_id = await queued_run(api)
    ticket = (await api.post(f"/v1/runs/{run_id}/stream-ticket")).json()["ticket"]

    first = await with_ticket_only(api, run_id, ticket)
    second = await with_ticket_only(api, run_id, ticket)

    assert first.status_code == 200, first.text
    assert second.status_code == 401 and "used" in second.json()["message"]


@pytest.mark.parametrize("ending", ["revoked", "expired"])
async def test_a_stream_ticket_dies_with_the_token_that_minted_it(api, pool, db_url, ending):
    token = await new_token(pool, tenant="acme", expires_seconds=3600)
    run_id = await queued_run(api)
    minted = await api.post(f"/v1/runs/{run_id}/stream-ticket", headers=bearer(token))
    assert minted.status_code == 201
    change = {"revoked": "revoked_at = now()",
              "expired": "expires_at = now() - interval '1 second'"}[ending]
    with psycopg.connect(db_url) as conn:
        conn.execute(f"UPDATE api_tokens SET {change}"
                     " WHERE token_hash = sha256(convert_to(%s, 'UTF8'))", (token,))

    response = await with_ticket_only(api, run_id, minted.json()["ticket"])

    assert response.status_code == 401, response.text
    assert "revoked with its token" in response.json()["message"]


async def test_the_stored_digest_is_compared_in_constant_time(api, pool, monkeypatch):
    import hmac

    from tickwork.scheduler import tokens

    seen, real = [], hmac.compare_digest

    def spy(a, b):
        seen.append((bytes(a), bytes(b)))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    token = await new_token(pool, tenant="acme")

    assert (await api.get("/v1/agents", headers=bearer(token))).status_code == 200
    assert seen == [(tokens.hash_token(token), tokens.hash_token(token))]


@pytest.mark.parametrize("opened_with", ["token", "ticket"])
async def test_an_open_tail_ends_when_its_token_is_revoked(api, pool, db_url, live_api, opened_with):
    import asyncio

    import httpx

    token = await new_token(pool, tenant="acme")
    token_id = str(token_row(db_url, token, "id")["id"])
    run_id = await queued_run(api)  # no worker runs it: a tail would follow it indefinitely
    async with httpx.AsyncClient(base_url=live_api["url"], timeout=30) as http:
        if opened_with == "token":
            request = {"headers": bearer(token)}
        else:
            minted = await http.post(f"/v1/runs/{run_id}/stream-ticket", headers=bearer(token))
            request = {"params": {"ticket": minted.json()["ticket"]}}
        async with http.stream("GET", f"/v1/runs/{run_id}/events", **request) as tail:
            assert tail.status_code == 200
            assert (await api.delete(f"/v1/tokens/{token_id}")).status_code == 204
            # The server ends the stream (the bound only keeps a broken build from hanging).
            await asyncio.wait_for(tail.aread(), 20)
        refused = await http.get(f"/v1/runs/{run_id}/events", headers=bearer(token))
    assert refused.status_code == 401


async def test_the_watch_ends_only_the_tails_of_the_token_that_ended(pool, db_url):
    """The control for the test above: one poll sees both tokens and ends only the revoked
    one's tails."""
    import asyncio

    from tickwork.scheduler.api.revocation import RevocationWatch

    kept, revoked = await new_token(pool, tenant="acme"), await new_token(pool, tenant="acme")
    kept_id, revoked_id = (token_row(db_url, t, "id")["id"] for t in (kept, revoked))
    watch = RevocationWatch(pool, interval_seconds=0.05)
    async with watch.watch(kept_id) as kept_ended, watch.watch(revoked_id) as revoked_ended:
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE id = %s", (revoked_id,))
        await asyncio.wait_for(revoked_ended.wait(), 20)
        assert not kept_ended.is_set()
