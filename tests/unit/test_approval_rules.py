"""Which calls wait for a person: deny by default, the tool's own rule, the operator's list."""

from tickwork.worker.calls import CallPolicy, needs_approval
from tickwork.worker.tools.registry import ToolSpec
from tickwork.worker.walls import WallSettings


def policy(*auto_approve: str) -> CallPolicy:
    async def nothing(*_):
        return None
    return CallPolicy(WallSettings(), frozenset(auto_approve), nothing, nothing)


def spec(key: str, tool_class: str, *, local: bool = False, approval=None) -> ToolSpec:
    return ToolSpec(key, tool_class, local, "", {}, approval=approval)


def test_send_write_and_delete_need_approval_by_default_and_reads_do_not():
    for tool_class, expected in (("send", True), ("write", True), ("delete", True), ("read", False)):
        assert needs_approval(spec(f"crm.{tool_class}", tool_class), {}, policy()) is expected


def test_local_tools_never_wait_for_a_person():
    assert needs_approval(spec("update_plan", "write", local=True), {}, policy()) is False


def test_the_operators_auto_approve_list_wins():
    assert needs_approval(spec("mail.send", "send"), {}, policy("mail.send")) is False


def test_a_tool_may_declare_a_predicate_over_its_arguments():
    rule = lambda arguments: arguments.get("amount", 0) > 100
    refund = spec("pay.refund", "write", approval=rule)
    assert needs_approval(refund, {"amount": 500}, policy()) is True
    assert needs_approval(refund, {"amount": 5}, policy()) is False
    assert needs_approval(spec("cal.peek", "read", approval=True), {}, policy()) is True


def test_a_tool_with_no_class_waits_for_a_person():
    assert needs_approval(spec("crm.mystery", None), {}, policy()) is True
    assert needs_approval(spec("crm.blank", ""), {}, policy()) is True


def test_a_tool_with_an_unknown_class_waits_for_a_person():
    assert needs_approval(spec("crm.launch", "execute"), {}, policy()) is True
    assert needs_approval(spec("crm.launch", "READ"), {}, policy()) is True  # not exactly read


def test_a_tool_of_unknown_class_runs_unasked_only_when_auto_approved_or_its_rule_allows():
    assert needs_approval(spec("crm.launch", "execute"), {}, policy("crm.launch")) is False
    assert needs_approval(spec("crm.launch", None, approval=False), {}, policy()) is False


def test_local_tools_of_any_class_never_wait_even_unlisted_in_auto_approve():
    for key in ("update_plan", "task_complete", "read_file", "query_file"):
        assert needs_approval(spec(key, "write", local=True), {}, policy()) is False
