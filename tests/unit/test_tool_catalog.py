"""The tool catalog: vendors found by convention, one identity per tool name."""

import sys
import textwrap

from tickwork.worker.model import canonical_name, wire_name
from tickwork.worker.tools.registry import catalog, vendor_tools


def test_a_vendor_is_a_package_directory_and_its_marked_functions_are_its_tools(tmp_path, monkeypatch):
    root = tmp_path / "acme_vendors"
    (root / "weather").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "weather" / "__init__.py").write_text(textwrap.dedent('''
        from tickwork.worker.tools.registry import tool

        @tool("read")
        async def forecast(ctx, city: str, days: int = 3) -> dict:
            """The forecast for a city."""
            return {}

        async def helper(ctx) -> None:  # not marked: not a tool
            return None
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = {s.key: s for s in vendor_tools("acme_vendors")}
    assert list(specs) == ["weather.forecast"]
    forecast = specs["weather.forecast"]
    assert forecast.tool_class == "read" and not forecast.is_local
    assert forecast.parameters["required"] == ["city"]
    assert forecast.parameters["properties"]["days"]["default"] == 3
    sys.modules.pop("acme_vendors.weather", None)


def test_the_shipped_catalog_has_the_demo_vendor_and_the_local_tools():
    specs = {s.key: s for s in catalog()}
    assert {"demo.get_record", "demo.list_records", "demo.search_records",
            "demo.send_message"} <= set(specs)
    assert specs["demo.send_message"].tool_class == "send"
    assert {k for k, s in specs.items() if s.is_local} == {
        "update_plan", "task_complete", "load_tools", "read_file", "query_file", "run_python"}
    assert specs["query_file"].parameters["required"] == ["file_ref", "sql"]


def test_dotted_and_double_underscore_names_are_one_tool():
    assert canonical_name("demo__get_record") == canonical_name("demo.get_record") == "demo.get_record"
    assert wire_name("demo.get_record") == "demo__get_record"
    assert canonical_name("update_plan") == "update_plan"
