"""The viewer shows each run's usage (the runs table and the run page) and a run cancelled while
it waited for approval as cancelled; in a real headless Chromium."""

from __future__ import annotations

import pytest
from playwright.async_api import expect  # the test extra installs it

from tickwork.scheduler.api.app import create_app
from tests.integration.browser import chromium_page, screenshot, serving
from tests.integration.test_run_control import start_by_hand, terminal

pytestmark = pytest.mark.browser


async def test_the_viewer_shows_usage_per_run_and_a_cancelled_waiting_run(api, pool, settings,
                                                                          tokens):
    done_id, journal = await start_by_hand(api, pool)
    terminal(journal, {})
    await journal.finish(status="completed", outcome="done",
                         usage={"input_tokens": 12345, "output_tokens": 678, "model_calls": 4})
    waiting_id, journal = await start_by_hand(api, pool)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{waiting_id}:c1",
                          tool_call_id="c1", tool="demo.send_message", arguments={},
                          usage={"input_tokens": 50, "output_tokens": 5, "model_calls": 1})

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await page.goto(server.url + "/")
        await page.fill("#token", tokens["acme"])
        await page.click("#login button")
        done_row = page.locator(f'tr[data-run="{done_id}"]')
        waiting_row = page.locator(f'tr[data-run="{waiting_id}"]')
        await expect(done_row.locator("td.usage")).to_have_text("12,345 / 678")
        await expect(waiting_row.locator("td.usage")).to_have_text("50 / 5")
        await expect(waiting_row.locator("td.status")).to_have_text("waiting for approval")
        await screenshot(page, "viewer-usage.png")

        assert (await api.post(f"/v1/runs/{waiting_id}/cancel")).status_code == 202
        await expect(waiting_row.locator("td.status")).to_have_text("cancelled", timeout=10_000)

        await done_row.locator("a").click()
        await expect(page.locator("#run-meta")).to_contain_text(
            "12,345 tokens in, 678 out, 4 model calls")
        await expect(page.locator("#run-status")).to_have_text("done")
