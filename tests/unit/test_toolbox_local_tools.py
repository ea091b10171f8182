"""Every agent has the local tools, listed or not; listing one changes nothing."""

from uuid import uuid4

from tickwork.worker.toolbox import ToolBox
from tickwork.worker.tools.registry import catalog

LOCAL = {"update_plan", "read_file", "query_file", "task_complete"}


def toolbox(tools):
    return ToolBox({s.key: s for s in catalog()}, tools, pool=None, execution_id=uuid4(),
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
