-- A model outage is waited out, not failed (DESIGN.md, third round): a run whose model endpoint
-- is down (connection errors, 5xx, 429) is parked. Its state is saved in run_states, it keeps
-- status 'running' with the breadcrumb 'parked', no run token and no deadline (the sweep judges
-- only running runs past a deadline, so a parked one is never swept), and an 'unpark' task
-- whose available_at is the retry time takes it back. No worker holds it meanwhile.
--
-- Each wait is journaled as provider_wait. The CHECK is replaced whole (0030 says why); a later
-- migration that adds a type must list these too.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check CHECK (type IN (
    'run_start', 'step_start', 'reasoning_delta', 'tool_start', 'tool_complete',
    'content_delta', 'budget_refusal', 'gate_decision', 'approval_required', 'run_complete',
    'model_usage', 'context_masked', 'provider_wait'));

ALTER TABLE queue_tasks DROP CONSTRAINT queue_tasks_kind_check;
ALTER TABLE queue_tasks ADD CONSTRAINT queue_tasks_kind_check
    CHECK (kind IN ('run', 'resume', 'unpark'));
