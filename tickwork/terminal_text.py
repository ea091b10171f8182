"""Text from the API (a model's answer, a tool call's arguments, an error) made safe to print.

A model chooses much of what the CLI prints, and a terminal obeys control characters: ESC
starts sequences that clear the screen, move the cursor over earlier lines, set the title or
write the clipboard (OSC 52); a carriage return lets text overwrite what an approver was
meant to read; bidirectional overrides make text read differently than it is. So every
control character except newline and tab is shown as a visible symbol instead (ESC as ␛,
CR as ␍, C1 controls and bidi overrides as their \\u escape): the sequence stays readable to
the person, and harmless. Rich markup is the other trap: ``plain`` returns a ``Text``, which
rich never parses for markup, so ``[/]`` cannot crash a table and ``[conceal]`` cannot hide a
recipient.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text

_VISIBLE: dict[int, str] = {code: chr(0x2400 + code) for code in range(0x20)
                            if code not in (0x09, 0x0A)}  # ␀ … ␟, keeping tab and newline
_VISIBLE[0x7F] = "\u2421"  # ␡
_VISIBLE.update({code: f"\\u{code:04x}" for code in range(0x80, 0xA0)})  # C1: CSI, OSC, …
_VISIBLE.update({code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F),
                                                     *range(0x2066, 0x206A))})

# What json.dumps(ensure_ascii=False) leaves raw and a terminal would act on, as JSON escapes.
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in (0x7F, *range(0x80, 0xA0),
                                                      *range(0x202A, 0x202F),
                                                      *range(0x2066, 0x206A))}


def safe(value: Any) -> str:
    """The text with every terminal control character made visible and inert."""
    return str(value).translate(_VISIBLE)


def json_line(value: Any) -> str:
    """One JSON document on one line, readable (non-ASCII kept) and inert: json.dumps escapes
    C0 controls itself; DEL, C1 and bidi overrides become \\u escapes of the same JSON."""
    return json.dumps(value, ensure_ascii=False).translate(_JSON_ESCAPES)


def plain(value: Any, style: str = "") -> Text:
    """A rich ``Text`` of the value: never parsed as markup, controls made visible."""
    return Text(safe(value), style=style)


def plain_cells(*values: Any) -> list[Text]:
    """A table row of plain cells (None shows as "-")."""
    return [plain("-" if value is None else value) for value in values]
