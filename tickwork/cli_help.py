"""Help screens people can read: no Python type names (`<bool>`, `<list[Path]>`) or `{agent}`.

Typer (pinned at 0.29.1) prints each parameter's Python type beside it and wraps required
arguments in braces in the usage line. Here an option shows only the metavar it was given
(a flag shows nothing) and an argument shows its upper-case name, as click does.
"""

from __future__ import annotations

from typer import core


def _option_type(self: core.TyperOption, ctx) -> str | None:
    if self.is_flag or self.count:
        return None
    return self.metavar or _TYPE_WORDS.get(self.type_descriptor.annotation, "TEXT")


def _argument_type(self: core.TyperArgument, ctx) -> str | None:
    return None  # the argument's name (its metavar) already says what to give


def _argument_usage(self: core.TyperArgument) -> str:
    name = self.metavar or self.name.upper()
    if self.nargs != 1 and not name.endswith("..."):
        name += "..."
    return name if self.required else f"[{name}]"


_TYPE_WORDS = {int: "N", float: "NUMBER"}


def install() -> None:
    core.TyperOption.display_type_rich = _option_type
    core.TyperArgument.display_type_rich = _argument_type
    core.TyperArgument._usage_display_name = _argument_usage
    core.TyperArgument._rich_display_name = lambda self: self.metavar or self.name.upper()
