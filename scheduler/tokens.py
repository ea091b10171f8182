"""API tokens: 256-bit random secrets, stored only as SHA-256 digests, scoped to a tenant (or,
for an operator token, to the whole cluster); they can expire and be revoked."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable
from uuid import UUID

from psycopg import AsyncConnection

from tickwork.scheduler.serialize import utc_text
from tickwork.sql import QUERIES
from tickwork.sql.errors import InvalidInput, NotFound, Unauthorized
from tickwork.sql.ids import new_id

_TOKEN_FORMAT = re.compile(r"^tw_[A-Za-z0-9_-]{43}$")
_TENANT_FORMAT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LIFETIME_SECONDS = 10 * 365 * 86400


@dataclass(frozen=True)
class Principal:
    tenant_id: UUID | None  # None only for an operator token
    is_admin: bool
    is_operator: bool = False
    token_id: UUID | None = None  # None for a principal that did not come from a token


class TokenCache:
    """A process's recently authenticated tokens, each kept at most ``ttl_seconds`` and never
    past its expiry: a burst of requests with one token costs one lookup a second, and a token
    revoked or expired elsewhere (the CLI, another API process) is refused within that second.
    A revocation made through this process forgets the token at once (``forget``). Refusals
    are never cached, so each failed guess still reaches the throttle. ``clock`` is injectable
    for tests."""

    def __init__(self, ttl_seconds: float = 1.0, *, clock: Callable[[], float] = time.monotonic,
                 max_entries: int = 10_000) -> None:
        self.ttl_seconds, self.clock, self._max = ttl_seconds, clock, max_entries
        self._entries: dict[bytes, tuple[float, Principal]] = {}

    def get(self, digest: bytes) -> Principal | None:
        found = self._entries.get(digest)
        if found is None:
            return None
        if found[0] <= self.clock():
            self._entries.pop(digest, None)
            return None
        return found[1]

    def put(self, digest: bytes, principal: Principal, expires_in: float | None) -> None:
        keep = self.ttl_seconds if expires_in is None else min(self.ttl_seconds, expires_in)
        if keep <= 0:
            return
        if len(self._entries) >= self._max:  # many distinct tokens in one second: start over
            self._entries.clear()
        self._entries[digest] = (self.clock() + keep, principal)

    def forget(self, token_id: UUID) -> None:
        for digest, (_, principal) in list(self._entries.items()):
            if principal.token_id == token_id:
                self._entries.pop(digest, None)


# The API process's cache (its request dependencies); the CLI authenticates without one. 0.9 s,
# not 1: the contract refuses an ended token within 1 s, and the lookup that filled an entry
# read the token a little before the entry's clock started.
TOKEN_CACHE = TokenCache(0.9)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_lifetime(text: str, flag: str = "--expires-in") -> int:
    """'90m', '12h', '30d', '2w' -> seconds; anything else is refused with a sentence."""
    found = _DURATION.match(text.strip())
    seconds = int(found.group(1)) * _UNIT_SECONDS[found.group(2)] if found else 0
    if not found or seconds <= 0:
        raise InvalidInput(f"{flag} {text[:40]!r} must be a number followed by m, h, d or w "
                           "(minutes, hours, days, weeks), e.g. 30d", code="invalid_lifetime")
    if seconds > MAX_LIFETIME_SECONDS:
        raise InvalidInput(f"{flag} {text[:40]!r} is longer than ten years; leave it out for a "
                           "token that does not expire", code="invalid_lifetime")
    return seconds


async def create_token(conn: AsyncConnection, *, tenant: str | None = None, admin: bool = False,
                       operator: bool = False, expires_seconds: int | None = None) -> str:
    """Create a token (and its tenant if new); the token is returned once, never stored.
    An operator token belongs to no tenant: pass ``operator=True`` and no ``tenant``."""
    if operator and (tenant is not None or admin):
        raise InvalidInput("an operator token is for the whole cluster: give --operator "
                           "without --tenant and --admin", code="invalid_token_kind")
    if not operator and tenant is None:
        raise InvalidInput("say whose token this is: --tenant NAME (or --operator for a "
                           "cluster-wide operator token)", code="invalid_token_kind")
    if tenant is not None and not _TENANT_FORMAT.match(tenant):
        raise InvalidInput(f"tenant name {tenant[:70]!r} must be 1-63 letters, digits, '.', '_' "
                           "or '-', starting with a letter or digit", code="invalid_tenant")
    token = "tw_" + secrets.token_urlsafe(32)
    async with conn.transaction():
        tenant_id = None
        if tenant is not None:
            cursor = await conn.execute(QUERIES["upsert_tenant"], {"id": new_id(), "name": tenant})
            tenant_id = (await cursor.fetchone())["id"]
        await conn.execute(QUERIES["insert_api_token"], {
            "id": new_id(), "tenant_id": tenant_id, "token_hash": hash_token(token),
            "is_admin": admin, "is_operator": operator, "expires_seconds": expires_seconds})
    return token


def cached_principal(token: str, cache: TokenCache) -> Principal | None:
    """The token's principal if the cache holds it (no lookup); None means authenticate."""
    if not _TOKEN_FORMAT.match(token):
        return None
    return cache.get(hash_token(token))


async def authenticate(conn: AsyncConnection, token: str,
                       cache: TokenCache | None = None) -> Principal:
    """Resolve a bearer token to its principal, or raise Unauthorized with a reason. Without a
    cache a revoked or expired token is refused from the next request on; with one (the API),
    within the cache's second (see TokenCache)."""
    if not _TOKEN_FORMAT.match(token):
        raise Unauthorized("the bearer token is malformed; tokens look like tw_ followed by 43 "
                           "characters (create one with `tickwork token create --tenant NAME`)")
    digest = hash_token(token)
    if cache is not None and (cached := cache.get(digest)) is not None:
        return cached
    row = await (await conn.execute(QUERIES["get_api_token_by_hash"], {"token_hash": digest})).fetchone()
    # compare_digest keeps the final comparison constant-time even though the lookup is by hash.
    if row is None or not hmac.compare_digest(bytes(row["token_hash"]), digest):
        raise Unauthorized("the bearer token is not valid (unknown or revoked)")
    if row["revoked"]:
        raise Unauthorized("the bearer token has been revoked; ask for a new one")
    if row["expired"]:
        raise Unauthorized("the bearer token has expired; create a new one with "
                           "`tickwork token create`")
    if row["use_is_stale"]:
        await conn.execute(QUERIES["update_api_token_last_used"], {"id": row["id"]})
    principal = Principal(tenant_id=row["tenant_id"], is_admin=row["is_admin"],
                          is_operator=row["is_operator"], token_id=row["id"])
    if cache is not None:
        expires_in = row["expires_in_seconds"]
        cache.put(digest, principal, None if expires_in is None else float(expires_in))
    return principal


async def list_tokens(conn: AsyncConnection, *, tenant_id: UUID | None = None,
                      tenant: str | None = None) -> list[dict[str, Any]]:
    """Every token (never the secret), oldest first, optionally of one tenant (by id or name)."""
    cursor = await conn.execute(QUERIES["list_api_tokens"],
                                {"tenant_id": tenant_id, "tenant": tenant})
    return await cursor.fetchall()


async def revoke_token(conn: AsyncConnection, token_or_id: str, *,
                       tenant_id: UUID | None = None) -> dict[str, Any]:
    """Revoke by id or by the token itself; ``tenant_id`` limits it to that tenant's tokens.
    Revoking a revoked token is not an error (it stays revoked since the first time)."""
    token_id, digest = None, None
    if token_or_id.startswith("tw_"):
        digest = hash_token(token_or_id)
    else:
        try:
            token_id = UUID(token_or_id)
        except ValueError:
            raise InvalidInput(f"{token_or_id[:40]!r} is neither a token (tw_…) nor a token id "
                               "(see `tickwork token list`)", code="invalid_token_id") from None
    cursor = await conn.execute(QUERIES["update_api_token_revoked"],
                                {"id": token_id, "token_hash": digest, "tenant_id": tenant_id})
    row = await cursor.fetchone()
    if row is None:
        raise NotFound("token", token_id or "tw_…", "list tokens with `tickwork token list` "
                       "or GET /v1/tokens")
    TOKEN_CACHE.forget(row["id"])  # refused by this process from its next request on
    return row


def public_token(row: dict[str, Any]) -> dict[str, Any]:
    """A token as the API and `token list --json` show it: never the secret."""
    return {"id": str(row["id"]), "tenant": row["tenant"], "admin": row["is_admin"],
            "operator": row["is_operator"], "created_at": utc_text(row["created_at"]),
            "expires_at": utc_text(row["expires_at"]),
            "last_used_at": utc_text(row["last_used_at"]),
            "revoked_at": utc_text(row["revoked_at"])}
