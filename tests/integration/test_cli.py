"""The `tickwork` command end to end: `up` as a real process, the CLI talking to its API."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.integration.drivers import ROOT
from tests.integration.workers import until

TICKWORK = [sys.executable, "-m", "tickwork.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "tickwork up exited early"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # polling a process we do not control; no event to wait on
    raise AssertionError("tickwork up did not become healthy")


class Up:
    """`tickwork up` in a subprocess; stdout goes to a file we read the token from."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.process = subprocess.Popen([*TICKWORK, "up", "--port", str(self.port)], cwd=ROOT,
                                        env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_healthy(self.url, self.process)
        self.token = re.search(r"TICKWORK_TOKEN=(tw_\S+)", Path(self.log.name).read_text()).group(1)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "TICKWORK_API_URL": self.url, "TICKWORK_TOKEN": self.token,
               "COLUMNS": "200"}
        done = subprocess.run([*TICKWORK, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        assert self.process.wait(timeout=30) == 0, Path(self.log.name).read_text()


@pytest.fixture
def up(db_url, tmp_path):
    # Its own data folder: `up` keeps its local admin token there.
    env = {**os.environ, "TICKWORK_DATABASE_URL": db_url, "TICKWORK_DATA_DIR": str(tmp_path)}
    running = Up(env)
    yield running
    running.stop()


async def test_the_walkthrough_works_through_the_cli(up, db_url, tmp_path):
    agent_file = tmp_path / "reporter.yaml"
    agent_file.write_text("name: reporter\ninstructions: Summarise.\n"
                          "tools: [demo.list_records, demo.send_message]\n")
    assert "created agent reporter" in up.cli("agent", "apply", str(agent_file)).stdout
    assert "updated agent reporter" in up.cli("agent", "apply", str(agent_file)).stdout
    added = up.cli("schedule", "add", "reporter", "--weekly", "mon@23:30",
                   "--zone", "America/New_York").stdout
    assert "daylight saving" in added
    schedule_id = re.search(r"schedule ([0-9a-f-]{36})", added).group(1)
    listed = up.cli("schedule", "list", "--zone", "America/New_York").stdout
    assert schedule_id in listed and "30 4 * * 2" in listed
    run_id = re.search(r"queued run ([0-9a-f-]{36})", up.cli("schedule", "run-now", schedule_id).stdout).group(1)
    await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s", (run_id,))
    assert run_id in up.cli("runs").stdout  # `up` runs a worker too: the run finished
    assert "is paused" in up.cli("schedule", "pause", schedule_id).stdout
    assert "is active" in up.cli("schedule", "resume", schedule_id).stdout
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT cron, display, trigger_source FROM schedules s JOIN executions e"
                           " ON e.schedule_id = s.id WHERE e.id = %s", (run_id,)).fetchone()
    assert row == ("30 4 * * 2", {"frequency": "weekly", "time_of_day": "23:30",
                                  "days_of_week": ["mon"]}, "manual")


def test_the_cli_refuses_bad_input_with_a_sentence_and_changes_nothing(up, db_url, tmp_path):
    agent_file = tmp_path / "a.yaml"
    agent_file.write_text("name: a\ntools: [demo.nope]\n")
    refused = up.cli("agent", "apply", str(agent_file), check=False)
    assert refused.returncode == 1 and "unknown tool keys: demo.nope" in refused.stderr
    refused = up.cli("schedule", "add", "a", "--every", "5h", check=False)
    assert refused.returncode == 1 and "divide a day evenly" in refused.stderr
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM agents").fetchone()[0] == 0


def test_token_create_prints_the_token_alone_on_its_last_line(db_url):
    env = {**os.environ, "TICKWORK_DATABASE_URL": db_url}
    done = subprocess.run([*TICKWORK, "token", "create", "--tenant", "acme"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"tw_[A-Za-z0-9_-]{43}", token)
    with psycopg.connect(db_url) as conn:
        stored = conn.execute("SELECT token_hash FROM api_tokens").fetchone()[0]
    assert token.encode() not in bytes(stored)


def test_up_without_a_database_url_runs_on_an_embedded_postgres_and_reuses_its_data():
    data_dir = Path(tempfile.mkdtemp(prefix="tickwork-up-", dir="/tmp"))
    data_dir.chmod(0o755)  # our own new folder: the unprivileged server user must traverse it
    env = {k: v for k, v in os.environ.items() if k != "TICKWORK_DATABASE_URL"}
    env["TICKWORK_DATA_DIR"] = str(data_dir)
    try:
        first = Up(env)
        created = httpx.post(f"{first.url}/v1/agents", json={"name": "kept"},
                             headers={"Authorization": f"Bearer {first.token}"})
        assert created.status_code == 201
        first.stop()
        second = Up(env)  # the same data, and the same local admin token (kept, not re-minted)
        listed = httpx.get(f"{second.url}/v1/agents",
                           headers={"Authorization": f"Bearer {second.token}"}).json()
        second.stop()
        assert [agent["name"] for agent in listed["items"]] == ["kept"]
        assert second.token == first.token
    finally:
        from tickwork.embedded import start_embedded

        start_embedded(data_dir).stop()  # whatever happened above, leave no server behind
        shutil.rmtree(data_dir, ignore_errors=True)


def walkthrough_script() -> str:
    """The README's walkthrough as written, with the ids a reader copies filled in from the
    CLI's own --json output, and a bounded wait where a reader waits for the worker."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Walkthrough", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the walkthrough's two shell blocks"
    first = "\n".join(line for line in blocks[0].splitlines()
                      if not line.startswith("export TICKWORK_API_URL"))
    pick = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"items\"][0][\"id\"])'"
    first = first.replace("SCHEDULE_ID", f"$(tickwork schedule list --json | {pick})")
    second = blocks[1].replace("tickwork runs  ", "wait_for_approval; tickwork runs  ", 1)
    second = second.replace("APPROVAL_ID", f"$(tickwork approvals --json | {pick})")
    second = second.replace("RUN_ID", f"$(tickwork runs --json | {pick})")
    prelude = f"""set -euo pipefail
tickwork() {{ {sys.executable} -m tickwork.cli "$@"; }}
wait_for_approval() {{  # the worker pauses the run for a person; a reader waits for it too
  for _ in $(seq 300); do
    [ "$(tickwork approvals --json)" != '{{"items": []}}' ] && return 0; sleep 0.2
  done; return 1
}}
"""
    return prelude + first + "\n" + second


def test_the_readme_walkthrough_runs_as_written_and_reaches_an_approval(up, db_url, tmp_path):
    env = {**os.environ, "TICKWORK_API_URL": up.url, "TICKWORK_TOKEN": up.token,
           "COLUMNS": "200"}
    done = subprocess.run(["bash", "-c", walkthrough_script()], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "waiting for approval" in done.stdout
    assert "is approved; the run resumes on a worker" in done.stdout
    assert "Sent the summary to ops." in done.stdout  # the tail saw the run end done
    with psycopg.connect(db_url) as conn:
        sent = conn.execute("SELECT recipient, text FROM demo_outbox").fetchall()
        decided = conn.execute("SELECT tool, status FROM approvals").fetchall()
    assert sent == [("ops", "Three new records.")]  # sent once, after the approval
    assert decided == [("demo.send_message", "approved")]
