"""Checks shared by the API tests: every response well formed, and database fingerprints that
prove a refused request changed nothing."""

from __future__ import annotations

import psycopg
from psycopg import sql


async def fingerprint(db_url: str) -> dict[str, object]:
    """Row count and content hash of every table in the public schema, and the schema itself."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        tables = [row[0] for row in await (await conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1")).fetchall()]
        result = {}
        for table in tables:
            # A token's last-use stamp is bookkeeping of any authenticated request, not a
            # side effect of what the request asked for.
            row = "(to_jsonb(t) - 'last_used_at')::text" if table == "api_tokens" else "t::text"
            query = sql.SQL("SELECT count(*), md5(coalesce(string_agg({row}, '|' ORDER BY "
                            "{row}), '')) FROM {} AS t").format(sql.Identifier(table),
                                                               row=sql.SQL(row))
            count, digest = await (await conn.execute(query)).fetchone()
            result[table] = (count, digest)
        result["__schema__"] = (await (await conn.execute(
            "SELECT md5(string_agg(table_name || '.' || column_name || ':' || data_type, ','"
            " ORDER BY table_name, column_name)) FROM information_schema.columns"
            " WHERE table_schema = 'public'")).fetchone())[0]
        return result


async def fetch(db_url: str, query: str, params: tuple = ()) -> list[tuple]:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        return await (await conn.execute(query, params)).fetchall()


def assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    if code is not None:
        assert body["error"] == code, body
    return body


async def check_response(response) -> None:
    """No 5xx, and every error is JSON with a code and a sentence."""
    await response.aread()
    request = response.request
    assert response.status_code < 500, (
        f"{request.method} {request.url} -> {response.status_code}: {response.text[:500]}")
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/json"), response.text
        body = response.json()
        assert isinstance(body.get("error"), str) and body["error"], body
        message = body.get("message")
        assert isinstance(message, str) and len(message) >= 10 and " " in message, body


def check_every_response(api) -> None:
    api.event_hooks["response"].append(check_response)
