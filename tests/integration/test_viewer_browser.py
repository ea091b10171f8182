"""The run viewer in a real headless Chromium: the browser's own EventSource resumes after the
API restarts, and the page shows runs, draws a run's live tree as `tickwork tail` does, and
approves a paused run."""

from __future__ import annotations

import re

import httpx
import pytest

from tickwork.scheduler.api.app import create_app
from tests.factories import queue_run, scripted_agent
from tests.integration.browser import chromium_page, screenshot, serving
from tests.integration.test_worker_runs import events
from tests.integration.workers import running_worker, scalar, until
from tickwork.run_tree import build_view, view_lines

from playwright.async_api import expect  # noqa: E402  (the test extra installs it)

pytestmark = pytest.mark.browser


def read(record_id: int) -> dict:
    return {"tool_calls": [{"name": "demo.get_record", "arguments": {"id": record_id}}]}


# Live for about five seconds, so a cut after the first events lands mid-run.
SLOW_SCRIPT = {"script": [{"sleep": 0.8}, read(1), {"sleep": 0.8}, read(2), {"sleep": 1.5},
                          read(3), {"sleep": 1.5}, {"text": "Three records read."}]}
HOSTILE = '<img src=x onerror="window.pwned=1"><b>Two</b> records read.\n\ndata: x'
SEND = {"script": [{"tool_calls": [{"name": "demo.send_message",
                                    "arguments": {"recipient": "ops", "text": "report"}}]},
                   {"text": "Handled."}]}

# Stream tickets are single-use: the browser's own reconnect (same URL, Last-Event-ID) is
# refused, EventSource closes, and the page opens a new ticket from the last seq it drew (what
# the viewer's app.js does).
TAIL_JS = """async ([runId, token]) => {
  Object.assign(window, {got: [], ids: [], errors: 0, finished: false});
  const types = ["run_start", "step_start", "reasoning_delta", "tool_start", "tool_complete",
                 "content_delta", "budget_refusal", "gate_decision", "approval_required",
                 "run_complete"];
  async function open() {
    const answer = await fetch(`/v1/runs/${runId}/stream-ticket`,
                               {method: "POST", headers: {Authorization: `Bearer ${token}`}});
    const {ticket} = await answer.json();
    const after = window.got.length ? `&after=${window.got[window.got.length - 1].seq}` : "";
    const source = new EventSource(
      `/v1/runs/${runId}/events?ticket=${encodeURIComponent(ticket)}${after}`);
    for (const type of types) {
      source.addEventListener(type, message => {
        const event = JSON.parse(message.data);
        window.got.push(event);
        window.ids.push(message.lastEventId);
        if (event.type === "run_complete") { source.close(); window.finished = true; }
      });
    }
    source.onerror = () => {
      window.errors += 1;
      if (source.readyState === EventSource.CLOSED) setTimeout(() => open().catch(() => {}), 300);
    };
  }
  await open();
}"""

TREE_JS = """() => {
  const lines = [];
  const walk = (list, depth) => {
    for (const li of list.children) {
      const mark = li.querySelector(":scope > .mark").textContent;
      lines.push("  ".repeat(depth) + (mark ? mark + " " : "")
                 + li.querySelector(":scope > .text").textContent);
      const below = li.querySelector(":scope > ul");
      if (below) walk(below, depth + 1);
    }
  };
  const top = document.querySelector("#tree > li > ul");
  if (top) walk(top, 1);
  return lines;
}"""


def without_durations(lines: list[str]) -> list[str]:
    return [re.sub(r"\d+ min \d+ s|\d+(\.\d+)? m?s\b", "<t>", line) for line in lines]


async def same_tree_as_the_cli(page, api, run_id: str) -> None:
    journal = await events(api, run_id)
    cli = view_lines(build_view(run_id, journal))[1:]
    cli = cli[:cli.index("")] if "" in cli else cli
    drawn = await page.evaluate(TREE_JS)
    assert without_durations(drawn) == without_durations(cli)


def watch_streams(page) -> list[tuple[str, int]]:
    """(url, status) of every journal stream the page opens, in order."""
    seen: list[tuple[str, int]] = []
    page.on("response", lambda r: seen.append((r.url, r.status)) if "/events" in r.url else None)
    return seen


async def test_the_browsers_event_source_resumes_after_an_api_restart_with_a_new_ticket(
        api, pool, db_url, settings, tokens):
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), SLOW_SCRIPT)
    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        requests = []
        page.on("request", lambda r: requests.append(r) if "/events" in r.url else None)
        await page.goto(server.url + "/")
        await page.evaluate(TAIL_JS, [run_id, tokens["acme"]])
        async with running_worker(pool, db_url):
            await page.wait_for_function("() => window.got.length >= 3", timeout=30_000)
            await server.restart()  # every open connection is cut; the port serves again
            assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) == "running"
            before_cut = await page.evaluate("window.got.length")
            await page.wait_for_function("() => window.finished", timeout=60_000)
        got, ids, errors = await page.evaluate("[window.got, window.ids, window.errors]")
        statuses = [(r.url, (await r.response()).status if await r.response() else None)
                    for r in requests]
    stored = await events(api, run_id)
    assert got == stored  # every event once, in order: no gap, no duplicate
    assert ids == [str(event["seq"]) for event in stored]
    assert 3 <= before_cut < len(stored) and errors >= 1 and len(requests) >= 2
    # The resume that worked came with a fresh ticket from the last seq drawn before the cut;
    # no ticket was accepted twice.
    accepted = [url for url, status in statuses if status == 200]
    assert f"after={stored[before_cut - 1]['seq']}" in accepted[-1]
    tickets = [url.split("ticket=")[1].split("&")[0] for url in accepted]
    assert len(tickets) == len(set(tickets))


async def test_the_viewer_lists_runs_draws_a_live_run_and_approves_a_paused_one(
        api, pool, db_url, settings, tokens):
    agent_id = await scripted_agent(api, ["demo.get_record", "demo.send_message"])
    live = {"script": [{"sleep": 0.5}, read(1), {"sleep": 0.5}, read(2), {"sleep": 0.5},
                       {"text": HOSTILE}]}
    run_id = await queue_run(api, agent_id, live)
    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await page.goto(server.url + "/")
        await page.fill("#token", tokens["acme"])
        await page.click("#login button")
        row = page.locator(f'tr[data-run="{run_id}"]')
        await expect(row.locator("td.status")).to_have_text("queued")
        await row.locator("a").click()
        await expect(page).to_have_url(re.compile(f"#/runs/{run_id}$"))
        status = page.locator("#run-status")
        await expect(status).to_have_text("waiting to start")

        async with running_worker(pool, db_url):
            await expect(status).to_have_text("done", timeout=30_000)
            tools = page.locator("#tree li.tool")
            await expect(tools).to_have_count(2)
            for index in range(2):
                await expect(tools.nth(index).locator(".mark")).to_have_text("✓")
            await expect(tools.first).to_contain_text('demo.get_record({"id": 1})')
            await expect(page.locator("#answer")).to_have_text(HOSTILE)  # as text, not markup
            assert await page.evaluate("window.pwned") is None
            assert await page.locator("#answer *").count() == 0
            await same_tree_as_the_cli(page, api, run_id)

            paused_id = await queue_run(api, agent_id, SEND)
            await until(db_url, "SELECT breadcrumb = 'suspended' FROM executions WHERE id = %s",
                        (paused_id,))
            await page.click("#home")
            await expect(page.locator(f'#approvals li[data-approval^="{paused_id}:"]')).to_be_visible()
            await expect(row.locator("td.status")).to_have_text("completed")
            paused_row = page.locator(f'tr[data-run="{paused_id}"]')
            await expect(paused_row.locator("td.status")).to_have_text("waiting for approval")
            await paused_row.locator("a").click()
            await expect(status).to_have_text("waiting for approval")
            await expect(page.locator("#tree li.approval")).to_contain_text(
                "waiting for approval: demo.send_message")
            await screenshot(page, "viewer-approval.png")
            await page.locator("#run-approvals button.approve").click()
            await expect(status).to_have_text("done", timeout=30_000)
            await expect(page.locator("#tree li.approval")).to_contain_text(
                'approved: demo.send_message({"recipient": "ops", "text": "report"})')
            await expect(page.locator("#answer")).to_have_text("Handled.")
            await expect(page.locator("#run-approvals li")).to_have_count(0)
        await same_tree_as_the_cli(page, api, paused_id)
        await expect(page.locator("#run-meta")).to_contain_text("worker-agent")
        await screenshot(page, "viewer.png")
        await page.click("#home")
        await expect(page.locator("#approvals li")).to_have_count(0)
        await expect(page.locator("#runs tbody tr")).to_have_count(2)
        await screenshot(page, "viewer-home.png")
    assert scalar(db_url, "SELECT count(*) FROM demo_outbox") == 1


async def test_the_viewer_takes_a_new_ticket_when_its_ticket_expired_during_a_drop(
        api, pool, db_url, settings, tokens):
    settings.stream_ticket_ttl_seconds = 1  # long gone when the browser reconnects (~3 s)
    run_id = await queue_run(api, await scripted_agent(api, ["demo.get_record"]), SLOW_SCRIPT)
    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        streams = watch_streams(page)
        await page.goto(server.url + "/")
        await page.evaluate("token => sessionStorage.setItem('tickwork.token', token)",
                            tokens["acme"])
        await page.goto(f"{server.url}/#/runs/{run_id}")
        async with running_worker(pool, db_url):
            await expect(page.locator("#tree li.tool")).to_have_count(1, timeout=30_000)
            await server.restart()
            await expect(page.locator("#run-status")).to_have_text("done", timeout=60_000)
        await expect(page.locator("#tree li.tool .mark")).to_have_text(["✓", "✓", "✓"])
        await expect(page.locator("#answer")).to_have_text("Three records read.")
        await same_tree_as_the_cli(page, api, run_id)
    statuses = [status for _, status in streams]
    assert statuses[0] == 200 and 401 in statuses and statuses[-1] == 200, streams
    last_url = httpx.URL(streams[-1][0])
    assert last_url.params["ticket"] != httpx.URL(streams[0][0]).params["ticket"]
    assert int(last_url.params["after"]) > 0  # reopened from the last event drawn


async def test_the_page_is_public_but_holds_no_data_and_the_api_still_needs_the_token(api):
    bare = {"Authorization": ""}
    page = await api.get("/", headers=bare)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset, kind in (("/static/app.js", "javascript"), ("/static/app.css", "text/css")):
        response = await api.get(asset, headers=bare)
        assert response.status_code == 200 and kind in response.headers["content-type"]
        assert response.headers["x-content-type-options"] == "nosniff"
    script = (await api.get("/static/app.js")).text
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    assert (await api.get("/v1/runs", headers=bare)).status_code == 401
    assert "/" not in (await api.get("/openapi.json")).json()["paths"]

