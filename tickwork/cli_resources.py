"""Resource verbs of `tickwork`: agents, schedules, runs. They talk to the HTTP API."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, List, Optional

import typer
import yaml
from rich.console import Console
from rich.table import Table

from scheduler import localtime
from tickwork.client import ApiClient, ApiError, fail
from tickwork.local_zone import machine_zone
from tickwork.tail import tail_run
from tickwork.terminal_text import plain_cells

# Ids must stay whole when output is piped (rich would otherwise squeeze tables to 80 columns).
# markup=False: names and reasons from the API are printed as they are, never as rich markup.
out = Console(width=None if Console().is_terminal else 200, markup=False)
agent_app = typer.Typer(help="Agents: apply YAML definitions, list, remove.", no_args_is_help=True)
schedule_app = typer.Typer(help="Schedules (you type local time; tickwork stores UTC cron).",
                           no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")
    app.add_typer(schedule_app, name="schedule")
    app.command("run")(run_agent)
    app.command("runs")(list_runs)
    app.command("approvals")(list_approvals)
    app.command("approve")(approve)
    app.command("reject")(reject)
    app.command("cancel")(cancel)
    app.command("tail")(tail_run)


def call(client: ApiClient, method: str, path: str, **kwargs: Any) -> Any:
    try:
        return client.call(method, path, **kwargs)
    except ApiError as exc:
        fail(exc.message)


def resolve_agent(client: ApiClient, name_or_id: str) -> dict:
    found = call(client, "GET", "/v1/agents", params={"name": name_or_id})["items"]
    if found:
        return found[0]
    try:
        return client.call("GET", f"/v1/agents/{name_or_id}")
    except ApiError:
        fail(f"no agent named or with id {name_or_id!r}; list agents with `tickwork agent list`")


@agent_app.command("apply")
def apply_agents(files: List[Path] = typer.Argument(..., exists=True, dir_okay=False)) -> None:
    """Create or update agents from YAML files (matched by name)."""
    client = ApiClient()
    for path in files:
        try:
            definition = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            fail(f"{path} is not valid YAML: {exc}")
        if not isinstance(definition, dict) or "name" not in definition:
            fail(f"{path} must be a mapping with at least a 'name' key")
        existing = call(client, "GET", "/v1/agents", params={"name": definition["name"]})["items"]
        if existing:
            agent = call(client, "PUT", f"/v1/agents/{existing[0]['id']}", json=definition)
            out.print(f"updated agent {agent['name']} ({agent['id']})", highlight=False)
        else:
            agent = call(client, "POST", "/v1/agents", json=definition)
            out.print(f"created agent {agent['name']} ({agent['id']})", highlight=False)


@agent_app.command("list")
def list_agents() -> None:
    table = Table("id", "name", "status", "tools")
    for agent in ApiClient().items("/v1/agents"):
        table.add_row(*plain_cells(agent["id"], agent["name"], agent["status"],
                                   ", ".join(agent["tools"])))
    out.print(table)


@agent_app.command("rm")
def remove_agent(agent: str) -> None:
    """Delete an agent (by name or id); its schedules go with it."""
    client = ApiClient()
    found = resolve_agent(client, agent)
    call(client, "DELETE", f"/v1/agents/{found['id']}")
    out.print(f"deleted agent {found['name']} and its schedules", highlight=False)


def convert(daily: str | None, weekly: str | None, every: str | None, cron: str | None,
            zone: str) -> tuple[str, dict, bool]:
    chosen = [v for v in (daily, weekly, every, cron) if v is not None]
    if len(chosen) != 1:
        fail("give exactly one of --daily HH:MM, --weekly mon,fri@HH:MM, --every Nh, --cron EXPR")
    if cron is not None:
        return cron, {"frequency": "cron"}, False
    now = datetime.now(timezone.utc)
    try:
        if daily is not None:
            result = localtime.daily(daily, zone, now)
        elif weekly is not None:
            result = localtime.weekly(weekly, zone, now)
        else:
            result = localtime.every_hours(every, zone, now)
    except localtime.LocalTimeError as exc:
        fail(str(exc))
    return result.cron, result.display.as_dict(), result.observes_dst


@schedule_app.command("add")
def add_schedule(
    agent: str,
    daily: Optional[str] = typer.Option(None, help="Every day at HH:MM local time."),
    weekly: Optional[str] = typer.Option(None, help="Weekdays at a local time: mon,fri@23:30."),
    every: Optional[str] = typer.Option(None, help="Every N hours (1,2,3,4,6,8,12): 6h."),
    cron: Optional[str] = typer.Option(None, help="A 5-field cron, taken as UTC."),
    timeout: int = typer.Option(5, help="Minutes a run may take (1-15)."),
    overlap: str = typer.Option("skip", help="skip: skip a fire while the last run is unfinished."),
    input: Optional[str] = typer.Option(None, help="JSON object handed to every run."),
    zone: Optional[str] = typer.Option(None, help="Your time zone (default: this machine's)."),
) -> None:
    """Add a schedule; local times are converted to a UTC cron here, on your machine."""
    zone = zone or machine_zone()
    expression, display, observes_dst = convert(daily, weekly, every, cron, zone)
    client = ApiClient()
    body = {"agent_id": resolve_agent(client, agent)["id"], "cron": expression,
            "timeout_minutes": timeout, "overlap": overlap, "display": display,
            "input": parse_input(input)}
    created = call(client, "POST", "/v1/schedules", json=body)
    out.print(f"schedule {created['id']}: {describe(created, zone)}; next run "
              f"{local_time(created['next_run'], zone)}", highlight=False)
    if observes_dst and cron is None:
        out.print(f"note: {zone} observes daylight saving time; schedules are stored in UTC and "
                  "do not follow it, so this one will shift by an hour at the change.")


def parse_input(text: str | None) -> dict:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        fail(f"--input must be a JSON object: {exc}")
    if not isinstance(value, dict):
        fail("--input must be a JSON object, e.g. '{\"topic\": \"sales\"}'")
    return value


def describe(schedule: dict, zone: str) -> str:
    return localtime.describe(schedule["cron"], schedule.get("display"), zone,
                              datetime.now(timezone.utc))


def local_time(text: str | None, zone: str) -> str:
    if not text:
        return "-"
    from zoneinfo import ZoneInfo

    moment = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
    return moment.strftime("%Y-%m-%d %H:%M %Z")


@schedule_app.command("list")
def list_schedules(zone: Optional[str] = typer.Option(None)) -> None:
    """Schedules with their last and next run, shown in your local time."""
    zone = zone or machine_zone()
    table = Table("id", "agent", "when", "cron (UTC)", "status", "last run", "next run")
    for s in ApiClient().items("/v1/schedules"):
        table.add_row(*plain_cells(s["id"], s["agent_id"], describe(s, zone), s["cron"],
                                   s["status"], local_time(s["last_run"], zone),
                                   local_time(s["next_run"], zone)))
    out.print(table)


def _set_status(schedule_id: str, status: str) -> None:
    updated = call(ApiClient(), "PATCH", f"/v1/schedules/{schedule_id}", json={"status": status})
    out.print(f"schedule {updated['id']} is {updated['status']}; next run {updated['next_run']}",
              highlight=False)


@schedule_app.command("pause")
def pause_schedule(schedule_id: str) -> None:
    _set_status(schedule_id, "paused")


@schedule_app.command("resume")
def resume_schedule(schedule_id: str) -> None:
    """Resume from the next fire; fires missed while paused are not replayed."""
    _set_status(schedule_id, "active")


@schedule_app.command("rm")
def remove_schedule(schedule_id: str) -> None:
    call(ApiClient(), "DELETE", f"/v1/schedules/{schedule_id}")
    out.print(f"deleted schedule {schedule_id}", highlight=False)


@schedule_app.command("run-now")
def run_schedule_now(schedule_id: str) -> None:
    """Start a run of the schedule now; the schedule itself is untouched."""
    run = call(ApiClient(), "POST", f"/v1/schedules/{schedule_id}/run-now")
    out.print(f"queued run {run['id']}", highlight=False)


def run_agent(agent: str, input: Optional[str] = typer.Option(None, help="JSON object."),
              timeout: int = typer.Option(5, help="Minutes the run may take (1-15).")) -> None:
    """Start a run of an agent now."""
    client = ApiClient()
    found = resolve_agent(client, agent)
    run = call(client, "POST", f"/v1/agents/{found['id']}/runs",
               json={"input": parse_input(input), "timeout_minutes": timeout})
    out.print(f"queued run {run['id']}", highlight=False)


def since_time(text: str) -> str:
    """'30m', '6h', '2d' mean that long ago; anything else is passed on as a UTC time."""
    from datetime import timedelta

    units = {"m": "minutes", "h": "hours", "d": "days"}
    if len(text) > 1 and text[-1] in units and text[:-1].isdigit():
        moment = datetime.now(timezone.utc) - timedelta(**{units[text[-1]]: int(text[:-1])})
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return text


def list_runs(agent: Optional[str] = None, schedule: Optional[str] = None,
              status: Optional[str] = None, limit: int = 50,
              since: Optional[str] = typer.Option(None, help="Only runs created since: 30m, 6h, "
                                                  "2d, or an RFC 3339 UTC time ending in Z.")) -> None:
    """Recent runs, newest first."""
    client = ApiClient()
    params = {"limit": limit, "schedule_id": schedule, "status": status,
              "since": since_time(since) if since else None,
              "agent_id": resolve_agent(client, agent)["id"] if agent else None}
    page = call(client, "GET", "/v1/runs", params={k: v for k, v in params.items() if v})
    table = Table("id", "trigger", "status", "outcome", "tokens in/out", "scheduled for",
                  "attempt")
    for r in page["items"]:
        table.add_row(*plain_cells(r["id"], f"{r['trigger_type']}/{r['trigger_source']}",
                                   run_status_text(r), r["outcome"] or "-",
                                   tokens_text(r.get("usage")), r["scheduled_for"], r["attempt"]))
    out.print(table)


def run_status_text(run: dict) -> str:
    """A run suspended for a person is stored as completed with the breadcrumb 'suspended';
    people read it as what it is."""
    if run["status"] == "completed" and run.get("breadcrumb") == "suspended":
        return "waiting for approval"
    return run["status"]


def tokens_text(usage: dict | None) -> str:
    if not usage or not usage.get("model_calls"):
        return "-"
    return f"{usage['input_tokens']:,} / {usage['output_tokens']:,}"


def list_approvals(status: str = typer.Option(
        "pending", help="pending, approved, rejected or cancelled.")) -> None:
    """Tool calls waiting for a person (or already decided)."""
    table = Table("id", "tool", "arguments", "status")
    for a in ApiClient().items("/v1/approvals", {"status": status}):
        # Arguments are the model's text: plain cells, never markup or terminal controls.
        shown = json.dumps(a["arguments"], ensure_ascii=False)[:80]
        table.add_row(*plain_cells(a["id"], a["tool"], shown, a["status"]))
    out.print(table)


def _decide(approval_id: str, verb: str, reason: str | None) -> None:
    body = {"reason": reason} if reason else None
    decided = call(ApiClient(), "POST", f"/v1/approvals/{approval_id}/{verb}", json=body)
    out.print(f"approval {decided['id']} is {decided['status']}; the run resumes on a worker",
              highlight=False)


def approve(approval_id: str, reason: Optional[str] = typer.Option(None)) -> None:
    """Let a paused tool call run."""
    _decide(approval_id, "approve", reason)


def reject(approval_id: str, reason: Optional[str] = typer.Option(None)) -> None:
    """Refuse a paused tool call; the run goes on without it."""
    _decide(approval_id, "reject", reason)


def cancel(run_id: str) -> None:
    """Cancel a run: at once if queued or waiting for approval, at its next turn if running."""
    run = call(ApiClient(), "POST", f"/v1/runs/{run_id}/cancel")
    state = "cancelled" if run["status"] == "cancelled" else "asked to stop at its next turn"
    out.print(f"run {run['id']} {state}", highlight=False)
