"""The stored words are one closed vocabulary (tickwork.sql.vocabulary): every event type,
status, outcome, verdict and breadcrumb the code writes or compares with is a known one, no
module keeps its own copy of a list, an unknown event type fails at emit, and DESIGN.md's
contract uses only those words. (That the database's CHECKs list the same words is
tests/integration/test_vocabulary_schema.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from uuid import uuid4

import pytest

from tickwork.sql import vocabulary as v
from tickwork.sql.journal import RunJournal
from tickwork.sql.vocabulary import UnknownWord, check_event_type

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("sql", "scheduler", "worker", "tickwork")


def code_files() -> list[Path]:
    """The project's Python modules as they are on disk (new modules included)."""
    return sorted(path for folder in CODE_FOLDERS for path in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in path.parts)


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def emitted_types(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, type) for every string constant given as an event type: the first argument (or
    type=) of a call to .emit(...) or emit(...), and the "type" of a dict literal shaped like
    an event (it also has "payload" or "seq")."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name != "emit":
                continue
            given = [node.args[0]] if node.args else []
            given += [k.value for k in node.keywords if k.arg == "type"]
            found += [(node.lineno, _text(g)) for g in given if _text(g) is not None]
        elif isinstance(node, ast.Dict):
            keys = {_text(k): value for k, value in zip(node.keys, node.values)}
            if "type" in keys and ({"payload", "seq"} & keys.keys()) and _text(keys["type"]):
                found.append((node.lineno, _text(keys["type"])))
    return found


def _is_event_type(node: ast.AST) -> bool:
    """event["type"], event.get("type"), or a variable named kind/type/event_type."""
    if isinstance(node, ast.Subscript):
        return _text(node.slice) == "type"
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get":
        return bool(node.args) and _text(node.args[0]) == "type"
    return isinstance(node, ast.Name) and node.id in {"kind", "type", "event_type"}


def compared_types(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, word) for every string an event's type is compared with (== or in (...))."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not _is_event_type(node.left):
            continue
        for right in node.comparators:
            items = right.elts if isinstance(right, (ast.Tuple, ast.Set, ast.List)) else [right]
            found += [(node.lineno, _text(i)) for i in items if _text(i) is not None]
    return found


def test_every_event_type_the_code_emits_is_in_the_vocabulary():
    emitted = {(str(path.relative_to(ROOT)), line, word) for path in code_files()
               for line, word in emitted_types(ast.parse(path.read_text(), str(path)))}
    # The scan must see the emitters (a scan that finds nothing proves nothing).
    assert len({word for _, _, word in emitted}) >= 10, emitted
    unknown = sorted(hit for hit in emitted if hit[2] not in v.EVENT_TYPES)
    assert unknown == [], f"event types outside sql/vocabulary.py EventType: {unknown}"


def test_every_event_type_a_journal_reader_branches_on_is_in_the_vocabulary():
    """A journal reader is a module that compares a type with at least one known event type
    (others compare a "type" or a "kind" of something else); a misspelt type there is a branch
    that silently never runs."""
    unknown, readers = [], []
    for path in code_files():
        hits = compared_types(ast.parse(path.read_text(), str(path)))
        if any(word in v.EVENT_TYPES for _, word in hits):
            readers.append(path.name)
            unknown += [(str(path.relative_to(ROOT)), line, word) for line, word in hits
                        if word not in v.EVENT_TYPES]
    assert len(readers) >= 3, readers  # the tail, the metrics, the CLI's run tree ...
    assert unknown == [], f"event types outside sql/vocabulary.py EventType: {unknown}"


def test_the_scan_catches_a_misspelt_event_type():
    source = ('journal.emit("tool_strat", {})\n'
              'rows = [{"seq": 1, "type": "run_compleet", "payload": {}}]\n'
              'if event["type"] == "gate_decison": pass\n'
              'if kind in ("model_usage", "context_mask"): pass\n')
    tree = ast.parse(source)
    words = [w for _, w in emitted_types(tree) + compared_types(tree)]
    assert [w for w in words if w not in v.EVENT_TYPES] == [
        "tool_strat", "run_compleet", "gate_decison", "context_mask"]


# Where the code writes a status, outcome or verdict as a literal: the constructor or method,
# and for each word the position or keyword it is given at, and its vocabulary.
WRITERS = {
    "RunOutcome": [(0, "status", v.FINAL_STATUSES), (1, "outcome", v.OUTCOMES)],
    "GateDecision": [(0, "verdict", v.GATE_VERDICTS), (2, "outcome", v.OUTCOMES)],
    "Finish": [(2, "status", v.FINAL_STATUSES), (3, "outcome", v.OUTCOMES)],
    "finish": [(None, "status", v.FINAL_STATUSES), (None, "outcome", v.OUTCOMES)],
    "SkippedFire": [(1, "reason", v.SKIP_REASONS)],
    "_skip_all": [(3, "reason", v.SKIP_REASONS)],
}
# The words of an event's payload that are stored words themselves.
PAYLOAD_WORDS = {("gate_decision", "verdict"): v.GATE_VERDICTS,
                 ("run_complete", "status"): v.FINAL_STATUSES,
                 ("run_complete", "outcome"): v.OUTCOMES}


# Keys whose literal value is a stored word wherever a dict or a keyword gives one ("status"
# is not among them: it is also an HTTP health word and a CLI option name).
KEYED_WORDS = {"outcome": v.OUTCOMES, "breadcrumb": v.BREADCRUMBS, "verdict": v.GATE_VERDICTS,
               "trigger_type": v.TRIGGER_TYPES, "trigger_source": v.TRIGGER_SOURCES}


def written_words(tree: ast.AST) -> list[tuple[int, str, str, frozenset[str]]]:
    """(line, what, word, vocabulary) for every literal status, outcome or verdict written
    through WRITERS, into an event payload named in PAYLOAD_WORDS, or under a KEYED_WORDS key
    of a dict literal or a call's keyword."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found += [(node.lineno, _text(k), _text(value), KEYED_WORDS[_text(k)])
                      for k, value in zip(node.keys, node.values)
                      if _text(k) in KEYED_WORDS and _text(value) is not None]
        if not isinstance(node, ast.Call):
            continue
        found += [(node.lineno, k.arg, _text(k.value), KEYED_WORDS[k.arg]) for k in node.keywords
                  if k.arg in KEYED_WORDS and _text(k.value) is not None]
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        for position, keyword, words in WRITERS.get(name, []):
            given = [k.value for k in node.keywords if k.arg == keyword]
            if position is not None and len(node.args) > position:
                given.append(node.args[position])
            found += [(node.lineno, f"{name} {keyword}", _text(g), words) for g in given
                      if _text(g) is not None]
        if name == "emit" and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
            payload = {_text(k): value for k, value in zip(node.args[1].keys, node.args[1].values)}
            for (kind, key), words in PAYLOAD_WORDS.items():
                if _text(node.args[0]) == kind and _text(payload.get(key)) is not None:
                    found.append((node.lineno, f"{kind} {key}", _text(payload[key]), words))
    return found


def test_every_status_outcome_and_verdict_the_code_writes_is_in_its_vocabulary():
    written = [(str(path.relative_to(ROOT)), line, what, word, words)
               for path in code_files()
               for line, what, word, words in written_words(ast.parse(path.read_text()))]
    assert len({(what, word) for _, _, what, word, _ in written}) >= 15, written
    unknown = [hit[:4] for hit in written if hit[3] not in hit[4]]
    assert unknown == [], f"words outside their sql/vocabulary.py vocabulary: {unknown}"


def test_the_writer_scan_catches_a_misspelt_word():
    source = ('RunOutcome("complete", "done", None, "")\n'
              'GateDecision("stalled_out", True, "stalledout", "", None, False)\n'
              'journal.finish(status="failed", outcome="timedout")\n'
              'journal.emit("gate_decision", {"verdict": "plan_opened"})\n'
              'insert_run(fields={"trigger_type": "schedule", "trigger_source": "by_hand"})\n'
              'log.info("run_finished", breadcrumb="suspend")\n')
    found = written_words(ast.parse(source))
    assert sorted({word for _, _, word, words in found if word not in words}) == [
        "by_hand", "complete", "plan_opened", "stalledout", "suspend", "timedout"]


# A field compared with a literal word anywhere in the code, and the words it can hold.
# "status" names several columns (runs, approvals, schedules, agents, deliveries, plan steps,
# all within these), so it is checked against their union.
COMPARED_FIELDS = {
    "status": v.RUN_STATUSES | v.SHOWN_RUN_STATUSES | v.APPROVAL_STATUSES | v.SCHEDULE_STATUSES
    | v.AGENT_STATUSES | v.DELIVERY_STATUSES,
    "outcome": v.OUTCOMES, "breadcrumb": v.BREADCRUMBS, "verdict": v.GATE_VERDICTS,
    "overlap": v.OVERLAPS, "trigger_type": v.TRIGGER_TYPES, "trigger_source": v.TRIGGER_SOURCES,
}
# Fields of the same name that are not stored words: the embedded server's own status file.
NOT_STORED = {("tickwork/embedded.py", "status")}


def _field(node: ast.AST) -> str | None:
    """The field a comparison reads: row["f"], row.get("f"), obj.f or a variable f."""
    if isinstance(node, ast.Subscript):
        return _text(node.slice)
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
        return _text(node.args[0])
    return getattr(node, "attr", None) or getattr(node, "id", None)


def compared_fields(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, field, word) for every literal a COMPARED_FIELDS field is compared with."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or _field(node.left) not in COMPARED_FIELDS:
            continue
        for right in node.comparators:
            items = right.elts if isinstance(right, (ast.Tuple, ast.Set, ast.List)) else [right]
            found += [(node.lineno, _field(node.left), _text(i)) for i in items
                      if _text(i) is not None]
    return found


def test_every_status_outcome_or_breadcrumb_the_code_compares_with_is_a_known_word():
    hits = [(str(path.relative_to(ROOT)), line, name, word) for path in code_files()
            for line, name, word in compared_fields(ast.parse(path.read_text()))]
    checked = [hit for hit in hits if (hit[0], hit[2]) not in NOT_STORED]
    assert {hit[2] for hit in checked} >= {"status", "outcome", "breadcrumb", "verdict"}, checked
    unknown = [hit for hit in checked if hit[3] not in COMPARED_FIELDS[hit[2]]]
    assert unknown == [], f"words outside their sql/vocabulary.py vocabulary: {unknown}"


def test_the_comparison_scan_catches_a_misspelt_word():
    source = ('if run["breadcrumb"] == "suspend": pass\n'
              'if row.get("status") in ("failed", "canceled"): pass\n'
              'if decision.verdict == "done": pass\n')
    assert [w for _, name, w in compared_fields(ast.parse(source))
            if w not in COMPARED_FIELDS[name]] == ["suspend", "canceled"]


VOCABULARIES = {name: getattr(v, name) for name in dir(v)
                if name.isupper() and isinstance(getattr(v, name), frozenset)}


def spelt_vocabularies(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, vocabulary) for every Literal[...] or literal tuple, list or set of strings that
    spells a whole vocabulary: a second copy that would drift from the first."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        else:
            continue
        words = {_text(item) for item in items}
        found += [(node.lineno, name) for name, vocabulary in VOCABULARIES.items()
                  if None not in words and words == vocabulary]
    return sorted(set(found))  # a Literal's own tuple is the same copy


def test_no_module_keeps_its_own_copy_of_a_vocabulary():
    copies = [(str(path.relative_to(ROOT)), line, name) for path in code_files()
              if path.name != "vocabulary.py"
              for line, name in spelt_vocabularies(ast.parse(path.read_text()))]
    assert copies == [], f"import these from tickwork.sql.vocabulary instead: {copies}"
    assert spelt_vocabularies(ast.parse('S = Literal["skip", "allow"]\n'
                                        'E = ("approval.required", "approval.reminder", '
                                        '"run.failed", "run.completed", "run.cancelled")')) == [
        (1, "OVERLAPS"), (2, "WEBHOOK_EVENTS")]


def test_the_stop_gate_s_judge_verdicts_are_gate_verdicts():
    from tickwork.worker.stop_gate import VERDICTS
    assert set(VERDICTS) <= v.GATE_VERDICTS and len(VERDICTS) == 3


def test_the_run_trees_mark_only_known_gate_verdicts():
    from tickwork.run_tree import GATE_MARKS
    assert GATE_MARKS.keys() <= v.GATE_VERDICTS, GATE_MARKS.keys() - v.GATE_VERDICTS
    script = (ROOT / "scheduler/api/static/tree.js").read_text()
    marks = re.search(r"const GATE_MARKS = \{([^}]*)\}", script)
    assert marks is not None, "tree.js no longer has GATE_MARKS"
    keys = set(re.findall(r"([a-z_]+):", marks.group(1)))
    assert keys and keys <= v.GATE_VERDICTS, keys - v.GATE_VERDICTS


def test_the_viewer_knows_exactly_the_vocabulary_s_event_types():
    script = (ROOT / "scheduler/api/static/tree.js").read_text()
    listed = re.search(r"const EVENT_TYPES = \[([^\]]*)\]", script)
    assert listed is not None, "tree.js no longer lists EVENT_TYPES"
    assert set(re.findall(r'"([a-z_]+)"', listed.group(1))) == v.EVENT_TYPES
    compared = set(re.findall(r'type === "([a-z_]+)"', script))
    compared |= set(re.findall(r'case "([a-z_]+)":', script))
    assert compared and compared <= v.EVENT_TYPES, compared - v.EVENT_TYPES


def test_an_unknown_event_type_fails_at_emit_and_buffers_nothing():
    journal = RunJournal(None, uuid4(), uuid4(), next_seq=2, linger_seconds=None)
    with pytest.raises(UnknownWord, match=r"unknown journal event type 'tool_strat'.*tool_start"):
        journal.emit("tool_strat", {"tool": "demo.get_record"})
    assert journal._pending == [] and journal.emit("tool_start", {"tool": "x"}) == 2


def test_every_known_event_type_passes_the_check():
    assert [check_event_type(word) for word in sorted(v.EVENT_TYPES)] == sorted(v.EVENT_TYPES)


def test_each_frozenset_is_its_literal_s_words():
    pairs = [(v.RunStatus, v.RUN_STATUSES), (v.ShownRunStatus, v.SHOWN_RUN_STATUSES),
             (v.FinalStatus, v.FINAL_STATUSES),
             (v.Outcome, v.OUTCOMES), (v.EventType, v.EVENT_TYPES),
             (v.ApprovalStatus, v.APPROVAL_STATUSES), (v.Overlap, v.OVERLAPS),
             (v.GateVerdict, v.GATE_VERDICTS), (v.Breadcrumb, v.BREADCRUMBS)]
    for literal, words in pairs:
        assert frozenset(literal.__args__) == words
    assert v.FINAL_STATUSES < v.RUN_STATUSES
    assert v.SHOWN_RUN_STATUSES == v.RUN_STATUSES | {"waiting"}


# DESIGN.md (the fixed contract, kept beside the checkout, not in it) quoted word for word,
# whitespace folded: each claim is a fragment, the words it lists, the vocabulary they belong
# to, and whether the fragment lists that vocabulary whole.
DESIGN_CLAIMS = [
    ("`status` ∈ `queued|running|completed|failed|cancelled`",
     "queued running completed failed cancelled", v.RUN_STATUSES, True),
    ("`outcome` ∈ `done|question|stalled_out|hard_stop|timed_out|cancelled|failed|null`",
     "done question stalled_out hard_stop timed_out cancelled failed", v.OUTCOMES, True),
    ("`breadcrumb` is `suspended` while the run waits for an approval",
     "suspended", v.BREADCRUMBS, False),
    ("Every run writes events in order: `run_start`, `step_start`, `reasoning_delta`, "
     "`tool_start`, `tool_complete`, `content_delta`, `budget_refusal`, `gate_decision`, "
     "`approval_required`, `run_complete`.",
     "run_start step_start reasoning_delta tool_start tool_complete content_delta "
     "budget_refusal gate_decision approval_required run_complete", v.EVENT_TYPES, False),
    ("Executed tool calls journal `tool_start` + `tool_complete`",
     "tool_start tool_complete", v.EVENT_TYPES, False),
    ("refused calls journal `budget_refusal`", "budget_refusal", v.EVENT_TYPES, False),
    ("each stop decision journals `gate_decision`", "gate_decision", v.EVENT_TYPES, False),
    ('"status": "pending|approved|rejected"', "pending approved rejected",
     v.APPROVAL_STATUSES, False),
    ("its pending approvals `cancelled`", "cancelled", v.APPROVAL_STATUSES, False),
    ('"overlap"?: "skip"|"allow"', "skip allow", v.OVERLAPS, True),
    ("An agent with status `paused` refuses new runs", "paused", v.AGENT_STATUSES, False),
    ("a `draft` agent can be run by hand", "draft", v.AGENT_STATUSES, False),
    # Not whole: the third round adds a reminder webhook ("a reminder webhook fires once
    # halfway"), approval.reminder.
    ('"events": ["approval.required", "run.failed", "run.completed", "run.cancelled"]',
     "approval.required run.failed run.completed run.cancelled", v.WEBHOOK_EVENTS, False),
    ("(`done`, `question`, `stalled`, or any other string",
     "done question stalled", v.GATE_VERDICTS, False),
]


def _folded(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("fragment, words, vocabulary, whole", DESIGN_CLAIMS,
                         ids=[claim[1].split()[0] for claim in DESIGN_CLAIMS])
def test_design_contract_words_are_in_the_vocabularies(fragment, words, vocabulary, whole):
    listed = set(words.split())
    for word in listed:  # the words really are the fragment's (no slip in this table)
        assert re.search(rf"(?<![\w.]){re.escape(word)}(?![\w.])", fragment), word
    assert listed <= vocabulary, sorted(listed - vocabulary)
    if whole:
        assert listed == vocabulary, sorted(vocabulary - listed)


def test_the_quoted_claims_are_still_design_s_words():
    design = next((p for p in (ROOT / "DESIGN.md", ROOT.parent / "shared" / "DESIGN.md")
                   if p.exists()), None)
    if design is None:
        pytest.skip("DESIGN.md is not beside this checkout; the quoted claims stand alone")
    text = _folded(design.read_text())
    missing = [fragment for fragment, *_ in DESIGN_CLAIMS if _folded(fragment) not in text]
    assert missing == []


def test_the_viewer_s_status_filter_offers_exactly_the_statuses_runs_are_shown_with():
    script = (ROOT / "scheduler/api/static/runs.js").read_text()
    listed = re.search(r"const RUN_STATUSES = \[([^\]]*)\]", script)
    assert listed is not None, "runs.js no longer lists RUN_STATUSES"
    assert set(re.findall(r'"([a-z_]+)"', listed.group(1))) == v.SHOWN_RUN_STATUSES
