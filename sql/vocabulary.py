"""The closed vocabularies of tickwork's stored words: run status and outcome, journal event
types, approval, schedule and agent statuses, and the rest, as ``Literal`` types (so a typo is
a type error) with a frozenset of each for checks at run time.

Where the database has a CHECK listing the same words, tests/integration/test_vocabulary_schema.py
holds the two equal, so a new word is added in a migration and here together. Payload words
that no column stores (gate verdicts, breadcrumbs) are listed here alone.
"""

from __future__ import annotations

from typing import Literal, get_args

# executions.status (executions_status_check). A run waiting for a person is stored completed
# with the breadcrumb 'suspended'.
RunStatus = Literal["queued", "running", "completed", "failed", "cancelled"]
RUN_STATUSES: frozenset[str] = frozenset(get_args(RunStatus))

# A run's status as every answer, list, filter and page shows it: the stored status, except
# that a run waiting for a person (completed, breadcrumb 'suspended') is 'waiting' (sql
# list_executions filters by it; scheduler/runs.py shown_status maps it).
ShownRunStatus = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]
SHOWN_RUN_STATUSES: frozenset[str] = frozenset(get_args(ShownRunStatus))

# The statuses a run can end with (what a worker or a sweep writes at the end).
FinalStatus = Literal["completed", "failed", "cancelled"]
FINAL_STATUSES: frozenset[str] = frozenset(get_args(FinalStatus))

# executions.outcome (executions_outcome_check); NULL until the run ends, and while suspended.
Outcome = Literal["done", "question", "stalled_out", "hard_stop", "timed_out", "cancelled",
                  "failed"]
OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))

# executions.breadcrumb: why a run is where it is, when its status alone does not say. A run
# waiting out a model outage is stored running with the breadcrumb 'parked' (no worker holds it).
Breadcrumb = Literal["suspended", "released", "parked"]
BREADCRUMBS: frozenset[str] = frozenset(get_args(Breadcrumb))

# executions.trigger_type and trigger_source.
TriggerType = Literal["chat", "run", "schedule"]
TRIGGER_TYPES: frozenset[str] = frozenset(get_args(TriggerType))
TriggerSource = Literal["cron", "manual", "api"]
TRIGGER_SOURCES: frozenset[str] = frozenset(get_args(TriggerSource))

# run_events.type (run_events_type_check): every event the journal stores.
EventType = Literal["run_start", "step_start", "reasoning_delta", "tool_start", "tool_complete",
                    "content_delta", "budget_refusal", "gate_decision", "approval_required",
                    "run_complete", "model_usage", "context_masked", "context_compacted",
                    "provider_wait"]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))

# The verdict of a gate_decision event (its payload's "verdict"): the stop gate's, the run
# loop's own stops, and "released" (a resumed run handed back to its pause at a worker's
# shutdown).
GateVerdict = Literal["done", "question", "stalled", "plan_open", "plan_complete", "hard_stop",
                      "cancelled", "stalled_out", "released"]
GATE_VERDICTS: frozenset[str] = frozenset(get_args(GateVerdict))

# approvals.status (approvals_status_check). 'expired': no decision within
# TICKWORK_APPROVAL_TTL_HOURS, its run ended cancelled (migration 0075).
ApprovalStatus = Literal["pending", "approved", "rejected", "cancelled", "expired"]
APPROVAL_STATUSES: frozenset[str] = frozenset(get_args(ApprovalStatus))

# schedules.overlap and schedules.status.
Overlap = Literal["skip", "allow"]
OVERLAPS: frozenset[str] = frozenset(get_args(Overlap))
ScheduleStatus = Literal["active", "paused"]
SCHEDULE_STATUSES: frozenset[str] = frozenset(get_args(ScheduleStatus))

# agents.status: a paused agent refuses runs; a draft one runs only by hand.
AgentStatus = Literal["active", "paused", "draft"]
AGENT_STATUSES: frozenset[str] = frozenset(get_args(AgentStatus))

# skipped_fires.reason.
SkipReason = Literal["coalesced", "overlap", "agent_inactive"]
SKIP_REASONS: frozenset[str] = frozenset(get_args(SkipReason))

# queue_tasks.kind: a fresh run, a run resumed after a person's decision, or a parked run taken
# back once its model may answer again.
TaskKind = Literal["run", "resume", "unpark"]
TASK_KINDS: frozenset[str] = frozenset(get_args(TaskKind))

# tool_catalog.tool_class: only read runs without a person (deny by default).
ToolClass = Literal["read", "send", "write", "delete"]
TOOL_CLASSES: frozenset[str] = frozenset(get_args(ToolClass))

# webhooks.events and webhook_deliveries.type; webhook_deliveries.status.
# approval.reminder: once, halfway through an approval's TTL (migration 0075).
WebhookEvent = Literal["approval.required", "approval.reminder", "run.failed", "run.completed",
                       "run.cancelled"]
WEBHOOK_EVENTS: frozenset[str] = frozenset(get_args(WebhookEvent))
DeliveryStatus = Literal["pending", "delivered", "failed"]
DELIVERY_STATUSES: frozenset[str] = frozenset(get_args(DeliveryStatus))


class UnknownWord(ValueError):
    """A word outside its vocabulary reached a place that stores it (a typo in the code)."""


def check_event_type(value: str) -> str:
    """The event type itself, or UnknownWord naming it and the known ones: an unknown type
    must fail where it is emitted, not as a CHECK violation when the batch is appended later
    (which would lose the whole batch, and the run's other events with it)."""
    if value not in EVENT_TYPES:
        raise UnknownWord(f"unknown journal event type {value!r}; the known types are "
                          f"{', '.join(sorted(EVENT_TYPES))} (sql/vocabulary.py EventType; a new "
                          "one needs a migration that extends run_events_type_check)")
    return value
