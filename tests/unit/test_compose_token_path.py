"""The documented compose path to a token: the token verbs need the database owner (the API's
role may not create tenants or tokens, by design), and compose's one owner service is `migrate`,
so `docker compose run --rm migrate tickwork token …` is the path. Checked here without a
Docker engine: the service is the owner, nothing in the image swallows the command, and the
CLI accepts the words. (tests/integration/test_token_cli.py runs the verbs as the owner and
as the API role against a real database.)"""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from tests.unit.test_compose import COMPOSE_FILE, DOCKERFILE, environment
from tickwork.cli import app

# The exact commands the README gives (kept here so a change to one is seen by the other).
COMPOSE_TOKEN_COMMANDS = [
    "docker compose run --rm migrate tickwork token create --tenant acme --admin",
    "docker compose run --rm migrate tickwork token create --operator",
    "docker compose run --rm migrate tickwork token list",
    "docker compose run --rm migrate tickwork token revoke TOKEN_OR_ID",
]


def services() -> dict:
    import yaml

    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def test_the_service_the_token_commands_run_in_logs_in_as_the_owner():
    found = services()
    for command in COMPOSE_TOKEN_COMMANDS:
        service = shlex.split(command)[4]
        url = urlsplit(environment(found[service])["TICKWORK_DATABASE_URL"])
        assert url.username == environment(found["postgres"])["POSTGRES_USER"], command


def test_the_image_has_no_entrypoint_so_run_replaces_the_command():
    assert not re.search(r"^\s*ENTRYPOINT", DOCKERFILE.read_text(), re.MULTILINE)


@pytest.mark.parametrize("command", COMPOSE_TOKEN_COMMANDS)
def test_the_cli_accepts_the_words(command):
    words = shlex.split(command)[6:]  # after `tickwork`
    done = CliRunner().invoke(app, words, env={"TICKWORK_DATABASE_URL": ""})
    # Parsed: it got as far as looking for the database (exit 1 with that sentence), not a
    # usage error (exit 2).
    assert done.exit_code == 1, done.output
    assert "set TICKWORK_DATABASE_URL" in done.output
