"""Resource verbs of `tickwork`: agents, schedules, runs, approvals. They talk to the HTTP API.

Every list verb prints a table for people, or with --json exactly one JSON document
`{"items": [...]}` (the API's objects, unchanged) for scripts."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, List, Optional

import typer
import yaml
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from tickwork.scheduler import localtime
from tickwork.client import ApiClient, ApiError, fail
from tickwork.local_zone import machine_zone
from tickwork.tail import tail_run
from tickwork.terminal_text import plain, plain_cells

# Ids must stay whole when output is piped (rich would otherwise squeeze tables to 80 columns).
# markup=False: names and reasons from the API are printed as they are, never as rich markup.
out = Console(width=None if Console().is_terminal else 200, markup=False)
agent_app = typer.Typer(help="Agents: apply YAML definitions, list, remove.", no_args_is_help=True)
schedule_app = typer.Typer(help="Schedules (you type local time; tickwork stores UTC cron).",
                           no_args_is_help=True)

# The API's field names as the user typed them on the command line, for error messages.
FLAGS = {"timeout_minutes": "--timeout", "input": "--input", "cron": "--cron",
         "overlap": "--overlap", "agent_id": "--agent", "schedule_id": "--schedule",
         "status": "--status", "since": "--since", "limit": "--limit", "reason": "--reason"}
# A path's id as the argument the user typed, and the verb that lists valid ones.
IDS = {"run_id": ("RUN_ID", "tickwork runs"),
       "schedule_id": ("SCHEDULE_ID", "tickwork schedule list"),
       "approval_id": ("APPROVAL_ID", "tickwork approvals"),
       "agent_id": ("AGENT", "tickwork agent list"),
       "webhook_id": ("ID", "tickwork webhook list")}
MAX_TIMEOUT_MINUTES = 15
JSON_OPTION = typer.Option(False, "--json", help='Print one JSON document {"items": [...]}.')
ZONE_OPTION = typer.Option(None, metavar="ZONE",
                           help="Time zone to show times in, e.g. Europe/Paris (default: this "
                                "machine's).")


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
        fail(exc.said_to_user(FLAGS, IDS))


def all_items(client: ApiClient, path: str, params: dict | None = None) -> list[dict]:
    try:
        return client.items(path, params)
    except ApiError as exc:
        fail(exc.said_to_user(FLAGS, IDS))


def print_items(items: list[dict]) -> None:
    """The one JSON document of a list verb, on stdout, nothing else."""
    typer.echo(json.dumps({"items": items}, ensure_ascii=False))


def table(*names: str) -> Table:
    """Id columns never wrap or get cut (people copy them from here); other cells fold onto
    more lines rather than end in an ellipsis."""
    return Table(*[Column(name, no_wrap=True) if name.endswith("id") else
                   Column(name, overflow="fold") for name in names])


def agent_names(client: ApiClient) -> dict[str, str]:
    return {a["id"]: a["name"] for a in all_items(client, "/v1/agents")}


def check_timeout(minutes: int) -> int:
    if not 1 <= minutes <= MAX_TIMEOUT_MINUTES:
        fail(f"--timeout must be between 1 and {MAX_TIMEOUT_MINUTES} minutes (a run may take "
             f"at most {MAX_TIMEOUT_MINUTES}), got {minutes}")
    return minutes


def resolve_agent(client: ApiClient, name_or_id: str) -> dict:
    found = call(client, "GET", "/v1/agents", params={"name": name_or_id})["items"]
    if found:
        return found[0]
    try:
        return client.call("GET", f"/v1/agents/{name_or_id}")
    except ApiError:
        fail(f"no agent named or with id {name_or_id!r}; list agents with `tickwork agent list`")


@agent_app.command("apply")
def apply_agents(files: List[Path] = typer.Argument(..., metavar="FILE...", exists=True,
                                                    dir_okay=False,
                                                    help="YAML files, one agent each.")) -> None:
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
        try:
            if existing:
                agent = client.call("PUT", f"/v1/agents/{existing[0]['id']}", json=definition)
                verb = "updated"
            else:
                agent = client.call("POST", "/v1/agents", json=definition)
                verb = "created"
        except ApiError as exc:
            # A field here is a key of the YAML file, not a flag: name the file and the key.
            fail(f"{path}: {exc.said_to_user()}")
        out.print(Text.assemble(f"{verb} agent ", plain(agent["name"]), f" ({agent['id']})"),
                  highlight=False)


@agent_app.command("list")
def list_agents(as_json: bool = JSON_OPTION) -> None:
    """Agents: name, status, tools, the tools that run without a person, its own limits."""
    items = all_items(ApiClient(), "/v1/agents")
    if as_json:
        return print_items(items)
    shown = table("id", "name", "status", "tools", "auto-approved", "limits")
    for agent in items:
        shown.add_row(*plain_cells(agent["id"], agent["name"], agent["status"],
                                   ", ".join(agent["tools"]) or "-",
                                   ", ".join(agent.get("auto_approve") or []) or "-",
                                   agent_limits(agent)))
    out.print(shown)


def agent_limits(agent: dict) -> str:
    """An agent's own settings, each over the deployment's default; "defaults" when none."""
    shown = [f"model {agent['model']}" if agent.get("model") is not None else "",
             f"{agent['timeout_minutes']} min timeout"
             if agent.get("timeout_minutes") is not None else "",
             f"{agent['max_tool_calls']} tool calls"
             if agent.get("max_tool_calls") is not None else "",
             f"{agent['token_budget']:,} tokens" if agent.get("token_budget") is not None else "",
             f"{agent['max_concurrent_runs']} at once"
             if agent.get("max_concurrent_runs") is not None else ""]
    return ", ".join(part for part in shown if part) or "defaults"


AGENT_ARGUMENT = typer.Argument(..., metavar="AGENT", help="The agent's name (or id).")
SCHEDULE_ARGUMENT = typer.Argument(..., metavar="SCHEDULE_ID",
                                   help="The schedule's id (`tickwork schedule list`).")
RUN_ARGUMENT = typer.Argument(..., metavar="RUN_ID", help="The run's id (`tickwork runs`).")
APPROVAL_ARGUMENT = typer.Argument(..., metavar="APPROVAL_ID",
                                   help="The approval's id (`tickwork approvals`).")
REASON_OPTION = typer.Option(None, metavar="TEXT", help="Why; kept with the decision.")


@agent_app.command("rm")
def remove_agent(agent: str = AGENT_ARGUMENT) -> None:
    """Delete an agent (by name or id); its schedules go with it."""
    client = ApiClient()
    found = resolve_agent(client, agent)
    call(client, "DELETE", f"/v1/agents/{found['id']}")
    # The name is the tenant's text: shown inert (tickwork/terminal_text.py), never as markup.
    out.print(Text.assemble("deleted agent ", plain(found["name"]), " and its schedules"),
              highlight=False)


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
    agent: str = AGENT_ARGUMENT,
    daily: Optional[str] = typer.Option(None, metavar="HH:MM",
                                        help="Every day at HH:MM local time."),
    weekly: Optional[str] = typer.Option(None, metavar="DAYS@HH:MM",
                                         help="Weekdays at a local time: mon,fri@23:30."),
    every: Optional[str] = typer.Option(None, metavar="Nh",
                                        help="Every N hours (1,2,3,4,6,8,12): 6h."),
    cron: Optional[str] = typer.Option(None, metavar="EXPR",
                                       help="A 5-field cron, taken as UTC."),
    timeout: int = typer.Option(5, metavar="MINUTES", help="Minutes a run may take (1-15)."),
    overlap: str = typer.Option("skip", metavar="skip|allow",
                                help="skip: skip (and record) a fire while the last run is "
                                     "unfinished; allow: run anyway."),
    input: Optional[str] = typer.Option(None, metavar="JSON",
                                        help="JSON object handed to every run."),
    zone: Optional[str] = typer.Option(None, metavar="ZONE",
                                       help="Your time zone (default: this machine's)."),
) -> None:
    """Add a schedule; local times are converted to a UTC cron here, on your machine."""
    zone = zone or machine_zone()
    expression, display, observes_dst = convert(daily, weekly, every, cron, zone)
    check_timeout(timeout)
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
def list_schedules(zone: Optional[str] = ZONE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Schedules with their agent, last and next run, shown in your local time."""
    client = ApiClient()
    items = all_items(client, "/v1/schedules")
    if as_json:
        return print_items(items)
    zone, names = zone or machine_zone(), agent_names(client)
    shown = table("id", "agent", "when", "cron (UTC)", "status", "last run", "next run")
    for s in items:
        shown.add_row(*plain_cells(s["id"], names.get(s["agent_id"], s["agent_id"]),
                                   describe(s, zone), s["cron"], s["status"],
                                   local_time(s["last_run"], zone),
                                   local_time(s["next_run"], zone)))
    out.print(shown)


@schedule_app.command("history")
def schedule_history(schedule_id: str = SCHEDULE_ARGUMENT,
                     limit: int = typer.Option(100, metavar="N", help="Newest N entries (1-200)."),
                     zone: Optional[str] = ZONE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """What happened to each fire, newest first: its run, or why it got none (coalesced after
    downtime, skipped while the last run was unfinished, agent inactive)."""
    page = call(ApiClient(), "GET", f"/v1/schedules/{schedule_id}/history",
                params={"limit": limit})
    if as_json:
        return print_items(page["items"])
    zone = zone or machine_zone()
    shown = table("fire (scheduled for)", "what", "reason", "run id", "status", "outcome")
    for h in page["items"]:
        ran = h["kind"] == "execution"
        shown.add_row(*plain_cells(
            local_time(h["scheduled_for"], zone),
            (f"run, attempt {h['attempt']}" if ran else "no run of its own"),
            _history_reason(h), h["execution_id"] or "-",
            run_status_text(h) if ran else "-", h["outcome"] or "-"))
    out.print(shown)


def _history_reason(entry: dict) -> str:
    if entry["kind"] == "execution":
        fires = entry.get("fires") or 1
        return f"{entry['reason']}" + (f" (stands for {fires} fires)" if fires > 1 else "")
    why = {"coalesced": "coalesced: missed while down, covered by a later fire's run",
           "overlap": "skipped: the previous run was still unfinished",
           "agent_inactive": "skipped: the agent is paused or a draft"}
    return why.get(entry["reason"], f"skipped: {entry['reason']}")


def _set_status(schedule_id: str, status: str) -> None:
    updated = call(ApiClient(), "PATCH", f"/v1/schedules/{schedule_id}", json={"status": status})
    out.print(f"schedule {updated['id']} is {updated['status']}; next run "
              f"{local_time(updated['next_run'], machine_zone())}", highlight=False)


@schedule_app.command("pause")
def pause_schedule(schedule_id: str = SCHEDULE_ARGUMENT) -> None:
    """Pause: fires are not run (nor recorded) until it is resumed."""
    _set_status(schedule_id, "paused")


@schedule_app.command("resume")
def resume_schedule(schedule_id: str = SCHEDULE_ARGUMENT) -> None:
    """Resume from the next fire; fires missed while paused are not replayed."""
    _set_status(schedule_id, "active")


@schedule_app.command("rm")
def remove_schedule(schedule_id: str = SCHEDULE_ARGUMENT) -> None:
    """Delete a schedule; its runs so far are kept."""
    call(ApiClient(), "DELETE", f"/v1/schedules/{schedule_id}")
    out.print(f"deleted schedule {schedule_id}", highlight=False)


@schedule_app.command("run-now")
def run_schedule_now(schedule_id: str = SCHEDULE_ARGUMENT) -> None:
    """Start a run of the schedule now; the schedule itself is untouched."""
    run = call(ApiClient(), "POST", f"/v1/schedules/{schedule_id}/run-now")
    out.print(f"queued run {run['id']}", highlight=False)


def run_agent(agent: str = AGENT_ARGUMENT,
              input: Optional[str] = typer.Option(None, metavar="JSON",
                                                  help="JSON object handed to the run."),
              message: Optional[str] = typer.Option(
                  None, "--message", "-m", metavar="TEXT",
                  help="Plain text for the agent (the run's input.message)."),
              timeout: int = typer.Option(5, metavar="MINUTES",
                                          help="Minutes the run may take (1-15).")) -> None:
    """Start a run of an agent now."""
    check_timeout(timeout)
    run_input = parse_input(input)
    if message is not None:
        if not message.strip():
            fail("--message must not be empty")
        if "message" in run_input:
            fail("give the message once: --message or input.message in --input, not both")
        run_input["message"] = message
    client = ApiClient()
    found = resolve_agent(client, agent)
    run = call(client, "POST", f"/v1/agents/{found['id']}/runs",
               json={"input": run_input, "timeout_minutes": timeout})
    out.print(f"queued run {run['id']}", highlight=False)


def since_time(text: str) -> str:
    """'30m', '6h', '2d' mean that long ago; anything else is passed on as a UTC time."""
    from datetime import timedelta

    units = {"m": "minutes", "h": "hours", "d": "days"}
    if len(text) > 1 and text[-1] in units and text[:-1].isdigit():
        moment = datetime.now(timezone.utc) - timedelta(**{units[text[-1]]: int(text[:-1])})
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return text


def list_runs(agent: Optional[str] = typer.Option(None, metavar="AGENT",
                                                 help="Only this agent's runs (name or id)."),
              schedule: Optional[str] = typer.Option(None, metavar="SCHEDULE_ID",
                                                     help="Only this schedule's runs."),
              status: Optional[str] = typer.Option(None, metavar="STATUS",
                                                   help="queued, running, waiting (for a "
                                                        "person), completed, failed or "
                                                        "cancelled."),
              limit: int = typer.Option(50, metavar="N", help="Newest N runs (1-200)."),
              since: Optional[str] = typer.Option(None, metavar="WHEN",
                                                  help="Only runs created since: 30m, 6h, 2d, or "
                                                       "an RFC 3339 UTC time ending in Z."),
              zone: Optional[str] = ZONE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Recent runs, newest first."""
    client = ApiClient()
    params = {"limit": limit, "schedule_id": schedule, "status": status,
              "since": since_time(since) if since else None,
              "agent_id": resolve_agent(client, agent)["id"] if agent else None}
    page = call(client, "GET", "/v1/runs", params={k: v for k, v in params.items() if v})
    if as_json:
        return print_items(page["items"])
    zone, names = zone or machine_zone(), agent_names(client)
    shown = table("id", "agent", "trigger", "status", "outcome", "tokens in/out",
                  "scheduled for", "attempt")
    for r in page["items"]:
        shown.add_row(*plain_cells(r["id"], names.get(r["agent_id"], r["agent_id"]),
                                   f"{r['trigger_type']}/{r['trigger_source']}",
                                   run_status_text(r), r["outcome"] or "-",
                                   tokens_text(r.get("usage")),
                                   local_time(r["scheduled_for"], zone), r["attempt"]))
    out.print(shown)


def run_status_text(run: dict) -> str:
    """A run waiting for a person has the status 'waiting' (in lists and in a schedule's
    history); people read what it waits for. A run parked through a model outage is running,
    and says why nothing moves."""
    if run["status"] == "waiting":
        return "waiting for approval"
    if run["status"] == "running" and run.get("breadcrumb") == "parked":
        return "running (model unavailable, retrying)"
    return run["status"]


def tokens_text(usage: dict | None) -> str:
    if not usage or not usage.get("model_calls"):
        return "-"
    return f"{usage['input_tokens']:,} / {usage['output_tokens']:,}"


def list_approvals(status: str = typer.Option(
        "pending", metavar="STATUS", help="pending, approved, rejected, cancelled or expired."),
        zone: Optional[str] = ZONE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Tool calls waiting for a person (or already decided)."""
    items = all_items(ApiClient(), "/v1/approvals", {"status": status})
    if as_json:
        return print_items(items)
    zone = zone or machine_zone()
    shown = table("id", "tool", "arguments (redacted)", "status", "asked")
    for a in items:
        # Arguments are the model's text: plain cells, never markup or terminal controls.
        arguments = json.dumps(a["arguments"], ensure_ascii=False)[:80]
        shown.add_row(*plain_cells(a["id"], a["tool"], arguments, a["status"],
                                   local_time(a.get("created_at"), zone)))
    out.print(shown)


def _decide(approval_id: str, verb: str, reason: str | None) -> None:
    body = {"reason": reason} if reason else None
    decided = call(ApiClient(), "POST", f"/v1/approvals/{approval_id}/{verb}", json=body)
    out.print(f"approval {decided['id']} is {decided['status']}; the run resumes on a worker",
              highlight=False)


def approve(approval_id: str = APPROVAL_ARGUMENT, reason: Optional[str] = REASON_OPTION) -> None:
    """Let a paused tool call run."""
    _decide(approval_id, "approve", reason)


def reject(approval_id: str = APPROVAL_ARGUMENT, reason: Optional[str] = REASON_OPTION) -> None:
    """Refuse a paused tool call; the run goes on without it."""
    _decide(approval_id, "reject", reason)


def cancel(run_id: str = RUN_ARGUMENT) -> None:
    """Cancel a run: at once if queued or waiting for approval, at its next turn if running."""
    run = call(ApiClient(), "POST", f"/v1/runs/{run_id}/cancel")
    state = "cancelled" if run["status"] == "cancelled" else "asked to stop at its next turn"
    out.print(f"run {run['id']} {state}", highlight=False)
