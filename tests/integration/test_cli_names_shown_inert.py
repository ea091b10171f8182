"""An agent's name is the tenant's text: `tickwork agent apply` and `agent rm` print it with its
control characters made visible and inert (tickwork/terminal_text.py), never as escape
sequences a terminal obeys nor as rich markup (issue 28, S7 item 9)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from tests.integration.drivers import ROOT

NAME = "ops\x1b]0;owned\x07\x1b[2J\x1b[1A\r[bold]approved[/bold]"


async def cli(live_api, *args: str) -> str:
    """The CLI as a real process against the served API (not blocking the API's loop)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickwork.cli", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "TICKWORK_API_URL": live_api["url"],
             "TICKWORK_TOKEN": live_api["tokens"]["acme"], "COLUMNS": "200"})
    out, _ = await process.communicate()
    assert process.returncode == 0, out
    return out.decode()


def assert_inert(shown: str) -> None:
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown, repr(shown)
    assert "␛]0;owned␇␛[2J␛[1A␍[bold]approved[/bold]" in shown, repr(shown)


async def test_agent_apply_and_rm_show_an_agents_name_inert(live_api, tmp_path):
    definition = tmp_path / "agent.yaml"
    definition.write_text(json.dumps({"name": NAME, "instructions": "Say hello."}))
    assert_inert(await cli(live_api, "agent", "apply", str(definition)))
    shown = await cli(live_api, "agent", "rm", NAME)
    assert_inert(shown)
    assert shown.startswith("deleted agent ")
