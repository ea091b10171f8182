"""The API's long-lived parts are made when the app starts, never on first use: the event hub
(already listening before any tail asks for it) and the token watch in the app's lifespan,
stopped with it; the failed-login brake with the app itself (test_throttle.py serves apps
that run no lifespan at all)."""

from __future__ import annotations

import asyncio
import contextlib

from tickwork.scheduler.api.app import create_app
from tickwork.sql.ids import new_id


async def test_the_hub_listens_from_startup_before_any_stream_and_stops_with_the_app(pool,
                                                                                      settings):
    app = create_app(settings, pool=pool)
    async with app.router.lifespan_context(app):
        hub = app.state.hub
        assert app.state.revocation_watch is not None
        run_id = new_id()  # no such run: a notification about it still wakes its subscribers
        async with hub.subscribe(run_id, 0) as feed, pool.connection() as conn:
            woke = feed.changed
            # No request has been served: only a hub started with the app hears this. Its
            # listener connects in the background, so notify until it has heard one.
            for _ in range(60):
                await conn.execute("SELECT pg_notify('tickwork_events', %s)", (str(run_id),))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await woke.wait()
                if woke.is_set():
                    break
            assert woke.is_set(), "the hub started with the app never heard the notification"
            assert feed.ended  # it read the run's state: gone, so a tail of it would end
    assert app.state.hub is None  # stopped with the app
