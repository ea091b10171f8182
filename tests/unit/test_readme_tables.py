"""The README is the manual: its Commands, HTTP API and Configuration tables list exactly the
CLI's verbs (from the typer app), the API's routes (from the FastAPI app's OpenAPI) and the
fields of every settings class (pydantic-settings), with their defaults, so they cannot drift."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import typer
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PACKAGES = ("scheduler", "worker", "sql", "tickwork")
# The OpenTelemetry SDK reads its own variables; failpoints exist for the tests alone (and
# only in test mode), so the manual leaves them out.
OTEL_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT"}
TEST_ONLY_ENV = {"TICKWORK_FAILPOINTS"}


def table_rows(heading: str) -> list[list[str]]:
    """The cells of the first table under a `## heading`, header and rule left out."""
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    rows = [re.split(r"(?<!\\)\|", line.strip().strip("|")) for line in lines[2:]]
    return [[cell.strip() for cell in row] for row in rows]


def code(cell: str) -> str:
    found = re.findall(r"`([^`]+)`", cell)
    assert found, f"a table cell without a `code` name: {cell!r}"
    return found[0]


# --- commands ---------------------------------------------------------------------------------

def cli_verbs() -> set[str]:
    from tickwork.cli import app

    # typer 0.29 carries its own click: groups are told by their commands, not by class.
    def walk(command, prefix: str) -> set[str]:
        if hasattr(command, "commands"):
            return set().union(*(walk(sub, f"{prefix} {name}".strip())
                                 for name, sub in command.commands.items()))
        return {prefix}
    return walk(typer.main.get_command(app), "")


def readme_verbs() -> list[str]:
    verbs = []
    for row in table_rows("Commands"):
        name = code(row[0])
        assert name.startswith("tickwork "), name
        verbs.append(name.removeprefix("tickwork "))
    return verbs


def test_the_commands_table_lists_every_verb_once_and_no_other():
    listed = readme_verbs()
    assert len(listed) == len(set(listed)), "a verb is listed twice"
    assert set(listed) == cli_verbs()


def test_every_verb_and_option_has_help_text():
    from tickwork.cli import app

    def walk(command, path: str) -> list[str]:
        missing = [] if (command.help or command.short_help) else [path or "tickwork"]
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                missing += walk(sub, f"{path} {name}".strip())
        else:
            missing += [f"{path} {p.name}" for p in command.params
                        if p.param_type_name == "option" and not p.help]
        return missing
    assert walk(typer.main.get_command(app), "") == []


# --- HTTP API ---------------------------------------------------------------------------------

def normal(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def api_routes() -> set[tuple[str, str]]:
    from tickwork.scheduler.api.app import create_app
    from tickwork.scheduler.settings import SchedulerSettings

    spec = create_app(SchedulerSettings(), database_url="postgresql://unused").openapi()
    return {(method.upper(), normal(path)) for path, operations in spec["paths"].items()
            for method in operations}


def readme_routes() -> list[tuple[str, str]]:
    routes = []
    for row in table_rows("HTTP API"):
        methods, path = code(row[0]).rsplit(" ", 1)
        routes += [(m.strip(), normal(path)) for m in methods.split(",")]
    return routes


def test_the_http_api_table_lists_every_route_once_and_no_other():
    listed = readme_routes()
    assert len(listed) == len(set(listed)), "a route is listed twice"
    assert set(listed) == api_routes()


# --- settings ---------------------------------------------------------------------------------

def settings_classes() -> list[type[BaseSettings]]:
    """Every pydantic-settings class of the project: each module that defines one is imported
    (found by its source), so a new settings module is covered without editing this test."""
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if re.search(r"^class \w+\(BaseSettings\)", path.read_text(), re.M):
                parts = path.relative_to(ROOT).with_suffix("").parts
                importlib.import_module(".".join(parts if package == "tickwork"
                                                 else ("tickwork", *parts)))

    def below(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]
    return [c for c in below(BaseSettings) if c.__module__.split(".")[0] == "tickwork"]


def settings_fields() -> dict[str, object]:
    fields = {}
    for cls in settings_classes():
        prefix = cls.model_config.get("env_prefix", "")
        for name, field in cls.model_fields.items():
            fields[f"{prefix}{name}".upper()] = field.default
    return fields


def plain_env() -> set[str]:
    """Variables read from the environment directly, not through a settings class (the data
    folder, the log level): every "TICKWORK_…" string in the code that is not a field."""
    named = {name for package in PACKAGES for path in (ROOT / package).rglob("*.py")
             for name in re.findall(r"[\"'](TICKWORK_[A-Z0-9_]+)[\"']", path.read_text())}
    return named - set(settings_fields()) - TEST_ONLY_ENV


def readme_settings() -> dict[str, str]:
    return {code(row[0]): row[1] for row in table_rows("Configuration")}


def test_the_settings_classes_are_found():
    names = {cls.__name__ for cls in settings_classes()}
    assert {"DatabaseSettings", "SchedulerSettings", "WorkerSettings", "ProviderSettings",
            "ClientSettings"} <= names


def test_the_configuration_table_lists_every_setting_and_no_other():
    listed = [code(row[0]) for row in table_rows("Configuration")]
    assert len(listed) == len(set(listed)), "a setting is listed twice"
    assert {"TICKWORK_DATA_DIR", "TICKWORK_LOG_LEVEL"} <= plain_env()
    assert set(listed) == set(settings_fields()) | plain_env() | OTEL_ENV


def test_the_configuration_table_gives_each_default_as_the_code_has_it():
    shown = readme_settings()
    for name, default in settings_fields().items():
        cell = shown[name]
        if default in ("", None):
            assert cell.startswith("none"), f"{name}: {cell!r}, the code has no default"
        elif isinstance(default, bool):
            assert code(cell) == str(default).lower(), f"{name}: {cell!r} != {default!r}"
        elif isinstance(default, (int, float)):
            assert float(code(cell)) == default, f"{name}: {cell!r} != {default!r}"
        else:
            assert code(cell) == str(default), f"{name}: {cell!r} != {default!r}"
