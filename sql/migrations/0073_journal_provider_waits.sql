-- A model outage is waited out, not failed (DESIGN.md, third round): each wait of a run parked
-- through one is journaled as provider_wait {attempt, wait_seconds, reason, until}
-- (worker/outage.py). The CHECK is replaced whole (0030 says why); a later migration that adds
-- a type must list these too.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check CHECK (type IN (
    'run_start', 'step_start', 'reasoning_delta', 'tool_start', 'tool_complete',
    'content_delta', 'budget_refusal', 'gate_decision', 'approval_required', 'run_complete',
    'model_usage', 'context_masked', 'provider_wait'));
