"""The run viewer: one static page at `/` (runs with filters and a runs-per-minute chart, live
run trees with cancel, pending approvals, schedules with their fire history, agents).

The page, its scripts (static/*.js, plain, no build step) and its stylesheet are public and
hold no data. Everything they show
comes through the authenticated API: the operator token, typed once and kept in the tab's
sessionStorage, goes in an `Authorization: Bearer` header; the live tail uses the browser's
own EventSource with a short-lived, run-scoped stream ticket, never the token in a URL.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).with_name("static")

# The page runs only its own script and talks only to its own origin. Event text is hostile
# and the script inserts it as text only; this policy is the second line if that ever slips.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _Static(StaticFiles):
    """The viewer's script and stylesheet, with the page's security headers."""

    async def get_response(self, path: str, scope: Scope):
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


router = APIRouter(include_in_schema=False)
router.mount("/static", _Static(directory=STATIC), name="viewer-static")


@router.get("/")
async def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)
