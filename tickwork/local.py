"""`tickwork up` and the token verb: the pieces that need a database but no API."""

from __future__ import annotations

import asyncio
from typing import Callable

import typer

from scheduler.settings import SchedulerSettings
from scheduler.tokens import create_token
from sql.db import connect


def create_token_sync(url: str, *, tenant: str, admin: bool) -> str:
    async def create() -> str:
        conn = await connect(url, application_name="tickwork-cli")
        try:
            return await create_token(conn, tenant=tenant, admin=admin)
        finally:
            await conn.close()
    return asyncio.run(create())


def run_up(url: str, *, host: str, port: int, migrate_and_publish: Callable[[str], None]) -> None:
    from tickwork.processes import serve_api

    embedded = None
    if not url:
        from sql.embedded import default_data_root, start_embedded

        embedded = start_embedded(default_data_root())
        url = embedded.url
    try:
        migrate_and_publish(url)
        token = create_token_sync(url, tenant="local", admin=True)
        typer.echo(f"tickwork is up: API http://{host}:{port}  database {url}")
        typer.echo(f"export TICKWORK_API_URL=http://{host}:{port} TICKWORK_TOKEN={token}",
                   color=False)
        asyncio.run(serve_api(url, SchedulerSettings(), host, port, with_scheduler=True,
                              with_worker=True))
    finally:
        if embedded is not None:
            embedded.stop()
