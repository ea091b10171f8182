"""Row-level security's key for the API's work: every transaction says whose rows it may see.

The key is transaction-local (set_config(..., true)), so it never outlives the transaction and
also holds behind a PgBouncer in transaction mode. A tenant's request gets a TenantConnection:
each statement it runs outside a transaction runs in one that first scopes it to the tenant,
and each transaction it opens is scoped the same way (a forgotten ``WHERE tenant_id`` then
still sees one tenant's rows). Work that spans tenants by design (the tick, metrics, the tail's
hub and stream tickets, which check the tenant themselves) takes connections from an
AllTenantsPool, whose connections are scoped to every tenant for as long as they are held.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from tickwork.sql import QUERIES
from tickwork.sql.db import execute_as_tenant


class TenantConnection:
    """A request's connection that only ever works as one tenant (see the module's note)."""

    def __init__(self, conn: AsyncConnection, tenant_id: UUID) -> None:
        self._conn = conn
        self._tenant_id = tenant_id

    async def execute(self, query: Any, params: Any = None, **kwargs: Any):
        if self._conn.info.transaction_status != TransactionStatus.IDLE:
            return await self._conn.execute(query, params, **kwargs)
        # One round trip for BEGIN, the key, the statement and COMMIT (pipeline mode).
        async with self._conn.pipeline():
            async with self._conn.transaction():
                await self._scope()
                cursor = await self._conn.execute(query, params, **kwargs)
        return cursor

    async def fetch_one_scoped(self, query: str, params: dict[str, Any]) -> Any:
        """One statement's one row: with its scope in a single message (execute_as_tenant), or
        inside an open transaction as a plain statement."""
        if self._conn.info.transaction_status != TransactionStatus.IDLE:
            return await (await self._conn.execute(query, params)).fetchone()
        cursor = await execute_as_tenant(self._conn, self._tenant_id, query, params)
        return await cursor.fetchone()

    @asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any):
        outermost = self._conn.info.transaction_status == TransactionStatus.IDLE
        async with self._conn.transaction(*args, **kwargs) as tx:
            if outermost:
                await self._scope()
            yield tx

    async def _scope(self) -> None:
        await self._conn.execute(QUERIES["set_tenant_scope"], {"tenant_id": self._tenant_id})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class AllTenantsPool:
    """The process's pool for work that spans tenants: each connection it lends is inside a
    transaction scoped to every tenant, committed when the connection is given back."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def connection(self, *args: Any, **kwargs: Any) -> AsyncIterator[AsyncConnection]:
        async with self._pool.connection(*args, **kwargs) as conn:
            async with conn.transaction():
                await conn.execute(QUERIES["set_all_tenants_scope"])
                yield conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)
