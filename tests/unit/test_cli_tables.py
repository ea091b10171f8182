"""CLI tables keep ids whole on a narrow terminal (people copy them from there): the other
columns fold onto more lines instead of the id being cut with an ellipsis."""

from __future__ import annotations

import io

from rich.console import Console

from tickwork.cli_resources import table
from tickwork.terminal_text import plain_cells

RUN_ID = "01a23069-0423-7157-87a0-aecf65e05979"
APPROVAL_ID = f"{RUN_ID}:call_5_0"


def test_ids_stay_whole_at_80_columns():
    shown = table("id", "agent", "trigger", "status", "outcome", "tokens in/out",
                  "scheduled for", "attempt")
    shown.add_row(*plain_cells(RUN_ID, "reporter", "schedule/manual", "waiting for approval",
                               "-", "12,345 / 678", "2026-12-01 07:01 CET", 1))
    approvals = table("id", "tool", "arguments (redacted)", "status", "asked")
    approvals.add_row(*plain_cells(APPROVAL_ID, "demo.send_message", '{"recipient": "ops"}',
                                   "pending", "2026-12-01 07:01 CET"))
    console = Console(file=io.StringIO(), width=80, markup=False, color_system=None)
    console.print(shown)
    console.print(approvals)
    text = console.file.getvalue()
    assert RUN_ID in text and APPROVAL_ID in text
    assert "…" not in text  # nothing is cut: narrow cells fold onto more lines
