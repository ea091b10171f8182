"""The viewer's schedules, agents, run filters, cancel and runs-per-minute chart, in a real
headless Chromium under the page's Content-Security-Policy (no violation on any page)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import psycopg
import pytest
from playwright.async_api import expect  # the test extra installs it

from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.serialize import utc_text
from tickwork.scheduler.tick import run_tick
from tests.factories import create_agent, create_schedule, queue_run
from tests.integration.browser import chromium_page, screenshot, serving
from tests.integration.test_run_control import start_by_hand
from tests.integration.workers import scalar

pytestmark = pytest.mark.browser

ZONE = "Asia/Tokyo"  # UTC+09:00 all year (no DST), so the expected local times are fixed

WATCH_VIOLATIONS = """() => {
  window.violations = [];
  document.addEventListener("securitypolicyviolation",
                            e => window.violations.push(e.violatedDirective + " " + e.blockedURI));
}"""


async def open_viewer(page, server, token: str, hash_: str = "#/") -> None:
    """Log in as the operator, in the test's zone, with CSP violations recorded."""
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("Emulation.setTimezoneOverride", {"timezoneId": ZONE})
    await page.goto(server.url + "/")
    await page.evaluate(WATCH_VIOLATIONS)
    await page.fill("#token", token)
    await page.click("#login button")
    await expect(page.locator("#nav")).to_be_visible()
    if hash_ != "#/":
        await page.evaluate("h => { location.hash = h; }", hash_)


async def no_violations(page) -> None:
    assert await page.evaluate("() => window.violations") == []


def sql(db_url: str, statement: str, params: tuple = ()):
    with psycopg.connect(db_url) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchone() if cursor.description else None


# --- schedules ----------------------------------------------------------------------------------

async def test_the_schedules_page_shows_local_time_controls_and_a_coalesced_fire(
        api, pool, db_url, settings, tokens):
    agent = (await create_agent(api, "nightly-report"))["id"]
    # 00:30 UTC is 09:30 in Tokyo: what its author typed there.
    daily = await create_schedule(api, agent, "30 0 * * *", display={"frequency": "daily",
                                                                     "time_of_day": "09:30"})
    often = await create_schedule(api, agent, "*/5 * * * *")
    # The scheduler was down for 15 minutes: one late tick finds four fires due, runs the last
    # one and records the three before it as coalesced into that run.
    first = scalar(db_url, "SELECT next_run FROM schedules WHERE id = %s", (often["id"],))
    outcome = await run_tick(pool, settings, now=first + timedelta(minutes=15, seconds=20))
    assert outcome.ok and outcome.dispatch.created == 1
    # Its run is still queued at the next fire: that fire is skipped (overlap "skip").
    outcome = await run_tick(pool, settings, now=first + timedelta(minutes=20, seconds=20))
    assert outcome.ok and outcome.dispatch.created == 0

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await open_viewer(page, server, tokens["acme"], "#/schedules")
        row = page.locator(f'tr[data-schedule="{daily["id"]}"]')
        await expect(row.locator("td.when")).to_have_text(f"daily at 09:30 ({ZONE})")
        await expect(row.locator("td.written")).to_have_text("daily at 09:30")
        await expect(row.locator("td").first).to_have_text("nightly-report")
        await expect(row.locator("td.next")).to_contain_text("in ")
        await expect(row.locator("td.last")).to_have_text("never")
        often_row = page.locator(f'tr[data-schedule="{often["id"]}"]')
        await expect(often_row.locator("td.when")).to_have_text("every 5 minutes")
        await expect(often_row.locator("td.last")).not_to_have_text("never")
        await screenshot(page, "viewer-schedules.png")

        await row.locator("button.pause").click()
        await expect(row.locator("td.status")).to_have_text("paused")
        await expect(row.locator("td.next")).to_have_text("paused")
        assert (await api.get(f"/v1/schedules/{daily['id']}")).json()["status"] == "paused"
        await row.locator("button.resume").click()
        await expect(row.locator("td.status")).to_have_text("active")
        assert (await api.get(f"/v1/schedules/{daily['id']}")).json()["status"] == "active"

        await row.locator("button.run-now").click()
        await expect(page.locator("#notice")).to_contain_text("queued")
        manual = scalar(db_url, "SELECT id::text FROM executions WHERE schedule_id = %s"
                                " AND trigger_source = 'manual'", (daily["id"],))
        await expect(page.locator(f'#notice a[href="#/runs/{manual}"]')).to_have_count(1)

        await often_row.locator("td.when a").click()
        await expect(page).to_have_url(re.compile(f"#/schedules/{often['id']}$"))
        coalesced = page.locator('#history-table tr[data-reason="coalesced"]')
        await expect(coalesced).to_have_count(3)
        for index in range(3):
            await expect(coalesced.nth(index)).to_contain_text("coalesced")
            await expect(coalesced.nth(index).locator("td.why")).to_contain_text(
                "Missed while no tick ran")
        ran = page.locator('#history-table tr[data-kind="execution"]')
        await expect(ran).to_have_count(1)
        await expect(ran.locator("td.why")).to_have_text(
            "One run for 4 fires: the 3 missed before it were coalesced into it.")
        run_id = scalar(db_url, "SELECT id::text FROM executions WHERE schedule_id = %s",
                        (often["id"],))
        await expect(coalesced.locator(f'a[href="#/runs/{run_id}"]')).to_have_count(3)
        overlap = page.locator('#history-table tr[data-reason="overlap"]')
        await expect(overlap.locator(".badge")).to_have_text("skipped: still running")
        await expect(overlap.locator("td.why")).to_contain_text("had not finished")
        await expect(overlap.locator(f'a[href="#/runs/{run_id}"]')).to_have_count(1)
        await expect(page.locator("#history-summary")).to_have_text(
            "1 ran on time3 coalesced1 skipped while still running")
        await screenshot(page, "viewer-schedule-history.png")
        await no_violations(page)


# --- agents -------------------------------------------------------------------------------------

async def test_the_agents_page_shows_tools_what_waits_for_a_person_and_status(
        api, pool, settings, tokens):
    reader = (await create_agent(api, "reader", tools=["demo.get_record"], instructions=(
        "<img src=x onerror=window.pwned=1>Summarise.")))["id"]
    sender = (await create_agent(api, "sender",
                                 tools=["demo.get_record", "demo.send_message"]))["id"]
    trusted = (await create_agent(api, "trusted", tools=["demo.send_message"],
                                  auto_approve=["demo.send_message"], status="paused",
                                  model="default", max_tool_calls=12, token_budget=50000,
                                  max_concurrent_runs=2))["id"]
    await create_schedule(api, sender, "0 9 * * *")

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await open_viewer(page, server, tokens["acme"], "#/agents")
        rows = page.locator("#agents tbody tr")
        await expect(rows).to_have_count(3)
        reader_row = page.locator(f'tr[data-agent="{reader}"]')
        await expect(reader_row.locator("td.name")).to_have_text(
            "reader<img src=x onerror=window.pwned=1>Summarise.")  # as text, not markup
        assert await page.evaluate("window.pwned") is None
        await expect(reader_row.locator(".chip.asks")).to_have_count(0)
        sender_row = page.locator(f'tr[data-agent="{sender}"]')
        await expect(sender_row.locator(".chip.asks")).to_have_text(["demo.send_message ‖"])
        await expect(sender_row.locator("td.auto-approve")).to_have_text("none")
        await expect(sender_row.locator("td.schedules")).to_have_text("1")
        await expect(sender_row.locator("td.limits")).to_have_text("defaults")
        trusted_row = page.locator(f'tr[data-agent="{trusted}"]')
        await expect(trusted_row.locator("td.status")).to_have_text("paused")
        await expect(trusted_row.locator(".chip.asks")).to_have_count(0)
        await expect(trusted_row.locator("td.auto-approve")).to_have_text("demo.send_message")
        await expect(trusted_row.locator("td.limits .chip")).to_have_text(
            ["model default", "12 tool calls", "50,000 tokens", "2 at once"])
        await expect(page.locator('#nav a[aria-current="page"]')).to_have_text("Agents")
        await screenshot(page, "viewer-agents.png")
        await trusted_row.locator("a", has_text="runs").click()
        await expect(page).to_have_url(re.compile(f"#/\\?agent={trusted}$"))
        await expect(page.locator("#runs")).to_contain_text("No runs match these filters.")
        await no_violations(page)


# --- run filters and pages ----------------------------------------------------------------------

async def test_filters_narrow_the_runs_list_and_older_pages_follow_the_cursor(
        api, pool, db_url, settings, tokens):
    alpha = (await create_agent(api, "alpha"))["id"]
    beta = (await create_agent(api, "beta"))["id"]
    alpha_runs = [await queue_run(api, alpha) for _ in range(3)]
    beta_runs = [await queue_run(api, beta) for _ in range(51)]
    sql(db_url, "UPDATE executions SET status = 'failed', outcome = 'failed' WHERE id = %s",
        (alpha_runs[0],))
    sql(db_url, "UPDATE executions SET created_at = now() - interval '2 hours' WHERE id = %s",
        (beta_runs[0],))
    schedule = await create_schedule(api, alpha, "0 9 * * *")
    manual = (await api.post(f"/v1/schedules/{schedule['id']}/run-now")).json()["id"]

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await open_viewer(page, server, tokens["acme"])
        rows = page.locator("#runs tbody tr")
        await expect(rows).to_have_count(50)  # one page of 55

        await page.select_option("#filters select[name=status]", "failed")
        await expect(page).to_have_url(re.compile(r"#/\?status=failed$"))
        await expect(rows).to_have_count(1)
        await expect(page.locator(f'tr[data-run="{alpha_runs[0]}"]')).to_have_count(1)

        await page.click("#filters .clear")
        await page.select_option("#filters select[name=agent]", label="alpha")
        await expect(rows).to_have_count(4)
        await page.select_option("#filters select[name=schedule]", schedule["id"])
        await expect(rows).to_have_count(1)
        await expect(page.locator(f'tr[data-run="{manual}"] td.status')).to_have_text("queued")

        await page.evaluate("h => { location.hash = h; }", f"#/?agent={beta}")
        await expect(rows).to_have_count(50)
        first_page = await rows.evaluate_all("rows => rows.map(r => r.dataset.run)")
        await page.click(".pager button.older")
        await expect(rows).to_have_count(1)
        await expect(page.locator(f'tr[data-run="{beta_runs[0]}"]')).to_have_count(1)
        await expect(page.locator(".pager button.older")).to_have_count(0)
        await page.click(".pager button.newer")
        await expect(rows).to_have_count(50)
        assert await rows.evaluate_all("rows => rows.map(r => r.dataset.run)") == first_page
        assert set(first_page) == set(beta_runs[1:])

        await page.select_option("#filters select[name=since]", "1h")
        await expect(page).to_have_url(re.compile(f"#/\\?agent={beta}&since=1h$"))
        await expect(rows).to_have_count(50)
        await expect(page.locator(".pager button.older")).to_have_count(0)  # the 2-hour-old one
        await expect(page.locator("#filters select[name=agent]")).to_have_value(beta)
        await screenshot(page, "viewer-filters.png")
        await no_violations(page)


async def test_a_choice_made_just_after_clear_filters_is_the_only_filter(
        api, settings, pool, tokens):
    alpha = (await create_agent(api, "alpha"))["id"]

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await open_viewer(page, server, tokens["acme"], "#/?status=failed")
        await expect(page.locator("#filters select[name=agent] option", has_text="alpha")
                     ).to_have_count(1)
        # The click and the choice in one task: the page has not been redrawn for "#/" yet.
        await page.evaluate("""agent => {
            document.querySelector("#filters .clear").click();
            const select = document.querySelector("#filters select[name=agent]");
            select.value = agent;
            select.dispatchEvent(new Event("change"));
        }""", alpha)
        await expect(page).to_have_url(re.compile(f"#/\\?agent={alpha}$"))
        await expect(page.locator("#filters select[name=status]")).to_have_value("")
        await expect(page.locator("#filters select[name=agent]")).to_have_value(alpha)


async def test_a_filter_chosen_before_the_agent_names_arrive_keeps_the_chosen_agent(
        api, settings, pool, tokens):
    alpha = (await create_agent(api, "alpha"))["id"]

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await open_viewer(page, server, tokens["acme"])
        names_may_come = asyncio.Event()

        async def hold_the_names(route):
            await names_may_come.wait()
            await route.continue_()

        await page.route(re.compile(r"/v1/agents\?"), hold_the_names)
        await page.evaluate("h => { location.hash = h; }", f"#/?agent={alpha}")
        await expect(page.locator("#filters select[name=agent]")).to_have_value(alpha)
        await page.select_option("#filters select[name=status]", "failed")
        await expect(page).to_have_url(re.compile(f"#/\\?status=failed&agent={alpha}$"))
        names_may_come.set()
        await expect(page.locator("#filters select[name=agent] option:checked")).to_have_text(
            "alpha")
        await expect(page.locator("#filters select[name=agent] option")).to_have_count(2)


# --- cancel -------------------------------------------------------------------------------------

async def test_cancel_from_the_run_page_asks_first_and_ends_a_waiting_run(
        api, pool, db_url, settings, tokens):
    run_id, journal = await start_by_hand(api, pool)
    await journal.suspend(state={"messages": []}, version=1, approval_id=f"{run_id}:c1",
                          tool_call_id="c1", tool="demo.send_message", arguments={},
                          usage={"input_tokens": 2048, "output_tokens": 96, "model_calls": 2})

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        cancels = []
        page.on("request", lambda r: cancels.append(r.url) if r.url.endswith("/cancel") else None)
        await open_viewer(page, server, tokens["acme"], f"#/runs/{run_id}")
        await expect(page.locator("#run-meta")).to_contain_text(
            "2,048 tokens in, 96 out, 2 model calls")
        await expect(page.locator("#run-status")).to_have_text("waiting for approval")
        button = page.locator("#cancel")

        page.once("dialog", lambda dialog: dialog.dismiss())
        await button.click()
        await expect(button).to_be_enabled()
        assert cancels == []  # "no" sends nothing
        assert (await api.get(f"/v1/runs/{run_id}")).json()["breadcrumb"] == "suspended"

        asked = []

        async def accept(dialog) -> None:
            asked.append(dialog.message)
            await dialog.accept()

        page.once("dialog", accept)
        await page.mouse.move(0, 0)
        await screenshot(page, "viewer-run-cancel.png")
        await button.click()
        await expect(page.locator("#run-status")).to_have_text("cancelled", timeout=10_000)
        await expect(page.locator("#notice")).to_contain_text("cancel requested")
        await expect(page.locator("#cancel")).to_have_count(0)
        assert "Cancel run" in asked[0] and len(cancels) == 1
    assert scalar(db_url, "SELECT status FROM executions WHERE id = %s", (run_id,)) == "cancelled"


# --- the chart ----------------------------------------------------------------------------------

async def test_the_chart_draws_each_minutes_runs_by_outcome(api, pool, db_url, settings, tokens):
    agent = (await create_agent(api, "charted"))["id"]
    runs = [await queue_run(api, agent) for _ in range(5)]
    moved = {}
    for run, (minutes_ago, status, outcome) in zip(runs, [
            (20, "completed", "done"), (20, "completed", "done"), (20, "failed", "failed"),
            (5, "cancelled", "cancelled"), (90, "completed", "done")]):  # the last: too old
        [moved[run]] = sql(db_url, "UPDATE executions SET created_at = now() - make_interval("
                                   "mins => %s), status = %s, outcome = %s WHERE id = %s"
                                   " RETURNING date_trunc('minute', created_at)",
                           (minutes_ago, status, outcome, run))
    twenty, five = utc_text(moved[runs[0]]), utc_text(moved[runs[3]])

    async with serving(create_app(settings, pool=pool)) as server, chromium_page() as page:
        await open_viewer(page, server, tokens["acme"])
        chart = page.locator("#activity-chart")
        await expect(chart.locator("g[data-minute]")).to_have_count(60)
        column = chart.locator(f'g[data-minute="{twenty}"]')
        await expect(column).to_have_attribute("data-total", "3")
        done, failed = (column.locator(f'rect[data-outcome="{o}"]') for o in ("done", "failed"))
        await expect(done).to_have_attribute("data-count", "2")
        await expect(failed).to_have_attribute("data-count", "1")
        later = chart.locator(f'g[data-minute="{five}"]')
        await expect(later.locator("rect.bar")).to_have_count(1)
        await expect(later.locator('rect[data-outcome="cancelled"]')).to_have_attribute(
            "data-count", "1")
        await expect(chart.locator('g[data-total="0"]')).to_have_count(58)
        await expect(page.locator(".legend li")).to_have_text(
            ["done 2", "failed 1", "cancelled 1"])
        await expect(page.locator("#activity-total")).to_have_text(" · 4 runs")
        done_height = float(await done.get_attribute("height"))
        failed_height = float(await failed.get_attribute("height"))
        assert done_height == pytest.approx(2 * failed_height)  # bars in proportion to counts
        await expect(column.locator("title")).to_have_text(
            re.compile(r"^\d\d:\d\d: 2 done, 1 failed$"))
        await page.mouse.move(0, 0)
        await screenshot(page, "viewer-chart.png")
        await no_violations(page)


async def test_every_viewer_script_inserts_text_only(api):
    for name in ("app.js", "tree.js", "chart.js", "runs.js", "schedules.js", "agents.js"):
        response = await api.get(f"/static/{name}", headers={"Authorization": ""})
        assert response.status_code == 200 and "javascript" in response.headers["content-type"]
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in response.text, (name, sink)
