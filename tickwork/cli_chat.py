"""`tickwork chat AGENT -m TEXT` (one message: its answer streamed as the run writes it) and
`tickwork chats` (the tenant's chats). They talk to the HTTP API: the message is posted to the
chat (a new one unless --chat names one), then the message's run is followed live with the run
tail (sse_follow.Follower, which reconnects after a drop) until it ends."""

from __future__ import annotations

import sys
from typing import Optional

import httpx
import typer

from tickwork.cli_resources import (JSON_OPTION, ZONE_OPTION, agent_names, all_items, call,
                                    local_time, out, print_items, resolve_agent, table)
from tickwork.client import ApiClient, err, fail
from tickwork.local_zone import machine_zone
from tickwork.settings import ClientSettings
from tickwork.sse_follow import READ_TIMEOUT_SECONDS, Follower, TailError
from tickwork.terminal_text import json_line, plain_cells, safe


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
    app.command("chats")(list_chats)


def chat(agent: str = typer.Argument(..., metavar="AGENT", help="The agent's name or id."),
         message: str = typer.Option(..., "--message", "-m", metavar="TEXT",
                                     help="What to say to the agent."),
         chat_id: Optional[str] = typer.Option(None, "--chat", metavar="ID",
                                               help="Continue this chat (default: a new one)."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON document with the "
                                      "chat, message and run ids, the run's end and answer.")
         ) -> None:
    """Say one thing to an agent and print its answer as it streams.

    Exit 0 when the run ends done, else 1."""
    if not message.strip():
        fail("--message must not be empty")
    client = ApiClient()
    found = resolve_agent(client, agent)
    if chat_id is None:
        chat_id = call(client, "POST", f"/v1/agents/{found['id']}/chats", json={})["id"]
    posted = call(client, "POST", f"/v1/chats/{chat_id}/messages", json={"text": message})
    streamed: list[str] = []

    def on_event(event: dict) -> None:
        payload = event.get("payload") or {}
        if event.get("type") == "content_delta" and not payload.get("injected") \
                and not as_json:
            streamed.append(payload.get("text") or "")
            sys.stdout.write(safe(payload.get("text") or ""))
            sys.stdout.flush()
        elif event.get("type") == "approval_required":
            err.print(f"waiting for approval {safe(payload.get('approval_id', ''))} "
                      f"({safe(payload.get('tool', ''))}): `tickwork approve ID` or `tickwork "
                      "reject ID`", highlight=False, markup=False)

    settings = ClientSettings()
    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_SECONDS)
    with httpx.Client(base_url=settings.api_url, timeout=timeout,
                      headers={"Authorization": f"Bearer {settings.token}"}) as http:
        try:
            ending = Follower(http, posted["run_id"], on_event).run()
        except TailError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            raise typer.Exit(130)
    run = call(client, "GET", f"/v1/runs/{posted['run_id']}")
    if as_json:
        typer.echo(json_line({"chat_id": chat_id, "message_id": posted["message_id"],
                              "run_id": posted["run_id"], "status": run["status"],
                              "outcome": run["outcome"], "answer": run["answer"]}))
    else:
        if not streamed and run["answer"]:
            sys.stdout.write(safe(run["answer"]))
        sys.stdout.write("\n")
        err.print(f"chat {chat_id}: continue with `tickwork chat {found['name']} --chat "
                  f"{chat_id} -m TEXT`", highlight=False, markup=False)
        if ending.outcome != "done":
            err.print(f"the run ended {ending.status}/{ending.outcome}"
                      f"{': ' + safe(ending.reason) if ending.reason else ''}",
                      highlight=False, markup=False)
    raise typer.Exit(0 if ending.outcome == "done" else 1)


def list_chats(agent: Optional[str] = typer.Option(None, metavar="AGENT",
                                                   help="Only this agent's chats (name or id)."),
               zone: Optional[str] = ZONE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Chats, newest first."""
    client = ApiClient()
    params = {"agent_id": resolve_agent(client, agent)["id"]} if agent else None
    items = all_items(client, "/v1/chats", params)
    if as_json:
        return print_items(items)
    zone, names = zone or machine_zone(), agent_names(client)
    shown = table("id", "agent", "title", "status", "messages", "started")
    for c in items:
        shown.add_row(*plain_cells(c["id"], names.get(c["agent_id"], c["agent_id"]), c["title"],
                                   c["status"], c["message_count"],
                                   local_time(c["created_at"], zone)))
    out.print(shown)
