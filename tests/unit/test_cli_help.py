"""Help screens people can read: no Python type names (`<bool>`, `<list[Path]>`) and no
`{agent}` placeholders on any of the `tickwork` verbs' help screens."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from tickwork.cli import app


def every_verb() -> list[list[str]]:
    def walk(command, path: list[str]) -> list[list[str]]:
        found = [path]
        for name, sub in getattr(command, "commands", {}).items():
            found += walk(sub, [*path, name])
        return found
    return walk(typer.main.get_command(app), [])


def test_no_help_screen_shows_python_types_or_braced_placeholders():
    runner = CliRunner()
    verbs = every_verb()
    assert ["schedule", "history"] in verbs and ["agent", "apply"] in verbs
    for verb in verbs:
        shown = runner.invoke(app, [*verb, "--help"], env={"COLUMNS": "120"})
        assert shown.exit_code == 0, (verb, shown.output)
        text = shown.output
        assert not re.search(r"<(bool|str|int|float|list\[|Path)", text), (verb, text)
        assert not re.search(r"\{\w+\}", text), (verb, text)


def test_arguments_show_the_names_the_readme_uses():
    shown = CliRunner().invoke(app, ["schedule", "run-now", "--help"], env={"COLUMNS": "120"})
    assert "SCHEDULE_ID" in shown.output
    shown = CliRunner().invoke(app, ["agent", "apply", "--help"], env={"COLUMNS": "120"})
    assert "FILE..." in shown.output
