"""Behind a trusted proxy, a second X-Forwarded-For line does not dodge the failed-login brake
(issue 28, S7 item 9): the header's lines are read as one list, right to left, so the address
the proxy appended is the one counted, whatever the client wrote in a line of its own.

Addresses are documentation ranges handed to the in-process ASGI transport as the peer."""

import httpx

from tickwork.scheduler.api.app import create_app

WRONG = "tw_" + "A" * 43


async def test_a_second_forwarded_line_does_not_dodge_the_brake(pool, settings):
    settings.auth_failure_limit = 5
    settings.trusted_proxies = "192.0.2.1"
    app = create_app(settings, pool=pool)
    transport = httpx.ASGITransport(app=app, client=("192.0.2.1", 40000))  # the proxy
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as proxied:
        answers = []
        for n in range(8):
            # The client's own line first (a new address each time), then the proxy's line
            # with the client's real address.
            answers.append((await proxied.get("/v1/agents", headers=[
                ("Authorization", f"Bearer {WRONG}"),
                ("X-Forwarded-For", f"203.0.113.{n}"),
                ("X-Forwarded-For", "198.51.100.7")])).status_code)
        assert answers == [401] * 5 + [429] * 3
        # Another client behind the same proxy is not braked by the first one's failures.
        other = await proxied.get("/v1/agents", headers=[
            ("Authorization", f"Bearer {WRONG}"), ("X-Forwarded-For", "198.51.100.8")])
        assert other.status_code == 401
