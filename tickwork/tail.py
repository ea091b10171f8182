"""`tickwork tail RUN_ID`: follow a run's journal live and draw it as a tree.

The network side is ``tickwork.sse_follow``; the tree is ``tickwork.run_tree`` (pure).
"""

from __future__ import annotations

import sys

import httpx
import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape

from tickwork.client import err, fail
from tickwork.run_tree import build_view, render
from tickwork.settings import ClientSettings
from tickwork.sse_follow import READ_TIMEOUT_SECONDS, Ending, Follower, TailError
from tickwork.terminal_text import json_line, plain, safe

# --------------------------------------------------------------------------------------------
# The command


def tail_run(
    run_id: str = typer.Argument(..., help="The run's id (`tickwork runs` lists them)."),
    json_lines: bool = typer.Option(False, "--json",
                                    help="Print one event per line as JSON (seq order); no tree."),
) -> None:
    """Follow a run live as a tree: steps, tools, refusals, gate decisions, the answer.

    Reconnects from the last event it saw. Exit 0 when the run ends done, else 1."""
    settings = ClientSettings()
    if not settings.token:
        fail("set TICKWORK_TOKEN to an operator token (`tickwork up` prints one; "
             "`tickwork token create --tenant NAME` makes more)")
    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_SECONDS)
    with httpx.Client(base_url=settings.api_url, timeout=timeout,
                      headers={"Authorization": f"Bearer {settings.token}"}) as http:
        ending = _print_json(http, run_id) if json_lines else _draw(http, run_id)
    raise typer.Exit(0 if ending.outcome == "done" else 1)


def _print_json(http: httpx.Client, run_id: str) -> Ending:
    def emit(event: dict) -> None:
        sys.stdout.write(json_line(event) + "\n")  # model text: no raw controls
        sys.stdout.flush()

    try:
        return Follower(http, run_id, emit, on_retry=_note).run()
    except TailError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130)
    except BrokenPipeError:
        raise typer.Exit(1)


def _draw(http: httpx.Client, run_id: str) -> Ending:
    # Ids must stay whole when piped (rich would otherwise wrap the tree at 80 columns).
    console = Console(width=None if Console().is_terminal else 200)
    events: list[dict] = []
    follower = Follower(http, run_id, events.append,
                        on_retry=None if console.is_terminal else _note)

    def live_view() -> RenderableType:  # called by Live's refresh thread
        tree = render(build_view(run_id, list(events)), max_children=max(4, console.height // 3))
        problem = follower.problem
        return Group(tree, plain(problem, "yellow")) if problem else tree

    try:
        if console.is_terminal:
            with Live(console=console, get_renderable=live_view, refresh_per_second=8,
                      transient=True, redirect_stderr=False):
                follower.run()
        else:  # piped: one final tree at the end, no redraws
            follower.run()
    except TailError as exc:
        _print_final(console, run_id, events)
        fail(str(exc))
    except KeyboardInterrupt:
        _print_final(console, run_id, events)
        raise typer.Exit(130)
    _print_final(console, run_id, events)
    return follower.ending


def _note(text: str) -> None:
    err.print(f"[yellow]note:[/yellow] {escape(safe(text))}", highlight=False)


def _print_final(console: Console, run_id: str, events: list[dict]) -> None:
    if events:  # nothing received (an unknown run, a bad token): the error says it all
        console.print(render(build_view(run_id, list(events))), highlight=False)


