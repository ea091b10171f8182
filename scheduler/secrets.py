"""Tenants' secrets on the API side: check a name and value, seal the value (sql/sealed.py) and
store it, list names and dates, remove one. A value is never returned, logged or listed; the
worker opens it only for a tool of the same tenant's run (ctx.secret)."""

from __future__ import annotations

import re
from typing import Any, Callable
from uuid import UUID

from psycopg import AsyncConnection
from pydantic import BaseModel, ConfigDict, Field

from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, InvalidInput, NotFound
from tickwork.sql.sealed import MAX_VALUE_CHARS, SecretBox

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")
MAX_PER_TENANT = 200
HINT = "list secrets with `tickwork secret list`"


class SecretIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="a letter or _, then up to 99 letters, digits, _ . or -")
    value: str = Field(description=f"the secret, 1 to {MAX_VALUE_CHARS} characters")


def check_secret(body: SecretIn) -> None:
    if not NAME.fullmatch(body.name):
        raise InvalidInput(f"name {body.name[:60]!r} must start with a letter or _ and hold only "
                           "letters, digits, _ . and - (at most 100 characters), e.g. "
                           "STRIPE_API_KEY", code="invalid_secret_name", field="name")
    if not body.value or len(body.value) > MAX_VALUE_CHARS or "\x00" in body.value:
        raise InvalidInput(f"value must be 1 to {MAX_VALUE_CHARS} characters without NUL "
                           f"(got {len(body.value)})", code="invalid_secret_value", field="value")


async def set_secret(conn: AsyncConnection, tenant_id: UUID, body: SecretIn,
                     box: Callable[[], SecretBox]) -> dict[str, Any]:
    """Check, seal with the configured keys (``box``: asked only for a value that is fine),
    and store."""
    check_secret(body)
    sealed = box().seal(tenant_id, body.name, body.value)
    cursor = await conn.execute(QUERIES["upsert_tenant_secret"], {
        "tenant_id": tenant_id, "name": body.name, "sealed": sealed,
        "max_per_tenant": MAX_PER_TENANT})
    row = await cursor.fetchone()
    if row is None:
        raise Conflict(f"this tenant has {MAX_PER_TENANT} secrets, the most it may keep; remove "
                       f"one first ({HINT})")
    return dict(row)


async def list_secrets(conn: AsyncConnection, tenant_id: UUID) -> dict[str, Any]:
    cursor = await conn.execute(QUERIES["list_tenant_secrets"], {"tenant_id": tenant_id})
    return {"items": [dict(row) for row in await cursor.fetchall()]}


async def delete_secret(conn: AsyncConnection, tenant_id: UUID, name: str) -> None:
    cursor = await conn.execute(QUERIES["delete_tenant_secret"],
                                {"tenant_id": tenant_id, "name": name})
    if await cursor.fetchone() is None:
        raise NotFound("secret", repr(name[:100]), HINT)
