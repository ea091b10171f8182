"""/v1/tokens: a tenant admin lists and revokes its tenant's tokens; an operator, everyone's."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Depends, Request

from tickwork.scheduler.api.deps import pool_of, token_manager
from tickwork.scheduler.tokens import Principal, list_tokens, public_token, revoke_token

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.get("")
async def list_(request: Request, principal: Principal = Depends(token_manager)) -> dict:
    """Tokens oldest first, with when they were created, expire and were last used (to the
    minute); never the token itself. Revoked tokens are listed with their revoked_at."""
    async with pool_of(request).connection() as conn:
        rows = await list_tokens(conn, tenant_id=principal.tenant_id)
    return {"items": [public_token(row) for row in rows], "next_cursor": None}


@router.delete("/{token_id}", status_code=204)
async def revoke(token_id: UUID, request: Request,
                 principal: Principal = Depends(token_manager)) -> None:
    """Revoke a token: it is refused (401) from the next request on, and so are the stream
    tickets it minted. Another tenant's token is a 404, like one that does not exist."""
    async with pool_of(request).connection() as conn:
        await revoke_token(conn, str(token_id), tenant_id=principal.tenant_id)
