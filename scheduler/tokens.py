"""Operator tokens: 256-bit random secrets, stored only as SHA-256 digests, scoped to a tenant."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from uuid import UUID

from psycopg import AsyncConnection

from sql import QUERIES
from sql.errors import InvalidInput, Unauthorized
from sql.ids import new_id

_TOKEN_FORMAT = re.compile(r"^tw_[A-Za-z0-9_-]{43}$")
_TENANT_FORMAT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class Principal:
    tenant_id: UUID
    is_admin: bool


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def create_token(conn: AsyncConnection, *, tenant: str, admin: bool) -> str:
    """Create the tenant if needed and a new token for it; the token is returned once, never stored."""
    if not _TENANT_FORMAT.match(tenant):
        raise InvalidInput(f"tenant name {tenant[:70]!r} must be 1-63 letters, digits, '.', '_' "
                           "or '-', starting with a letter or digit", code="invalid_tenant")
    token = "tw_" + secrets.token_urlsafe(32)
    async with conn.transaction():
        cursor = await conn.execute(QUERIES["upsert_tenant"], {"id": new_id(), "name": tenant})
        tenant_row = await cursor.fetchone()
        await conn.execute(QUERIES["insert_api_token"], {
            "id": new_id(), "tenant_id": tenant_row["id"], "token_hash": hash_token(token),
            "is_admin": admin})
    return token


async def authenticate(conn: AsyncConnection, token: str) -> Principal:
    """Resolve a bearer token to its tenant, or raise Unauthorized with a reason."""
    if not _TOKEN_FORMAT.match(token):
        raise Unauthorized("the bearer token is malformed; tokens look like tw_ followed by 43 "
                           "characters (create one with `tickwork token create --tenant NAME`)")
    digest = hash_token(token)
    cursor = await conn.execute(QUERIES["find_api_token"], {"token_hash": digest})
    row = await cursor.fetchone()
    # compare_digest keeps the final comparison constant-time even though the lookup is by hash.
    if row is None or not hmac.compare_digest(bytes(row["token_hash"]), digest):
        raise Unauthorized("the bearer token is not valid (unknown or revoked)")
    return Principal(tenant_id=row["tenant_id"], is_admin=row["is_admin"])
