"""Approvals: a person decides a paused tool call once; the decision queues the run's resume."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from tickwork.scheduler.serialize import pick
from tickwork.scheduler.tokens import Principal
from tickwork.sql import QUERIES
from tickwork.sql.errors import Conflict, NotFound
from tickwork.sql.vocabulary import ApprovalStatus

APPROVAL_FIELDS = ("id", "execution_id", "tool", "arguments", "status", "reason", "created_at",
                   "decided_at")


def public_approval(row: dict[str, Any]) -> dict[str, Any]:
    return pick(row, APPROVAL_FIELDS)


async def list_approvals(conn: AsyncConnection, principal: Principal, *,
                         status: ApprovalStatus | None, limit: int,
                         cursor: str | None) -> dict[str, Any]:
    """A page of the tenant's approvals; an approval's id is its own cursor (it is not a UUID:
    the run's id and the harness's call id)."""
    rows = await (await conn.execute(QUERIES["list_approvals"], {
        "tenant_id": principal.tenant_id, "status": status, "cursor": cursor,
        "limit": limit + 1})).fetchall()
    items = [public_approval(row) for row in rows[:limit]]
    return {"items": items, "next_cursor": items[-1]["id"] if len(rows) > limit else None}


async def decide(conn: AsyncConnection, principal: Principal, approval_id: str, *,
                 approve: bool, reason: str | None) -> dict[str, Any]:
    """Approve or reject a pending approval; a second decision is a Conflict."""
    async with conn.transaction():
        cursor = await conn.execute(QUERIES["update_approval_decided"], {
            "id": approval_id, "tenant_id": principal.tenant_id,
            "status": "approved" if approve else "rejected", "reason": reason})
        row = await cursor.fetchone()
    if row is not None:
        return public_approval(row)
    cursor = await conn.execute(QUERIES["get_approval"],
                                {"id": approval_id, "tenant_id": principal.tenant_id})
    existing = await cursor.fetchone()
    if existing is None:
        raise NotFound("approval", approval_id, "list approvals with GET /v1/approvals")
    if existing["status"] == "cancelled":
        error = Conflict(f"approval {approval_id} can no longer be decided: its run "
                         f"{existing['execution_id']} was cancelled while it waited",
                         status="cancelled", run_id=str(existing["execution_id"]))
        error.code = "run_cancelled"
        raise error
    if existing["status"] == "expired":  # the sweep ended its run (scheduler/expiry.py)
        error = Conflict(f"approval {approval_id} can no longer be decided: it expired "
                         f"undecided and its run {existing['execution_id']} was cancelled",
                         status="expired", run_id=str(existing["execution_id"]))
        error.code = "approval_expired"
        raise error
    error = Conflict(f"approval {approval_id} was already {existing['status']}; a decision is "
                     "made once", status=existing["status"])
    error.code = "already_decided"
    raise error
