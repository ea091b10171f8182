"""TICKWORK_TOOLS_FILE (DESIGN "Tools the user brings"): the MCP servers a worker connects to.
Every problem is one sentence naming the entry and the field, and a bad file stops `tickwork
worker` before it starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tickwork.worker.tools.mcp_config import (McpServerConfig, ToolsFileError, load_tools_file,
                                              parse_tools)

GOOD = """
mcp:
  - name: files
    command: [python, -m, files_server, /srv]
    tools: [read_file]
    classes: {read_file: read}
  - name: crm
    url: https://mcp.example.com/mcp
    headers: {Authorization: "secret:CRM_TOKEN", X-Team: ops}
    tools: [find]
"""


def test_a_good_file_gives_each_server(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(GOOD)
    files, crm = load_tools_file(str(path))
    assert files == McpServerConfig("files", ("python", "-m", "files_server", "/srv"), "", {},
                                    frozenset({"read_file"}), {"read_file": "read"})
    assert crm.url == "https://mcp.example.com/mcp" and crm.secret_headers
    assert not files.secret_headers


def test_no_file_set_means_no_servers(monkeypatch):
    monkeypatch.delenv("TICKWORK_TOOLS_FILE", raising=False)
    assert load_tools_file() == [] and parse_tools(None) == [] and parse_tools({"mcp": []}) == []


@pytest.mark.parametrize("data, words", [
    ([1], "mapping with one key, mcp"),
    ({"mcp": {"name": "x"}}, "mcp must be a list"),
    ({"mcp": ["x"]}, "mcp entry 1 must be a mapping"),
    ({"mcp": [{"name": "Bad-Name", "command": ["x"]}]}, "mcp entry 1: name must be"),
    ({"mcp": [{"name": "a", "command": ["x"], "env": {}}]}, "mcp entry 1 (a): unknown field 'env'"),
    ({"mcp": [{"name": "a"}]}, "mcp entry 1 (a): give exactly one of command"),
    ({"mcp": [{"name": "a", "command": ["x"], "url": "http://h/"}]}, "exactly one of command"),
    ({"mcp": [{"name": "a", "command": "python server.py"}]},
     "(a): command must be a non-empty list"),
    ({"mcp": [{"name": "a", "command": []}]}, "(a): command must be a non-empty list"),
    ({"mcp": [{"name": "a", "url": "ftp://h/x"}]}, "(a): url must be an http:// or https://"),
    ({"mcp": [{"name": "a", "command": ["x"], "headers": {"A": "b"}}]},
     "(a): headers are for url servers only"),
    ({"mcp": [{"name": "a", "url": "http://h/", "headers": {"A": "x\ny"}}]},
     "(a): headers: A must be one line"),
    ({"mcp": [{"name": "a", "url": "http://h/", "headers": {"A": "secret:"}, "tools": ["t"]}]},
     "(a): headers: A names no valid secret"),
    ({"mcp": [{"name": "a", "url": "http://h/", "headers": {"A": "secret:K"}}]},
     "(a): a server whose headers use a secret needs a tools list"),
    ({"mcp": [{"name": "a", "command": ["x"], "tools": "echo"}]}, "(a): tools must be a list"),
    ({"mcp": [{"name": "a", "command": ["x"], "classes": {"echo": "safe"}}]},
     "(a): classes: echo must be one of delete, read, send, write (got 'safe')"),
    ({"mcp": [{"name": "a", "command": ["x"]}, {"name": "a", "url": "http://h/"}]},
     "mcp entry 2 repeats the name 'a'"),
])
def test_each_problem_is_one_sentence_naming_the_entry_and_field(data, words):
    with pytest.raises(ToolsFileError) as caught:
        parse_tools(data, "tools.yaml")
    message = str(caught.value)
    assert words in message and message.startswith("tools.yaml") and "\n" not in message


def test_an_unreadable_or_unparsable_file_says_so(tmp_path):
    with pytest.raises(ToolsFileError, match="TICKWORK_TOOLS_FILE names .* cannot be read"):
        load_tools_file(str(tmp_path / "missing.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("mcp: [\n  {name: a,\n")
    with pytest.raises(ToolsFileError, match=r"is not valid YAML \(line \d+\)"):
        load_tools_file(str(broken))


def test_a_bad_file_stops_the_worker_at_start_with_its_sentence(tmp_path):
    from tickwork.cli import app

    path = tmp_path / "tools.yaml"
    path.write_text("mcp:\n  - name: crm\n    url: ftp://nowhere\n")
    shown = CliRunner().invoke(app, ["worker"], env={
        "TICKWORK_TOOLS_FILE": str(path),
        "TICKWORK_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "TICKWORK_DATABASE_WAIT_S": "0"})
    assert shown.exit_code == 1
    assert "mcp entry 1 (crm): url must be an http:// or https:// address" in shown.output
