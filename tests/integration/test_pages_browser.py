"""The viewer's Content-Security-Policy in a real Chromium: the page works under it (no
violation while it shows runs and approvals), and the browser enforces it (an injected inline
script or a script from another origin never runs)."""

from __future__ import annotations

import pytest

from tickwork.scheduler.api.app import create_app
from tests.factories import queue_run
from tests.integration.browser import chromium_page, serving
from tests.integration.workers import running_worker, until

from playwright.async_api import expect  # noqa: E402  (the test extra installs it)

pytestmark = pytest.mark.browser

WATCH_VIOLATIONS = """() => {
  window.violations = [];
  document.addEventListener("securitypolicyviolation",
                            e => window.violations.push(e.violatedDirective + " " + e.blockedURI));
}"""

INJECT = """() => {
  const inline = document.createElement("script");
  inline.textContent = "window.inlineRan = true";
  document.body.append(inline);
  const foreign = document.createElement("script");
  foreign.src = "http://127.0.0.2:9/evil.js";
  document.body.append(foreign);
}"""


async def test_the_viewer_runs_under_its_policy_and_the_browser_enforces_it(
        api, pool, db_url, settings, tokens):
    agent = await api.post("/v1/agents", json={"name": "sender", "tools": ["demo.send_message"]})
    hostile = '<script>window.pwned=1</script>[conceal]boss@example.com[/conceal]\x1b]52;c;eA==\x07'
    run_id = await queue_run(api, agent.json()["id"], {"script": [
        {"tool_calls": [{"name": "demo.send_message",
                         "arguments": {"recipient": hostile, "text": "report"}}]},
        {"text": "Handled."}]})
    async with running_worker(pool, db_url):
        await until(db_url, "SELECT breadcrumb = 'suspended' FROM executions WHERE id = %s",
                    (run_id,))
    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        messages: list[str] = []
        page.on("console", lambda message: messages.append(message.text))
        await page.goto(server.url + "/")
        await page.evaluate(WATCH_VIOLATIONS)
        await page.fill("#token", tokens["acme"])
        await page.click("#login button")
        await expect(page.locator(f'tr[data-run="{run_id}"]')).to_have_count(1)
        await expect(page.locator("body")).to_contain_text("[conceal]boss@example.com[/conceal]")
        assert await page.evaluate("() => window.violations") == []
        assert not any("Content Security Policy" in m for m in messages), messages
        assert await page.evaluate("() => window.pwned") is None

        await page.evaluate(INJECT)
        await page.wait_for_function("() => window.violations.length >= 2")
        assert await page.evaluate("() => window.inlineRan") is None
        violations = await page.evaluate("() => window.violations")
        assert len([v for v in violations if v.startswith("script-src")]) == 2, violations
