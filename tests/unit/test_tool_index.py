"""Tool names first, schemas when needed (worker/tool_index.py): what a call carries, what the
prompt lists, and what load_tools binds."""

from __future__ import annotations

import pytest

from tickwork.worker.tool_index import LISTED, bound_schemas, index_text, load
from tickwork.worker.tools.local import ToolInputError
from tickwork.worker.tools.registry import ToolSpec, catalog


def vendor(n: int) -> ToolSpec:
    return ToolSpec(key=f"acme.tool_{n:02d}", tool_class="read", is_local=False,
                    description=f"Does thing {n}.\nMore detail nobody needs up front.",
                    parameters={"type": "object", "properties": {"x": {"type": "integer"}}})


def specs(count: int) -> dict[str, ToolSpec]:
    local = {s.key: s for s in catalog() if s.is_local}
    return {**{vendor(n).key: vendor(n) for n in range(count)}, **local}


def test_a_call_carries_the_local_tools_and_the_loaded_ones_only():
    tools = specs(40)
    names = {schema.name for schema in bound_schemas(tools, ["acme.tool_07"])}
    assert names == {s.key for s in tools.values() if s.is_local} | {"acme.tool_07"}


def test_the_prompt_names_each_tool_not_loaded_with_the_first_line_of_its_description():
    text = index_text(specs(3), ["acme.tool_01"])
    assert "- acme__tool_00: Does thing 0." in text and "acme__tool_01" not in text
    assert "More detail" not in text and "load_tools" in text
    assert index_text(specs(2), ["acme.tool_00", "acme.tool_01"]) is None


def test_past_fifty_tools_the_prompt_says_how_many_more():
    text = index_text(specs(LISTED + 7), [])
    assert text.count("\n- ") == LISTED and text.endswith("(+7 more)")


def test_load_tools_binds_what_it_returns_in_one_call_and_names_the_unknown():
    tools, loaded = specs(5), []
    answer = load(tools, loaded, ["acme__tool_03", "acme.tool_01", "acme__tool_03", "nope",
                                  "update_plan"])
    assert [s["name"] for s in answer["loaded"]] == ["acme__tool_03", "acme__tool_01",
                                                     "acme__tool_03"]
    assert answer["loaded"][0]["parameters"]["properties"] == {"x": {"type": "integer"}}
    assert loaded == ["acme.tool_03", "acme.tool_01"] and answer["unknown"] == ["nope"]


@pytest.mark.parametrize("names", [[], "acme.tool_01", [1], ["x"] * 51, None])
def test_load_tools_refuses_names_that_are_not_a_short_list_of_text(names):
    with pytest.raises(ToolInputError, match="list of 1 to 50"):
        load(specs(2), [], names)
