"""Vendors users bring by entry point (worker/tools/plugins.py): a working plugin's tools
publish as name.tool; one that fails to import, has no tools, a bad name or a taken name costs
only its own tools, and the rest of the catalog stands."""

from __future__ import annotations

from importlib.metadata import EntryPoint

from tickwork import ToolContext, tool
from tickwork.worker.tools.plugins import GROUP, plugin_tools
from tickwork.worker.tools.registry import catalog


def entry(name: str, module: str) -> EntryPoint:
    return EntryPoint(name=name, value=module, group=GROUP)


def test_a_plugin_s_tools_publish_under_its_name_with_their_class_and_schema():
    [spec] = plugin_tools(taken=set(), found=[entry("whoami", "tests.plugins.working")])
    assert (spec.key, spec.tool_class, spec.is_local) == ("whoami.whoami", "read", False)
    assert spec.parameters["properties"] == {}
    assert spec.description == "The tenant and run of the call."


def test_a_broken_empty_misnamed_or_taken_plugin_costs_only_its_own_tools(capsys):
    found = [entry("broken", "tests.plugins.broken"), entry("empty", "tests.plugins.empty"),
             entry("Bad-Name", "tests.plugins.working"), entry("demo", "tests.plugins.working"),
             entry("missing", "tests.plugins.not_there"), entry("good", "tests.plugins.working")]
    specs = plugin_tools(taken={"demo.get_record", "update_plan"}, found=found)
    assert [s.key for s in specs] == ["good.whoami"]
    logged = capsys.readouterr().out
    for reason in ("failed to import: RuntimeError: this plugin needs a setting",
                   "has no @tool function", "not a vendor name", "'demo' is already taken",
                   "ModuleNotFoundError"):
        assert reason in logged


def test_two_plugins_under_one_name_keep_the_first_by_name_order():
    found = [entry("twice", "tests.plugins.working"), entry("twice", "tests.plugins.working")]
    assert [s.key for s in plugin_tools(taken=set(), found=found)] == ["twice.whoami"]


def test_the_public_names_for_plugin_authors_are_the_worker_s_own():
    from tickwork.worker.toolbox import ToolContext as Context
    from tickwork.worker.tools.registry import tool as marker

    assert (ToolContext, tool) == (Context, marker)


def test_the_catalog_without_plugins_installed_is_the_built_in_one():
    keys = {spec.key for spec in catalog()}
    assert {"demo.send_message", "update_plan"} <= keys
