"""Operations: health, Prometheus metrics, the tick endpoint, and the tool catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from tickwork.scheduler.api.deps import (Session, operator_principal, pool_of, session,
                                settings_of)
from tickwork.scheduler.agents import list_tools
from tickwork.scheduler.metrics import read_snapshot
from tickwork.scheduler.tokens import Principal
from tickwork.scheduler.models import TickIn
from tickwork.scheduler.serialize import parse_utc
from tickwork.scheduler.tick import run_tick
from tickwork.sql.errors import InvalidInput

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 once the process can serve (its database answers); no token needed."""
    try:
        # One statement on a pooled connection: it reads no table, so it needs no tenant
        # scope (pool_of's BEGIN, scope and COMMIT made it four round trips).
        async with request.app.state.pool.connection(timeout=2) as conn:
            await conn.execute("SELECT 1")
    except Exception as exc:  # any failure here means "not ready", reported, not raised
        return JSONResponse({"status": "unavailable", "reason": type(exc).__name__},
                            status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request, _: Principal = Depends(operator_principal)) -> Response:
    """Prometheus text: the tick's timings, and gauges of runs, queue, approvals and journal
    read from the database now (workers have no port; the database knows for all of them)."""
    state = request.app.state
    hub = getattr(state, "hub", None)  # it counts this process's open streams; None until startup
    async with pool_of(request).connection() as conn:
        snapshot = await read_snapshot(conn, sse_subscribers=hub.subscribers if hub else 0)
    return Response(state.metrics.render(snapshot), media_type=CONTENT_TYPE_LATEST)


@router.post("/v1/tick")
async def tick(request: Request, body: Annotated[TickIn | None, Body()] = None,
               _: Principal = Depends(operator_principal)) -> dict:
    """Run one tick now (for deployments driven by an external cron). Always 200: the outcome,
    failed or not, is in the body; the tick itself is never retried."""
    settings = settings_of(request)
    now = None
    if body is not None and body.at is not None:
        if not settings.test_mode:
            raise InvalidInput("'at' is only accepted in test mode; the tick uses the database "
                               "clock", code="test_mode_only", field="at")
        now = parse_utc(body.at, "at")
    # The API's role cannot delete history or choose the partitions' date: its retention runs
    # on the database clock through a narrow function (sql/grants.sql).
    outcome = await run_tick(pool_of(request), settings, now=now, database_clock_retention=True)
    return outcome.as_dict()


@router.get("/v1/tools")
async def tools(s: Session = Depends(session)) -> dict:
    return await list_tools(s.conn)
