"""Every agent has the local tools, listed or not; listing one changes nothing; each is
declared once (worker/tools/local.py LOCAL_TOOLS) and run through that declaration."""

import json
from uuid import uuid4

from tickwork.worker.model import ToolCall
from tickwork.worker.toolbox import ToolBox, ToolSet
from tickwork.worker.tools.local import LOCAL_TOOLS, QUERY_LOOP_TOOLS
from tickwork.worker.tools.registry import catalog

LOCAL = {"update_plan", "read_file", "query_file", "task_complete", "load_tools", "run_python"}


def toolbox(tools):
    return ToolBox(ToolSet.of({s.key: s for s in catalog()}, tools), pool=None, execution_id=uuid4(),
                   plan={}, offload_threshold=4000, preview_chars=800, redact=lambda v: v)


def names(box) -> set[str]:
    return {schema.name for schema in box.schemas()}


def test_an_agent_listing_no_local_tool_still_has_them_all():
    box = toolbox(["demo.get_record"])
    assert names(box) == {"demo.get_record"} | LOCAL
    assert all(box.spec(key).is_local for key in LOCAL)


def test_listing_a_local_tool_changes_nothing():
    assert names(toolbox(["demo.get_record", "query_file"])) == names(toolbox(["demo.get_record"]))
    assert names(toolbox([])) == LOCAL


def test_an_unlisted_vendor_tool_is_still_not_available():
    assert toolbox(["demo.get_record"]).spec("demo.send_message") is None


async def test_the_toolbox_runs_a_local_tool_through_its_one_declaration():
    """update_plan is declared once (worker/tools/local.py): the toolbox runs the handler its
    declaration names, with the run's plan, and validates the arguments its declaration gives."""
    plan = {"steps": []}
    box = ToolBox(ToolSet.of({s.key: s for s in catalog()}, []), pool=None, execution_id=uuid4(), plan=plan,
                  offload_threshold=4000, preview_chars=800, redact=lambda v: v)
    spec = box.spec("update_plan")
    [declared] = [tool for tool in LOCAL_TOOLS if tool.name == "update_plan"]
    assert (spec.function, spec.arguments) == (declared.run, declared.arguments)
    steps = [{"title": "look", "status": "completed"}, {"title": "send", "status": "pending"}]
    outcome = await box.call(ToolCall("call_2_0", "update_plan", {"steps": steps}), spec, step=2)
    assert outcome.ok and json.loads(outcome.text) == {"ok": True, "open_steps": ["send"]}
    assert plan["steps"] == steps
    refused = await box.call(ToolCall("call_2_1", "update_plan", {"steps": [], "x": 1}), spec,
                             step=2)
    assert not refused.ok and "did NOT execute" in refused.text


def test_every_declared_local_tool_is_in_the_catalog_and_only_query_file_meets_a_wall():
    local = {spec.key: spec for spec in catalog() if spec.is_local}
    assert set(local) == {tool.name for tool in LOCAL_TOOLS} == LOCAL
    assert QUERY_LOOP_TOOLS == {"query_file"}
